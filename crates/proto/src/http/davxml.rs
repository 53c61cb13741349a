//! The walk both WebDAV request bodies (PROPFIND, PROPPATCH) take through their XML: elements
//! named by namespace and local name, the root checked, nesting bounded, DOCTYPEs refused (so
//! entity tricks never start: quick-xml expands no declared entity anyway), and the document
//! required to be complete.

use std::ops::Range;

use quick_xml::events::{BytesStart, Event};
use quick_xml::NsReader;

use quick_xml::name::ResolveResult;

/// The DAV: namespace.
pub const DAV: &str = "DAV:";
/// Deepest element nesting read.
pub const MAX_DEPTH: usize = 32;
/// A property's qualified name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PropName {
    /// Namespace URI (`DAV:`; empty for no namespace).
    pub ns: String,
    /// Local name.
    pub local: String,
}

impl PropName {
    /// A DAV: property.
    pub fn dav(local: &str) -> PropName {
        PropName {
            ns: DAV.into(),
            local: local.into(),
        }
    }
}

/// A body that is not a PROPFIND we can answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid PROPFIND body: {0}")]
pub struct XmlError(pub String);

/// A namespace URI, refusing prefixes bound to nothing.
pub(crate) fn namespace(r: &ResolveResult<'_>) -> Result<String, XmlError> {
    match r {
        ResolveResult::Bound(ns) => {
            if ns.as_ref().is_empty() {
                return Err(bad("a prefix bound to the empty namespace"));
            }
            Ok(String::from_utf8_lossy(ns.as_ref()).into_owned())
        }
        ResolveResult::Unbound => Ok(String::new()),
        ResolveResult::Unknown(p) => Err(bad(format!(
            "undeclared prefix {}",
            String::from_utf8_lossy(p)
        ))),
    }
}

fn bad(why: impl Into<String>) -> XmlError {
    XmlError(why.into())
}

/// An element start the walk met.
#[derive(Debug)]
pub(crate) struct Element<'i> {
    pub(crate) name: PropName,
    /// `<x/>`: nothing inside, no end to come.
    pub(crate) empty: bool,
    pub(crate) start: BytesStart<'i>,
}

/// A body's elements in document order, with the path of open ones.
#[derive(Debug)]
pub(crate) struct Walk<'i> {
    reader: NsReader<&'i [u8]>,
    /// The open elements, outermost first.
    pub(crate) open: Vec<PropName>,
    root: &'static str,
    seen_root: bool,
}

impl<'i> Walk<'i> {
    /// A walk over `body`, whose root must be `DAV:root`.
    pub(crate) fn new(body: &'i [u8], root: &'static str, trim: bool) -> Walk<'i> {
        let mut reader = NsReader::from_reader(body);
        reader.config_mut().trim_text(trim);
        Walk {
            reader,
            open: Vec::new(),
            root,
            seen_root: false,
        }
    }

    /// The next element start below the root (`None` at the end of a complete document).
    /// The caller [enters](Walk::enter) it or [skips](Walk::skip) it.
    pub(crate) fn next(&mut self) -> Result<Option<Element<'i>>, XmlError> {
        loop {
            let (ns, event) = self
                .reader
                .read_resolved_event()
                .map_err(|e| bad(e.to_string()))?;
            let (start, empty) = match event {
                Event::DocType(_) => return Err(bad("DOCTYPE is not accepted")),
                Event::Start(s) => (s, false),
                Event::Empty(s) => (s, true),
                Event::End(_) => {
                    self.open.pop();
                    continue;
                }
                Event::Eof => {
                    if !self.open.is_empty() || !self.seen_root {
                        return Err(bad("the document is not complete"));
                    }
                    return Ok(None);
                }
                _ => continue,
            };
            let name = PropName {
                ns: namespace(&ns)?,
                local: String::from_utf8_lossy(start.local_name().as_ref()).into_owned(),
            };
            if self.open.is_empty() {
                if self.seen_root || name != PropName::dav(self.root) {
                    return Err(bad(format!("the root element is not DAV:{}", self.root)));
                }
                self.seen_root = true;
                self.enter(name, empty)?;
                continue;
            }
            return Ok(Some(Element { name, empty, start }));
        }
    }

    /// Goes inside an element (nothing to do for an empty one).
    pub(crate) fn enter(&mut self, name: PropName, empty: bool) -> Result<(), XmlError> {
        if !empty {
            if self.open.len() >= MAX_DEPTH {
                return Err(bad("nested too deeply"));
            }
            self.open.push(name);
        }
        Ok(())
    }

    /// Passes over an element's content to its end; the content's span in the body.
    pub(crate) fn skip(&mut self, e: &Element<'_>) -> Result<Range<usize>, XmlError> {
        if e.empty {
            return Ok(0..0);
        }
        let span = self
            .reader
            .read_to_end(e.start.name())
            .map_err(|e| bad(e.to_string()))?;
        Ok(span.start as usize..span.end as usize)
    }
}
