//! PROPPATCH bodies (RFC 4918 §9.2, §14.19): the sets and removes, in document order, each
//! set's value kept as the XML it arrived as (markup, entities and all) with the namespace
//! declarations its element carried, so it is given back as it was set.

use super::davxml::Walk;
use super::propfind::{PropName, XmlError, MAX_PROPS};

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
    let mut walk = Walk::new(body, "propertyupdate", false);
    let mut ops = Vec::new();
    while let Some(e) = walk.next()? {
        let open = &walk.open;
        let (set, remove) = (PropName::dav("set"), PropName::dav("remove"));
        if open.len() == 3
            && open[2] == PropName::dav("prop")
            && (open[1] == set || open[1] == remove)
        {
            let is_set = open[1] == set;
            if ops.len() >= MAX_PROPS {
                return Err(bad("too many properties"));
            }
            let mut decls = String::new();
            for a in e.start.attributes() {
                let a = a.map_err(|e| bad(e.to_string()))?;
                let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
                if key == "xmlns" || key.starts_with("xmlns:") {
                    let value = String::from_utf8_lossy(&a.value).into_owned();
                    decls.push_str(&format!(" {key}=\"{value}\""));
                }
            }
            // The element is read to its end here, not entered.
            let span = walk.skip(&e)?;
            let raw = body.get(span).ok_or_else(|| bad("bad span"))?;
            let xml = String::from_utf8(raw.to_vec()).map_err(|_| bad("a value is not UTF-8"))?;
            ops.push(if is_set {
                PatchOp::Set {
                    name: e.name,
                    decls,
                    xml,
                }
            } else {
                PatchOp::Remove(e.name)
            });
            continue;
        }
        walk.enter(e.name, e.empty)?;
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
