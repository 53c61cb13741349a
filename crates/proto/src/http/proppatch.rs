//! PROPPATCH bodies (RFC 4918 §9.2, §14.19): the sets and removes, in document order, each
//! set's value kept as the XML it arrived as (markup, entities and all) with the namespace
//! declarations its element carried, so it is given back as it was set.

use quick_xml::events::Event;
use quick_xml::NsReader;

use super::propfind::{namespace, PropName, XmlError, MAX_DEPTH, MAX_PROPS};

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    /// Set a property.
    Set {
        /// The property.
        name: PropName,
        /// ` xmlns…="…"` attributes of its element.
        decls: String,
        /// Its content, raw XML.
        xml: String,
    },
    /// Remove a property.
    Remove(PropName),
}

fn bad(why: impl Into<String>) -> XmlError {
    XmlError(why.into())
}

/// Parses a PROPPATCH body.
pub fn parse(body: &[u8]) -> Result<Vec<PatchOp>, XmlError> {
    let mut reader = NsReader::from_reader(body);
    let mut stack: Vec<PropName> = Vec::new();
    let mut ops = Vec::new();
    let mut seen_root = false;
    loop {
        let (ns, event) = reader
            .read_resolved_event()
            .map_err(|e| bad(e.to_string()))?;
        match event {
            Event::DocType(_) => return Err(bad("DOCTYPE is not accepted")),
            Event::Start(ref e) | Event::Empty(ref e) => {
                let name = PropName {
                    ns: namespace(&ns)?,
                    local: String::from_utf8_lossy(e.local_name().as_ref()).into_owned(),
                };
                let empty = matches!(event, Event::Empty(_));
                match stack.len() {
                    0 if !seen_root && name == PropName::dav("propertyupdate") => seen_root = true,
                    0 => return Err(bad("the root element is not DAV:propertyupdate")),
                    3 if stack[2] == PropName::dav("prop")
                        && (stack[1] == PropName::dav("set")
                            || stack[1] == PropName::dav("remove")) =>
                    {
                        if ops.len() >= MAX_PROPS {
                            return Err(bad("too many properties"));
                        }
                        let mut decls = String::new();
                        for a in e.attributes() {
                            let a = a.map_err(|e| bad(e.to_string()))?;
                            let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
                            if key == "xmlns" || key.starts_with("xmlns:") {
                                let value = String::from_utf8_lossy(&a.value).into_owned();
                                decls.push_str(&format!(" {key}=\"{value}\""));
                            }
                        }
                        let xml = if empty {
                            String::new()
                        } else {
                            let span = reader
                                .read_to_end(e.name())
                                .map_err(|e| bad(e.to_string()))?;
                            let (start, end) = (span.start as usize, span.end as usize);
                            let raw = body.get(start..end).ok_or_else(|| bad("bad span"))?;
                            String::from_utf8(raw.to_vec())
                                .map_err(|_| bad("a value is not UTF-8"))?
                        };
                        if stack[1] == PropName::dav("set") {
                            ops.push(PatchOp::Set { name, decls, xml });
                        } else {
                            ops.push(PatchOp::Remove(name));
                        }
                        // The element was read to its end: it is not pushed.
                        continue;
                    }
                    _ => {}
                }
                if !empty {
                    if stack.len() >= MAX_DEPTH {
                        return Err(bad("nested too deeply"));
                    }
                    stack.push(name);
                }
            }
            Event::End(_) => {
                stack.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !stack.is_empty() || !seen_root {
        return Err(bad("the document is not complete"));
    }
    if ops.is_empty() {
        return Err(bad("DAV:propertyupdate names no property"));
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(ns: &str, local: &str) -> PropName {
        PropName {
            ns: ns.into(),
            local: local.into(),
        }
    }

    #[test]
    fn sets_and_removes_come_in_document_order_with_raw_values() {
        let ops = parse(
            br#"<?xml version="1.0"?><D:propertyupdate xmlns:D="DAV:" xmlns:Z="http://z/"><D:remove><D:prop><Z:x/></D:prop></D:remove><D:set><D:prop><Z:x>a &amp; &#65536;</Z:x><nonamespace xmlns="">v</nonamespace><Z:w><foo xmlns='http://bar'/></Z:w></D:prop></D:set></D:propertyupdate>"#,
        )
        .unwrap();
        assert_eq!(ops[0], PatchOp::Remove(name("http://z/", "x")));
        assert_eq!(
            ops[1],
            PatchOp::Set {
                name: name("http://z/", "x"),
                decls: String::new(),
                xml: "a &amp; &#65536;".into()
            }
        );
        assert_eq!(
            ops[2],
            PatchOp::Set {
                name: name("", "nonamespace"),
                decls: " xmlns=\"\"".into(),
                xml: "v".into()
            }
        );
        assert!(matches!(&ops[3], PatchOp::Set { xml, .. } if xml == "<foo xmlns='http://bar'/>"));
    }

    #[test]
    fn bodies_that_are_not_a_propertyupdate_are_refused() {
        assert!(parse(b"<foo/>").is_err());
        assert!(parse(br#"<D:propertyupdate xmlns:D="DAV:"/>"#).is_err());
        assert!(
            parse(br#"<!DOCTYPE x [<!ENTITY a "b">]><D:propertyupdate xmlns:D="DAV:"/>"#).is_err()
        );
        assert!(parse(br#"<D:propertyupdate xmlns:D="DAV:"><D:set><D:prop><x:a>"#).is_err());
    }
}
