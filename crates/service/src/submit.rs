//! FTS3's job submission (`POST /jobs`), checked field by field: a known field of the wrong
//! type is refused with its name; FTS3 fields ferry does not act on are accepted and listed
//! in the job's `ignored`, since FTS3's client sends all of them.

use serde_json::{Map, Value};
use sha1::{Digest, Sha1};

use ferry_client::Location;
use ferry_storage::ChecksumAlgorithm;

use crate::db::{NewFile, NewJob};
use crate::ServiceError;

/// Most files one job may carry (a bigger list is split by the client).
pub const MAX_FILES: usize = 50_000;
/// Largest file size a job may state (2^53 bytes, 8 PiB: exact in every JSON parser).
const MAX_FILESIZE: i64 = 1 << 53;
/// Longest URL accepted.
pub const MAX_URL: usize = 4096;

/// File fields acted on.
const FILE_FIELDS: &[&str] = &[
    "sources",
    "destinations",
    "filesize",
    "checksum",
    "metadata",
];
/// FTS3 file fields accepted and not acted on.
const FILE_IGNORED: &[&str] = &[
    "selection_strategy",
    "activity",
    "staging_metadata",
    "archive_metadata",
    "scitag",
];
/// Job parameters acted on.
const PARAM_FIELDS: &[&str] = &[
    "verify_checksum",
    "overwrite",
    "retry",
    "retry_delay",
    "priority",
    "job_metadata",
    "job_id",
    "nostreams",
    "buffer_size",
    "timeout",
];

/// What the service does unless a job says otherwise.
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    /// Retries of a transient failure.
    pub retry: i64,
    /// Seconds between them.
    pub retry_delay: i64,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            retry: 3,
            retry_delay: 10,
        }
    }
}

/// Per-job transfer settings kept with the job (FTS3's `nostreams`, `buffer_size`, `timeout`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobOptions {
    /// Parallel streams (`None`: chosen by size and path).
    pub nostreams: Option<u32>,
    /// TCP buffer bytes.
    pub buffer_size: Option<u32>,
    /// Seconds an attempt may take before it counts as a transient failure.
    pub timeout: Option<u64>,
}

/// FTS3's per-file `source_tokens` and `destination_tokens` are refused, never stored: a bearer
/// token travels only in an HTTPS request (HTTP third-party copy), and every URL this service
/// copies (`gsiftp://`, `ftp://`, local paths) authenticates otherwise.
fn refuse_tokens(f: &Map<String, Value>, i: usize) -> Result<(), ServiceError> {
    for key in ["source_tokens", "destination_tokens"] {
        let given = match f.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::Array(a)) => a.iter().any(|t| !(t.is_null() || t == "")),
            Some(Value::String(t)) => !t.is_empty(),
            Some(_) => true,
        };
        if given {
            return Err(bad(&format!(
                "files[{i}].{key}: this service copies over gsiftp://, ftp:// and local paths, \
                 none of which can carry a bearer token; delegate an X.509 proxy for gsiftp:// \
                 (fts-rest-delegate, ferry submit) and submit without per-file tokens"
            )));
        }
    }
    Ok(())
}

/// Turns the bytes of a submission (`POST /jobs`) into a job for `user`: JSON, then
/// [`parse`]. What the REST API runs on every body it is sent (and what `fuzz/` feeds).
pub fn parse_body(
    body: &[u8],
    user: &str,
    defaults: Defaults,
    allow_local: bool,
) -> Result<(NewJob, JobOptions), ServiceError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ServiceError::BadRequest(format!("the body is not JSON: {e}")))?;
    parse(&value, user, defaults, allow_local)
}

/// Turns a submission body into a job for `user`. `allow_local`: whether local paths and
/// `file://` URLs (files on the service's own host) are allowed.
pub fn parse(
    body: &Value,
    user: &str,
    defaults: Defaults,
    allow_local: bool,
) -> Result<(NewJob, JobOptions), ServiceError> {
    let obj = body
        .as_object()
        .ok_or_else(|| bad("the body must be a JSON object with \"files\" and \"params\""))?;
    let mut ignored = Vec::new();
    for key in obj.keys() {
        if key != "files" && key != "params" {
            ignored.push(key.clone());
        }
    }
    let files = obj
        .get("files")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("\"files\" must be a list of {\"sources\", \"destinations\"}"))?;
    if files.is_empty() {
        return Err(bad("\"files\" is empty: a job needs at least one file"));
    }
    if files.len() > MAX_FILES {
        return Err(bad(&format!(
            "{} files in one job; at most {MAX_FILES}: submit several jobs",
            files.len()
        )));
    }
    let empty = Map::new();
    let params = match obj.get("params") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err(bad("\"params\" must be an object")),
    };
    for key in params.keys() {
        if !PARAM_FIELDS.contains(&key.as_str()) && !is_unset(&params[key]) {
            ignored.push(format!("params.{key}"));
        }
    }

    let verify = verify_mode(params.get("verify_checksum"))?;
    // FTS3: 0 means the service's default, a negative number no retries.
    let retry = match int_in(params, "retry", i64::MIN, 100)? {
        None | Some(0) => defaults.retry,
        Some(n) if n < 0 => 0,
        Some(n) => n,
    };
    let retry_delay = int_in(params, "retry_delay", 0, 86_400)?.unwrap_or(defaults.retry_delay);
    let priority = int_in(params, "priority", 1, 5)?.unwrap_or(3);
    let overwrite = bool_field(params, "overwrite")?.unwrap_or(false);
    let options = JobOptions {
        nostreams: int_in(params, "nostreams", 1, 64)?.map(|n| n as u32),
        buffer_size: int_in(params, "buffer_size", 0, 1 << 30)?
            .filter(|&n| n > 0)
            .map(|n| n as u32),
        timeout: int_in(params, "timeout", 0, 7 * 86_400)?
            .filter(|&n| n > 0)
            .map(|n| n as u64),
    };
    let metadata = params
        .get("job_metadata")
        .filter(|v| !v.is_null())
        .map(Value::to_string);
    let job_id = match params.get("job_id") {
        None | Some(Value::Null) => new_job_id(),
        Some(Value::String(s)) if valid_job_id(s) => s.clone(),
        Some(_) => {
            return Err(bad(
                "params.job_id must be 1 to 64 letters, digits, '-', '_' or '.'",
            ))
        }
    };

    let mut out = Vec::with_capacity(files.len());
    let mut extra_alternatives = false;
    for (i, f) in files.iter().enumerate() {
        let f = f
            .as_object()
            .ok_or_else(|| bad(&format!("files[{i}] must be an object")))?;
        for key in f.keys() {
            let unused =
                FILE_IGNORED.contains(&key.as_str()) || !FILE_FIELDS.contains(&key.as_str());
            if unused && !is_unset(&f[key]) {
                let name = format!("files[].{key}");
                if !ignored.contains(&name) {
                    ignored.push(name);
                }
            }
        }
        refuse_tokens(f, i)?;
        let sources = url_list(f, "sources", i)?;
        let dests = url_list(f, "destinations", i)?;
        if sources.len() > 1 || dests.len() > 1 {
            extra_alternatives = true;
        }
        // Every alternative must be a URL the service could use, though only the first of each
        // list is copied.
        for u in sources.iter().chain(&dests).skip(1) {
            location(u, i, allow_local)?;
        }
        let (src, dst) = (&sources[0], &dests[0]);
        let (src_loc, dst_loc) = (
            location(src, i, allow_local)?,
            location(dst, i, allow_local)?,
        );
        let filesize = match f.get("filesize") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                whole(v)
                    .filter(|n| (0..=MAX_FILESIZE).contains(n))
                    .ok_or_else(|| {
                        bad(&format!("files[{i}].filesize must be a number of bytes"))
                    })?,
            ),
        };
        let checksum = match f.get("checksum") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(checksum(s, i)?),
            Some(_) => {
                return Err(bad(&format!(
                    "files[{i}].checksum must be a string, ALGORITHM or ALGORITHM:VALUE"
                )))
            }
        };
        let metadata = f
            .get("metadata")
            .filter(|v| !v.is_null())
            .map(Value::to_string);
        out.push(NewFile {
            source: src.clone(),
            dest: dst.clone(),
            link: link(&src_loc, &dst_loc),
            filesize,
            checksum,
            metadata,
        });
    }
    if extra_alternatives {
        ignored.push("alternative sources and destinations after the first".into());
    }
    let mut hash = Sha1::new();
    hash.update(body.to_string().as_bytes());
    let job = NewJob {
        job_id,
        user_dn: user.to_owned(),
        priority,
        retry,
        retry_delay,
        verify,
        overwrite,
        metadata,
        ignored,
        options: serde_json::to_string(&options).unwrap_or_else(|_| "{}".into()),
        body_hash: hex::encode(hash.finalize()),
        files: out,
    };
    Ok((job, options))
}

/// A whole number, also when written as one with a fraction of zero (`1185.0`, which JSON
/// Schema counts as an integer).
fn whole(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() <= 9.0e18)
            .map(|f| f as i64)
    })
}

/// A field FTS3's client sends with nothing asked for: null or false.
fn is_unset(v: &Value) -> bool {
    matches!(v, Value::Null | Value::Bool(false))
}

fn bad(msg: &str) -> ServiceError {
    ServiceError::BadRequest(msg.to_owned())
}

/// FTS3's `verify_checksum`: a boolean, or `none`/`source`/`target`/`both` (and their first
/// letters, as its client sends them); `auto` when the job does not say.
fn verify_mode(v: Option<&Value>) -> Result<String, ServiceError> {
    Ok(match v {
        // Not said: ferry's default, ADLER32 where both ends can answer.
        None | Some(Value::Null) => "auto",
        Some(Value::Bool(true)) => "both",
        Some(Value::Bool(false)) => "none",
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "n" | "none" | "false" => "none",
            "s" | "source" => "source",
            "t" | "target" | "destination" => "target",
            "b" | "both" | "y" | "true" => "both",
            _ => {
                return Err(bad(
                    "params.verify_checksum must be true, false, none, source, target or both",
                ))
            }
        },
        Some(_) => {
            return Err(bad(
                "params.verify_checksum must be true, false, none, source, target or both",
            ))
        }
    }
    .to_owned())
}

fn int_in(
    params: &Map<String, Value>,
    key: &str,
    lo: i64,
    hi: i64,
) -> Result<Option<i64>, ServiceError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            // FTS3's client sends some numbers as strings.
            let n = whole(v).or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()));
            match n {
                Some(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
                _ => Err(bad(&format!(
                    "params.{key} must be a whole number from {lo} to {hi}"
                ))),
            }
        }
    }
}

fn bool_field(params: &Map<String, Value>, key: &str) -> Result<Option<bool>, ServiceError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if matches!(s.as_str(), "y" | "true" | "Y") => Ok(Some(true)),
        Some(Value::String(s)) if matches!(s.as_str(), "n" | "false" | "N") => Ok(Some(false)),
        Some(_) => Err(bad(&format!("params.{key} must be true or false"))),
    }
}

fn url_list(f: &Map<String, Value>, key: &str, i: usize) -> Result<Vec<String>, ServiceError> {
    let list = f
        .get(key)
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| {
            bad(&format!(
                "files[{i}].{key} must be a non-empty list of URLs"
            ))
        })?;
    list.iter()
        .map(|u| {
            u.as_str()
                .filter(|s| !s.is_empty() && s.len() <= MAX_URL && !s.contains(['\r', '\n', '\0']))
                .map(str::to_owned)
                .ok_or_else(|| bad(&format!("files[{i}].{key} must hold URLs (strings of at most {MAX_URL} bytes, one line)")))
        })
        .collect()
}

fn location(url: &str, i: usize, allow_local: bool) -> Result<Location, ServiceError> {
    // Refusals go back to the submitter and may be logged: without the URL's password.
    let loc = Location::parse(url).map_err(|e| {
        bad(&format!(
            "files[{i}]: {}",
            crate::redact::text(&e.to_string(), &[url])
        ))
    })?;
    if let Location::Remote(r) = &loc {
        let name_ok = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '-';
        let v6_ok = |c: char| c.is_ascii_hexdigit() || c == ':' || c == '.';
        let host_ok =
            r.host.chars().all(name_ok) || (r.host.contains(':') && r.host.chars().all(v6_ok));
        if r.host.is_empty() || !host_ok || r.port == 0 {
            return Err(bad(&format!(
                "files[{i}]: '{}' does not name a host (letters, digits, '.' and '-', or [IPv6]) and a port from 1",
                crate::redact::url(url)
            )));
        }
    }
    if let Location::Local(_) = loc {
        if !allow_local {
            return Err(bad(&format!(
                "files[{i}]: '{url}' is a path on the service's host, which this service does not allow: use gsiftp://, ftp:// or ftps:// URLs"
            )));
        }
    }
    Ok(loc)
}

/// The queue a file waits in: its two ends' servers.
pub fn link(src: &Location, dst: &Location) -> String {
    let end = |l: &Location| match l {
        Location::Remote(r) => format!("{}://{}", r.scheme.name(), r.authority()),
        Location::Local(_) => "local".to_owned(),
    };
    format!("{} → {}", end(src), end(dst))
}

/// `ALG` or `ALG:VALUE` with an algorithm ferry knows, normalised to upper-case algorithm and
/// lower-case value.
fn checksum(s: &str, i: usize) -> Result<String, ServiceError> {
    let (alg, value) = match s.split_once(':') {
        Some((a, v)) => (a, Some(v)),
        None => (s, None),
    };
    let known = ChecksumAlgorithm::from_name(alg)
        .ok_or_else(|| bad(&format!("files[{i}].checksum: unknown algorithm '{alg}' (ADLER32, MD5, CRC32C, SHA1, SHA256, SHA512)")))?;
    match value {
        None | Some("") => Ok(known.name().to_owned()),
        Some(v) if v.len() <= 128 && v.chars().all(|c| c.is_ascii_hexdigit()) => {
            Ok(format!("{}:{}", known.name(), v.to_ascii_lowercase()))
        }
        Some(_) => Err(bad(&format!(
            "files[{i}].checksum: the value after ':' must be hexadecimal"
        ))),
    }
}

/// A fresh job id: a random UUID (version 4), as FTS3's.
pub fn new_job_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn valid_job_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests;
