//! PROPFIND request bodies (RFC 4918 §9.1, §14.20) and the `207 Multi-Status` answer the door
//! writes, one `response` at a time so that a large collection streams.
//!
//! Bodies are parsed with quick-xml, which never expands entities a document declares; a
//! document with a DOCTYPE is refused outright, so entity tricks ("billion laughs") never start.

use super::dav::xml_escape;
use super::davxml::Walk;
pub use super::davxml::{PropName, XmlError, DAV, MAX_DEPTH};

/// Most properties one request may name.
pub const MAX_PROPS: usize = 256;

/// What a PROPFIND asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Propfind {
    /// Every live property (an empty body means this too).
    AllProp,
    /// Property names only.
    PropName,
    /// These properties.
    Props(Vec<PropName>),
}

fn bad(why: impl Into<String>) -> XmlError {
    XmlError(why.into())
}

/// Parses a PROPFIND body.
pub fn parse(body: &[u8]) -> Result<Propfind, XmlError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Propfind::AllProp);
    }
    let mut walk = Walk::new(body, "propfind", true);
    let mut result: Option<Propfind> = None;
    let mut props = Vec::new();
    while let Some(e) = walk.next()? {
        match walk.open.len() {
            1 if e.name.ns == DAV => match e.name.local.as_str() {
                "allprop" => result = result.or(Some(Propfind::AllProp)),
                "propname" => result = result.or(Some(Propfind::PropName)),
                "prop" => result = result.or(Some(Propfind::Props(Vec::new()))),
                _ => {}
            },
            2 if walk.open[1] == PropName::dav("prop") => {
                if props.len() >= MAX_PROPS {
                    return Err(bad("too many properties"));
                }
                props.push(e.name.clone());
            }
            _ => {}
        }
        walk.enter(e.name, e.empty)?;
    }
    Ok(match result {
        Some(Propfind::Props(_)) => Propfind::Props(props),
        Some(r) => r,
        None => return Err(bad("DAV:propfind names neither prop, allprop nor propname")),
    })
}

/// The start of a multistatus body.
pub const MULTISTATUS_START: &str =
    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\">\n";
/// Its end.
pub const MULTISTATUS_END: &str = "</D:multistatus>\n";

/// One property and its value, as XML content (already escaped, or markup).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropValue {
    /// The property.
    pub name: PropName,
    /// Namespace declarations its element carried when it was set (` xmlns:a="…"`), which its
    /// content may use.
    pub decls: String,
    /// Its content; empty for an empty element.
    pub xml: String,
}

/// The opening tag of `name` (with its namespace declared where it is not DAV:), and the
/// matching closing tag.
fn tags(name: &PropName) -> (String, String) {
    let local = &name.local;
    if name.ns == DAV {
        (format!("<D:{local}"), format!("</D:{local}>"))
    } else if name.ns.is_empty() {
        // No default namespace is declared anywhere in these answers: an unprefixed name is
        // in no namespace as it stands.
        (format!("<{local}"), format!("</{local}>"))
    } else {
        (
            format!("<fp:{local} xmlns:fp=\"{}\"", xml_escape(&name.ns)),
            format!("</fp:{local}>"),
        )
    }
}

/// One `D:response`: the properties found (200) and those not (404), each in one propstat,
/// found first (davix keeps the first 2xx propstat).
pub fn response(href: &str, found: &[PropValue], missing: &[PropName]) -> String {
    let mut out = format!("<D:response><D:href>{}</D:href>", xml_escape(href));
    if !found.is_empty() {
        out.push_str("<D:propstat><D:prop>");
        for p in found {
            let (open, close) = tags(&p.name);
            out.push_str(&open);
            out.push_str(&p.decls);
            if p.xml.is_empty() {
                out.push_str("/>");
            } else {
                out.push('>');
                out.push_str(&p.xml);
                out.push_str(&close);
            }
        }
        out.push_str("</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>");
    }
    if !missing.is_empty() {
        out.push_str("<D:propstat><D:prop>");
        for name in missing {
            out.push_str(&tags(name).0);
            out.push_str("/>");
        }
        out.push_str("</D:prop><D:status>HTTP/1.1 404 Not Found</D:status></D:propstat>");
    }
    out.push_str("</D:response>\n");
    out
}

/// The `D:response` of a PROPPATCH refused as a whole: `403` for the properties `forbidden`
/// names, `424 Failed Dependency` for the rest (RFC 4918 §9.2.1).
pub fn patch_failure(
    href: &str,
    names: &[PropName],
    forbidden: impl Fn(&PropName) -> bool,
) -> String {
    let mut out = format!("<D:response><D:href>{}</D:href>", xml_escape(href));
    for (status, pick) in [("403 Forbidden", true), ("424 Failed Dependency", false)] {
        let chosen: Vec<&PropName> = names.iter().filter(|n| forbidden(n) == pick).collect();
        if chosen.is_empty() {
            continue;
        }
        out.push_str("<D:propstat><D:prop>");
        for name in chosen {
            out.push_str(&tags(name).0);
            out.push_str("/>");
        }
        out.push_str(&format!(
            "</D:prop><D:status>HTTP/1.1 {status}</D:status></D:propstat>"
        ));
    }
    out.push_str("</D:response>\n");
    out
}

/// A `D:response` with a status only (a member that failed, in a DELETE or COPY answer).
pub fn status_response(href: &str, status: &str) -> String {
    format!(
        "<D:response><D:href>{}</D:href><D:status>HTTP/1.1 {status}</D:status></D:response>\n",
        xml_escape(href)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn propfind_bodies_parse_to_what_they_ask() {
        assert_eq!(parse(b"").unwrap(), Propfind::AllProp);
        assert_eq!(
            parse(br#"<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:allprop/></D:propfind>"#)
                .unwrap(),
            Propfind::AllProp
        );
        let p = parse(
            br#"<propfind xmlns="DAV:"><prop><getcontentlength/><x:foo xmlns:x="http://e/"/></prop></propfind>"#,
        )
        .unwrap();
        assert_eq!(
            p,
            Propfind::Props(vec![
                PropName::dav("getcontentlength"),
                PropName {
                    ns: "http://e/".into(),
                    local: "foo".into()
                }
            ])
        );
    }

    #[test]
    fn invalid_bodies_are_refused_as_litmus_expects() {
        assert!(parse(b"<foo>").is_err());
        assert!(parse(br#"<bar:foo xmlns:bar=""/>"#).is_err());
        assert!(parse(br#"<D:propfind xmlns:D="DAV:"></D:propfind>"#).is_err());
        assert!(parse(br#"<x:propfind xmlns:x="DAV:"><y:prop/></x:propfind>"#).is_err());
    }

    #[test]
    fn entity_declarations_are_refused_not_expanded() {
        let bomb = br#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]><D:propfind xmlns:D="DAV:"><D:prop><D:x>&lol2;</D:x></D:prop></D:propfind>"#;
        assert!(parse(bomb).is_err());
        let deep = format!(
            "<D:propfind xmlns:D=\"DAV:\">{}{}</D:propfind>",
            "<a>".repeat(100),
            "</a>".repeat(100)
        );
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn responses_put_found_before_missing_and_declare_namespaces() {
        let r = response(
            "/a b",
            &[PropValue {
                name: PropName::dav("resourcetype"),
                decls: String::new(),
                xml: "<D:collection/>".into(),
            }],
            &[PropName {
                ns: "http://e/".into(),
                local: "foo".into(),
            }],
        );
        assert!(r.starts_with("<D:response><D:href>/a b</D:href><D:propstat><D:prop><D:resourcetype><D:collection/></D:resourcetype>"));
        assert!(r.contains("<fp:foo xmlns:fp=\"http://e/\"/>"));
        assert!(r.find("200 OK").unwrap() < r.find("404 Not Found").unwrap());
    }
}
