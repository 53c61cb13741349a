//! PROPFIND (depth 0 and 1; `infinity` refused with 403 as most servers refuse it) with the
//! live properties clients read and the dead ones PROPPATCH set, the collection itself first,
//! streamed as the members are described; and PROPPATCH.

use std::sync::Arc;

use bytes::Bytes;
use ferry_proto::http::dates;
use ferry_proto::http::dav::{xml_escape, Depth};
use ferry_proto::http::propfind::{
    self, PropName, PropValue, Propfind, DAV, MULTISTATUS_END, MULTISTATUS_START,
};
use ferry_proto::http::proppatch::{self, PatchOp};
use ferry_storage::{FileKind, Metadata, Storage, VirtualPath};
use ferry_token::Operation;
use http::{header, HeaderValue, Response, StatusCode};
use hyper::body::Incoming;

use crate::body::Body;
use crate::deadprops::DeadProps;
use crate::reply::{self, blocking, Reply};
use crate::req::Req;

/// Largest PROPFIND or PROPPATCH body read.
pub(crate) const MAX_BODY: usize = 1 << 20;
/// Bytes of XML gathered before they are handed to the connection.
const FLUSH_AT: usize = 64 * 1024;

/// The live properties, in the order `allprop` lists them.
const LIVE: [&str; 7] = [
    "resourcetype",
    "getcontentlength",
    "getlastmodified",
    "creationdate",
    "getetag",
    "displayname",
    "getcontenttype",
];

/// A live property's value for `m`, or `None` where it has none (a collection's length).
fn live(name: &str, m: &Metadata, display: &str) -> Option<String> {
    let file = m.kind != FileKind::Dir;
    Some(match name {
        "resourcetype" if file => String::new(),
        "resourcetype" => "<D:collection/>".into(),
        "getcontentlength" if file => m.size.to_string(),
        "getlastmodified" => dates::http_date(m.mtime),
        "creationdate" => dates::iso8601(m.mtime),
        "getetag" if file => xml_escape(&crate::get::etag(m)),
        "displayname" => xml_escape(display),
        "getcontenttype" if file => "application/octet-stream".into(),
        _ => return None,
    })
}

fn live_value(name: &str, xml: String) -> PropValue {
    PropValue {
        name: PropName::dav(name),
        decls: String::new(),
        xml,
    }
}

/// One `D:response` for an entry with dead properties `dead`.
fn describe(href: &str, m: &Metadata, display: &str, dead: &DeadProps, want: &Propfind) -> String {
    let mut found = Vec::new();
    let mut missing = Vec::new();
    match want {
        Propfind::AllProp => {
            for name in LIVE {
                if let Some(xml) = live(name, m, display) {
                    found.push(live_value(name, xml));
                }
            }
            found.extend(dead.all());
        }
        Propfind::PropName => {
            for name in LIVE {
                if live(name, m, display).is_some() {
                    found.push(live_value(name, String::new()));
                }
            }
            found.extend(dead.all().map(|mut v| {
                v.xml.clear();
                v.decls.clear();
                v
            }));
        }
        Propfind::Props(names) => {
            for name in names {
                let value = if name.ns == DAV {
                    live(&name.local, m, display).map(|xml| live_value(&name.local, xml))
                } else {
                    dead.get(name)
                };
                match value {
                    Some(v) => found.push(v),
                    None => missing.push(name.clone()),
                }
            }
        }
    }
    propfind::response(href, &found, &missing)
}

/// Whether `want` can name a dead property (not when it asks for DAV: ones only).
fn wants_dead(want: &Propfind) -> bool {
    match want {
        Propfind::Props(names) => names.iter().any(|n| n.ns != DAV),
        _ => true,
    }
}

/// The dead properties worth reading for `want`.
fn dead_for(s: &dyn Storage, path: &VirtualPath, want: &Propfind) -> DeadProps {
    if !wants_dead(want) {
        return DeadProps::default();
    }
    DeadProps::load(s, path).unwrap_or_default()
}

/// Members described per storage call for their dead properties.
const BATCH: usize = 1024;

/// PROPFIND.
pub(crate) async fn propfind(r: &Req, body: Incoming) -> Result<Reply, Reply> {
    let depth = ferry_proto::http::dav::depth(r.header("depth"))
        .map_err(|e| reply::status(StatusCode::BAD_REQUEST, e))?
        .unwrap_or(Depth::Infinity);
    if depth == Depth::Infinity {
        let mut refused = Response::new(Body::text(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:error xmlns:D=\"DAV:\"><D:propfind-finite-depth/></D:error>\n",
        ));
        *refused.status_mut() = StatusCode::FORBIDDEN;
        refused.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml; charset=utf-8"),
        );
        return Err(refused);
    }
    r.may(Operation::Stat, &r.path)?;
    let bytes = crate::req::small_body(body, MAX_BODY).await?;
    let want = propfind::parse(&bytes).map_err(|e| reply::status(StatusCode::BAD_REQUEST, e))?;
    let (s, p, w) = (
        Arc::clone(&r.principal.storage),
        r.path.clone(),
        want.clone(),
    );
    let (m, dead) = blocking(move || {
        let m = s.stat(&p)?;
        Ok((m, dead_for(&*s, &p, &w)))
    })
    .await
    .map_err(|e| reply::storage(&e))?;
    let name = r.path.file_name().unwrap_or("/").to_string();
    let collection = m.kind == FileKind::Dir;
    let first = describe(&r.href(&r.path, collection), &m, &name, &dead, &want);
    let mut reply = Response::new(Body::Empty);
    *reply.status_mut() = StatusCode::MULTI_STATUS;
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml; charset=utf-8"),
    );
    if depth == Depth::Zero || !collection {
        *reply.body_mut() = Body::text(format!("{MULTISTATUS_START}{first}{MULTISTATUS_END}"));
        return Ok(reply);
    }
    r.may(Operation::List, &r.path)?;
    // The members: described and sent as they are read, the collection itself first.
    let (tx, body) = Body::channel(None);
    *reply.body_mut() = body;
    let storage = Arc::clone(&r.principal.storage);
    let dir = r.path.clone();
    let hrefs = HrefBase::new(r);
    tokio::task::spawn_blocking(move || {
        // The collection itself goes at once; the members follow in batches, each batch's dead
        // properties read in one storage call (on a root server, one trip to the account's
        // identity thread rather than one per member).
        let head = format!("{MULTISTATUS_START}{first}");
        if tx.blocking_send(Ok(Bytes::from(head))).is_err() {
            return;
        }
        let entries = match storage.list(&dir) {
            Ok(e) => e,
            Err(e) => {
                let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                return;
            }
        };
        let mut out = String::with_capacity(FLUSH_AT * 2);
        for batch in entries.chunks(BATCH) {
            let names: Vec<String> = batch.iter().map(|e| e.name.clone()).collect();
            let dead = if wants_dead(&want) {
                storage.dead_properties_of(&dir, &names)
            } else {
                vec![None; names.len()]
            };
            for (e, dead) in batch.iter().zip(dead) {
                let Ok(path) = dir.join(&e.name) else {
                    continue;
                };
                let meta = if e.metadata.kind == FileKind::Symlink {
                    match storage.stat(&path) {
                        Ok(m) => m,
                        Err(_) => continue,
                    }
                } else {
                    e.metadata.clone()
                };
                let href = hrefs.href(&path, meta.kind == FileKind::Dir);
                let dead = dead.map(|b| DeadProps::decode(&b)).unwrap_or_default();
                out.push_str(&describe(&href, &meta, &e.name, &dead, &want));
                if out.len() >= FLUSH_AT
                    && tx
                        .blocking_send(Ok(Bytes::from(std::mem::take(&mut out))))
                        .is_err()
                {
                    return;
                }
            }
        }
        out.push_str(MULTISTATUS_END);
        let _ = tx.blocking_send(Ok(Bytes::from(out)));
    });
    Ok(reply)
}

/// What a request's `href`s start with, for a task that outlives the request.
struct HrefBase(String);

impl HrefBase {
    fn new(r: &Req) -> HrefBase {
        HrefBase(format!("{}://{}", r.scheme, r.authority))
    }

    fn href(&self, path: &VirtualPath, collection: bool) -> String {
        let mut p = ferry_proto::http::dav::encode_path(path.as_str());
        if collection {
            p.push('/');
        }
        format!("{}{p}", self.0)
    }
}

/// PROPPATCH: every change or none (RFC 4918 §9.2); a live DAV: property cannot be set.
pub(crate) async fn proppatch(r: &Req, body: Incoming) -> Result<Reply, Reply> {
    r.writable()?;
    r.may(Operation::Overwrite, &r.path)?;
    let bytes = crate::req::small_body(body, MAX_BODY).await?;
    let ops = proppatch::parse(&bytes).map_err(|e| reply::status(StatusCode::BAD_REQUEST, e))?;
    let names: Vec<PropName> = ops
        .iter()
        .map(|op| match op {
            PatchOp::Set { name, .. } | PatchOp::Remove(name) => name.clone(),
        })
        .collect();
    let refused = names.iter().any(DeadProps::protected);
    let (s, p) = (Arc::clone(&r.principal.storage), r.path.clone());
    let stored = blocking(move || {
        s.symlink_metadata(&p)?;
        if refused {
            return Ok(false);
        }
        let mut dead = DeadProps::load(&*s, &p)?;
        dead.apply(&ops);
        dead.save(&*s, &p)?;
        Ok(true)
    })
    .await
    .map_err(|e| reply::storage(&e))?;
    let href = r.href(&r.path, r.trailing_slash);
    let mut xml = String::from(MULTISTATUS_START);
    if stored {
        let values: Vec<PropValue> = names
            .into_iter()
            .map(|name| PropValue {
                name,
                decls: String::new(),
                xml: String::new(),
            })
            .collect();
        xml.push_str(&propfind::response(&href, &values, &[]));
    } else {
        xml.push_str(&propfind::patch_failure(
            &href,
            &names,
            DeadProps::protected,
        ));
    }
    xml.push_str(MULTISTATUS_END);
    let mut reply = Response::new(Body::text(xml));
    *reply.status_mut() = StatusCode::MULTI_STATUS;
    reply.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml; charset=utf-8"),
    );
    Ok(reply)
}
