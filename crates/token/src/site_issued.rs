//! Tokens a storage door issues to its own authenticated users, for them to hand to another
//! server in an HTTP third-party copy: what WLCG's clients call "macaroons". gfal2 and FTS3,
//! holding only an X.509 proxy, `POST` an `application/macaroon-request`
//! (`{"caveats": ["activity:DOWNLOAD,LIST"], "validity": "PT190M"}`) for the file at each end,
//! then give each end's token to the other as `TransferHeaderAuthorization: Bearer …`.
//!
//! Only the issuing server ever reads such a token, so its form is the server's own:
//! `ferry-se1.<base64url JSON>.<base64url HMAC-SHA-256>` under a site secret. The JSON says
//! who asked, the account they work as, the path, the activities and the expiry; the bearer
//! may do those activities on that path (and below it), nothing else.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::TokenError;
use crate::scope::{normalize, Grant, Grants, Right};

/// How every such token starts.
pub const PREFIX: &str = "ferry-se1.";
/// The longest validity given (a longer request is cut to it).
pub const MAX_VALIDITY_S: i64 = 12 * 3600;
/// The validity when the request names none (gfal2's default).
pub const DEFAULT_VALIDITY_S: i64 = 180 * 60;
/// The largest request body read.
pub const MAX_REQUEST: usize = 16 * 1024;

/// What a bearer may do (the activities of XRootD's and dCache's macaroon caveats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Activity {
    /// Read the file.
    Download,
    /// Write a new file.
    Upload,
    /// Make directories, replace, rename and delete.
    Manage,
    /// Delete.
    Delete,
    /// Look at the entry and list a directory's names.
    List,
    /// Look at the entry.
    ReadMetadata,
    /// Change its properties.
    UpdateMetadata,
}

impl Activity {
    fn parse(name: &str) -> Option<Activity> {
        Some(match name.trim().to_ascii_uppercase().as_str() {
            "DOWNLOAD" => Activity::Download,
            "UPLOAD" => Activity::Upload,
            "MANAGE" => Activity::Manage,
            "DELETE" => Activity::Delete,
            "LIST" => Activity::List,
            "READ_METADATA" => Activity::ReadMetadata,
            "UPDATE_METADATA" => Activity::UpdateMetadata,
            _ => return None,
        })
    }

    fn right(self) -> Right {
        match self {
            Activity::Download => Right::Read,
            Activity::Upload => Right::Create,
            Activity::Manage | Activity::Delete | Activity::UpdateMetadata => Right::Modify,
            Activity::List | Activity::ReadMetadata => Right::Poll,
        }
    }
}

/// A `POST` with `Content-Type: application/macaroon-request`, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// What the token is for.
    pub activities: Vec<Activity>,
    /// For how long, in seconds.
    pub validity_s: i64,
}

/// Reads a macaroon request. Caveats other than `activity:` are refused, not ignored: a token
/// asked to be narrower than this server can make it is not issued broader.
pub fn parse_request(body: &[u8]) -> Result<Request, TokenError> {
    let bad = |why: &str| TokenError::Malformed(format!("macaroon request: {why}"));
    if body.len() > MAX_REQUEST {
        return Err(bad("too long"));
    }
    let v: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Default::default())
    } else {
        serde_json::from_slice(body).map_err(|e| bad(&e.to_string()))?
    };
    let obj = v.as_object().ok_or_else(|| bad("not a JSON object"))?;
    let mut activities = Vec::new();
    for c in obj
        .get("caveats")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let c = c.as_str().ok_or_else(|| bad("a caveat is not a string"))?;
        let (kind, list) = c.split_once(':').ok_or_else(|| bad(c))?;
        if !kind.trim().eq_ignore_ascii_case("activity") {
            return Err(bad(&format!(
                "caveat {kind:?} is not supported (activity: is)"
            )));
        }
        for a in list.split(',').filter(|a| !a.trim().is_empty()) {
            let a = Activity::parse(a).ok_or_else(|| bad(&format!("unknown activity {a:?}")))?;
            if !activities.contains(&a) {
                activities.push(a);
            }
        }
    }
    if activities.is_empty() {
        // No activity caveat: what XRootD gives then, reading.
        activities = vec![Activity::Download, Activity::List];
    }
    let validity_s = match obj.get("validity") {
        None | Some(Value::Null) => DEFAULT_VALIDITY_S,
        Some(Value::String(s)) => {
            duration(s).ok_or_else(|| bad("validity is not an ISO 8601 duration"))?
        }
        Some(_) => return Err(bad("validity is not a string")),
    };
    Ok(Request {
        activities,
        validity_s: validity_s.clamp(1, MAX_VALIDITY_S),
    })
}

/// An ISO 8601 duration (`PT190M`, `PT3H`, `P1DT2H`, `PT600S`) in seconds.
fn duration(s: &str) -> Option<i64> {
    let rest = s.trim().strip_prefix('P')?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut total: i64 = 0;
    let mut any = false;
    for (part, units) in [
        (days, &[('D', 86_400i64)][..]),
        (time, &[('H', 3600), ('M', 60), ('S', 1)][..]),
    ] {
        let mut num = String::new();
        let mut next = 0;
        for ch in part.chars() {
            if ch.is_ascii_digit() {
                num.push(ch);
                continue;
            }
            let at = units[next..].iter().position(|(u, _)| *u == ch)? + next;
            let n: i64 = num.parse().ok()?;
            total = total.checked_add(n.checked_mul(units[at].1)?)?;
            num.clear();
            next = at + 1;
            any = true;
        }
        if !num.is_empty() {
            return None;
        }
    }
    any.then_some(total)
}

/// What a token grants, and to whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issued {
    /// Who asked for it (the login's name, for logs).
    pub user: String,
    /// The account its bearer works as: the asker's (`None`: the server's own).
    pub account: Option<String>,
    /// The site path it is for.
    pub path: String,
    /// What it allows there.
    pub activities: Vec<Activity>,
    /// Its expiry (unix seconds).
    pub exp: i64,
    /// Its id, for logs.
    pub id: String,
}

impl Issued {
    /// The rights it gives, on its path and below.
    pub fn grants(&self) -> Grants {
        let mut rights: Vec<Right> = self.activities.iter().map(|a| a.right()).collect();
        rights.dedup();
        Grants(
            rights
                .into_iter()
                .map(|right| Grant {
                    right,
                    path: self.path.clone(),
                    dir_only: false,
                })
                .collect(),
        )
    }
}

fn mac(secret: &[u8], data: &[u8]) -> Vec<u8> {
    // An HMAC key of any length is accepted; the calls cannot fail for SHA-256.
    PKey::hmac(secret)
        .and_then(|k| {
            let mut s = Signer::new(MessageDigest::sha256(), &k)?;
            s.update(data)?;
            s.sign_to_vec()
        })
        .unwrap_or_default()
}

/// The token for `grant`, signed with `secret`.
pub fn issue(secret: &[u8], grant: &Issued) -> String {
    let payload = B64.encode(serde_json::to_vec(grant).unwrap_or_default());
    let signed = format!("{PREFIX}{payload}");
    format!("{signed}.{}", B64.encode(mac(secret, signed.as_bytes())))
}

/// Whether `token` is one of these (and not a JWT).
pub fn is_site_issued(token: &str) -> bool {
    token.starts_with(PREFIX)
}

/// The grant of `token`, checked against `secret` at `now` (unix seconds).
pub fn verify(secret: &[u8], token: &str, now: i64) -> Result<Issued, TokenError> {
    let malformed = || TokenError::Malformed("not a token this server issued".into());
    let (signed, sig) = token.rsplit_once('.').ok_or_else(malformed)?;
    let payload = signed.strip_prefix(PREFIX).ok_or_else(malformed)?;
    let sig = B64.decode(sig).map_err(|_| malformed())?;
    let want = mac(secret, signed.as_bytes());
    if want.is_empty() || sig.len() != want.len() || !openssl::memcmp::eq(&sig, &want) {
        return Err(TokenError::Signature);
    }
    let grant: Issued = B64
        .decode(payload)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(malformed)?;
    if grant.exp < now {
        return Err(TokenError::Expired(now - grant.exp));
    }
    if normalize(&grant.path).as_deref() != Some(grant.path.as_str()) {
        return Err(malformed());
    }
    Ok(grant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Operation;

    fn grant(activities: Vec<Activity>) -> Issued {
        Issued {
            user: "/DC=org/CN=alice".into(),
            account: Some("alice".into()),
            path: "/data/f".into(),
            activities,
            exp: 2_000,
            id: "abc".into(),
        }
    }

    #[test]
    fn requests_read_as_gfal2_and_fts3_send_them() {
        let source =
            parse_request(br#"{"caveats": ["activity:DOWNLOAD,LIST"], "validity": "PT190M"}"#)
                .unwrap();
        assert_eq!(source.activities, vec![Activity::Download, Activity::List]);
        assert_eq!(source.validity_s, 190 * 60);
        let dest = parse_request(
            br#"{"caveats": ["activity:MANAGE,UPLOAD,DELETE,LIST"], "validity": "P1DT2H"}"#,
        )
        .unwrap();
        assert_eq!(dest.activities.len(), 4);
        assert_eq!(dest.validity_s, MAX_VALIDITY_S, "cut to the most given");
        assert_eq!(parse_request(b"").unwrap().validity_s, DEFAULT_VALIDITY_S);
        assert_eq!(duration("PT1H30M15S"), Some(5415));
        for bad in ["1H", "PT", "PTM", "PT5X", "PT5M3H", "P5"] {
            assert_eq!(duration(bad), None, "{bad}");
        }
        for bad in [
            &br#"{"caveats": ["path:/other"]}"#[..],
            br#"{"caveats": ["activity:FLY"]}"#,
            br#"{"caveats": [7]}"#,
            br#"{"validity": "soon"}"#,
            br#"[1]"#,
        ] {
            assert!(
                parse_request(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_token_grants_its_activities_on_its_path_and_nothing_after_a_change() {
        let secret = b"0123456789abcdef0123456789abcdef";
        let t = issue(secret, &grant(vec![Activity::Download, Activity::List]));
        assert!(is_site_issued(&t));
        let g = verify(secret, &t, 1_000).unwrap();
        assert_eq!(g, grant(vec![Activity::Download, Activity::List]));
        let grants = g.grants();
        assert!(grants.allow(Operation::Read, "/data/f"));
        assert!(!grants.allow(Operation::Read, "/data/g"));
        assert!(!grants.allow(Operation::Overwrite, "/data/f"));
        let up = verify(
            secret,
            &issue(secret, &grant(vec![Activity::Upload, Activity::Manage])),
            0,
        )
        .unwrap()
        .grants();
        assert!(up.allow(Operation::Overwrite, "/data/f") && !up.allow(Operation::Read, "/data/f"));
        assert_eq!(verify(secret, &t, 2_100).unwrap_err().label(), "expired");
        assert_eq!(
            verify(b"another secret", &t, 0).unwrap_err(),
            TokenError::Signature
        );
        // A payload changed (another path) no longer matches its MAC.
        let (signed, sig) = t.rsplit_once('.').unwrap();
        let mut other = grant(vec![Activity::Download]);
        other.path = "/".into();
        let forged = format!(
            "{PREFIX}{}.{sig}",
            B64.encode(serde_json::to_vec(&other).unwrap())
        );
        assert_ne!(forged.rsplit_once('.').unwrap().0, signed);
        assert_eq!(
            verify(secret, &forged, 0).unwrap_err(),
            TokenError::Signature
        );
        for junk in ["", "ferry-se1.", "ferry-se1.x.y", "eyJhbGciOi.x.y"] {
            assert!(verify(secret, junk, 0).is_err(), "{junk}");
        }
    }
}
