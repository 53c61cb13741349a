//! What the HTTPS door reads from a request, fed arbitrary bytes: `Range`, the digest headers,
//! `Depth`/`Overwrite`/`Destination`, request paths, PROPFIND and PROPPATCH bodies, a
//! third-party COPY's headers. Nothing panics; every range lies within the file and parts stay
//! bounded; a decoded path never holds `..`, NUL or an encoded slash; a path encoded by the door
//! decodes back to itself; a COPY never hands on a header that frames or routes a request.
#![no_main]

use ferry_proto::http::{dav, digest, propfind, proppatch, range, tpc};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 5 {
        0 => {
            let text = String::from_utf8_lossy(rest);
            let size = u64::from(rest.len() as u32) * 997;
            if let range::RangeRequest::Parts(parts) = range::parse(&text, size) {
                assert!(!parts.is_empty() && parts.len() <= range::MAX_PARTS);
                for p in parts {
                    assert!(p.start <= p.end && p.end < size);
                }
            }
        }
        1 => {
            let text = String::from_utf8_lossy(rest);
            let _ = digest::parse_want_digest(&text);
            let _ = digest::parse_want_repr_digest(&text);
            for (alg, raw) in digest::parse_digest(&text).unwrap_or_default() {
                assert_eq!(raw.len(), alg.digest_len());
                let again = digest::parse_digest(&alg.rfc3230(&raw)).expect("our own value");
                assert_eq!(again, vec![(alg, raw)]);
            }
            let _ = digest::parse_repr_digest(&text);
            let _ = digest::parse_content_md5(&text);
        }
        2 => {
            let text = String::from_utf8_lossy(rest);
            let _ = dav::depth(Some(&text));
            let _ = dav::overwrite(Some(&text));
            let _ = dav::target(&text);
            if let Ok((path, _)) = dav::decode_path(&text) {
                assert!(path.starts_with('/'));
                assert!(!path.contains('\0'));
                assert!(!path.split('/').any(|s| s == ".."));
                assert_eq!(dav::decode_path(&dav::encode_path(&path)).map(|p| p.0), Ok(path));
            }
        }
        3 => {
            let _ = propfind::parse(rest);
            let _ = proppatch::parse(rest);
        }
        _ => {
            // One header per line, `Name: value`.
            let text = String::from_utf8_lossy(rest);
            let headers: Vec<(&str, &str)> =
                text.lines().filter_map(|l| l.split_once(':')).collect();
            if let Ok(Some(copy)) = tpc::parse(headers, "door.example:8443") {
                assert!(copy.remote.starts_with("https://") || copy.remote.starts_with("http://"));
                assert!(copy.streams <= tpc::MAX_STREAMS);
                for (name, _) in &copy.headers {
                    let lower = name.to_ascii_lowercase();
                    assert!(!["host", "content-length", "transfer-encoding", "connection"]
                        .contains(&lower.as_str()));
                    assert!(!name.is_empty() && !name.contains([':', '\r', '\n', ' ']));
                }
            }
        }
    }
});
