use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use openssl::ec::{EcGroup, EcKey};
use openssl::ecdsa::EcdsaSig;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use serde_json::{json, Value};

use super::*;
use crate::keys::{KeyCache, KeySet, Lookup};

const ISS: &str = "https://issuer.example.org";
const AUD: &str = "https://storage.example.org";
const NOW: i64 = 1_800_000_000;

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

struct Signer {
    rsa: PKey<Private>,
    ec: PKey<Private>,
}

impl Signer {
    fn new() -> Signer {
        let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
        Signer {
            rsa: PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap(),
            ec: PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap(),
        }
    }

    fn jwks(&self) -> Vec<u8> {
        let rsa = self.rsa.rsa().unwrap();
        let ec = self.ec.ec_key().unwrap();
        let mut ctx = openssl::bn::BigNumContext::new().unwrap();
        let (mut x, mut y) = (
            openssl::bn::BigNum::new().unwrap(),
            openssl::bn::BigNum::new().unwrap(),
        );
        ec.public_key()
            .affine_coordinates(ec.group(), &mut x, &mut y, &mut ctx)
            .unwrap();
        let pad = |n: &openssl::bn::BigNumRef| n.to_vec_padded(32).unwrap();
        serde_json::to_vec(&json!({"keys": [
            {"kty": "RSA", "kid": "rsa1", "use": "sig", "alg": "RS256",
             "n": b64(&rsa.n().to_vec()), "e": b64(&rsa.e().to_vec())},
            {"kty": "EC", "kid": "ec1", "crv": "P-256", "x": b64(&pad(&x)), "y": b64(&pad(&y))},
            {"kty": "oct", "kid": "secret", "k": "c2VjcmV0"},
        ]}))
        .unwrap()
    }

    /// A token with `header` and `claims`, signed by its alg (HS256: with the RSA public key's
    /// PEM as the secret, the classic confusion attack).
    fn token(&self, header: Value, claims: Value) -> String {
        let signed = format!(
            "{}.{}",
            b64(&serde_json::to_vec(&header).unwrap()),
            b64(&serde_json::to_vec(&claims).unwrap())
        );
        let sig = match header["alg"].as_str().unwrap() {
            "RS256" => {
                let mut s = openssl::sign::Signer::new(MessageDigest::sha256(), &self.rsa).unwrap();
                s.update(signed.as_bytes()).unwrap();
                s.sign_to_vec().unwrap()
            }
            "ES256" => {
                let digest =
                    openssl::hash::hash(MessageDigest::sha256(), signed.as_bytes()).unwrap();
                let sig = EcdsaSig::sign(&digest, &self.ec.ec_key().unwrap()).unwrap();
                let mut out = sig.r().to_vec_padded(32).unwrap();
                out.extend(sig.s().to_vec_padded(32).unwrap());
                out
            }
            "HS256" => {
                let secret = self.rsa.public_key_to_pem().unwrap();
                let key = PKey::hmac(&secret).unwrap();
                let mut s = openssl::sign::Signer::new(MessageDigest::sha256(), &key).unwrap();
                s.update(signed.as_bytes()).unwrap();
                s.sign_to_vec().unwrap()
            }
            _ => Vec::new(),
        };
        format!("{signed}.{}", b64(&sig))
    }
}

fn wlcg(scope: &str) -> Value {
    json!({"iss": ISS, "sub": "alice", "aud": AUD, "exp": NOW + 600, "iat": NOW - 10,
           "nbf": NOW - 10, "jti": "t1", "wlcg.ver": "1.0", "scope": scope,
           "wlcg.groups": ["/vo", "/vo/prod"]})
}

fn issuers(restricted: &[&str]) -> Issuers {
    Issuers::new(vec![IssuerConfig {
        url: ISS.into(),
        base_path: "/vo".into(),
        audiences: vec![AUD.into()],
        account: "vouser".into(),
        restricted_paths: restricted.iter().map(|s| s.to_string()).collect(),
        map: Vec::new(),
    }])
    .unwrap()
}

fn check(signer: &Signer, issuers: &Issuers, token: &str) -> Result<Bearer, TokenError> {
    let set = KeySet::parse(&signer.jwks()).unwrap();
    let (jwt, issuer) = issuers.inspect(token)?;
    let key = set.get(&jwt.kid).ok_or(TokenError::UnknownKey {
        issuer: ISS.into(),
        kid: jwt.kid.clone(),
    })?;
    issuers.validate(&jwt, issuer, key, NOW)
}

fn rs(kid: &str) -> Value {
    json!({"alg": "RS256", "kid": kid, "typ": "JWT"})
}

#[test]
fn rs256_and_es256_tokens_validate_into_the_issuers_account_and_grants() {
    let s = Signer::new();
    let iss = issuers(&[]);
    for header in [rs("rsa1"), json!({"alg": "ES256", "kid": "ec1"})] {
        let t = s.token(header, wlcg("storage.read:/data storage.create:/up openid"));
        let b = check(&s, &iss, &t).unwrap();
        assert_eq!(b.account, "vouser");
        assert_eq!(b.subject.as_deref(), Some("alice"));
        assert_eq!(b.groups, ["/vo", "/vo/prod"]);
        assert!(b.may(Operation::Read, "/vo/data/run1/f").is_ok());
        assert!(b.may(Operation::Create, "/vo/up/new").is_ok());
        assert_eq!(
            b.may(Operation::Read, "/vo/up/new"),
            Err(Operation::Read.needs())
        );
        assert!(
            b.may(Operation::Read, "/data/f").is_err(),
            "outside the base path"
        );
    }
}

#[test]
fn every_refusal_names_its_reason() {
    let s = Signer::new();
    let iss = issuers(&[]);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = wlcg("storage.read:/");
        f(&mut c);
        s.token(rs("rsa1"), c)
    };
    let cases: Vec<(String, &str)> = vec![
        (with(&|c| c["exp"] = json!(NOW - 61)), "expired"),
        (
            with(&|c| {
                c["nbf"] = json!(NOW + 120);
                c["iat"] = json!(NOW + 120)
            }),
            "not_yet_valid",
        ),
        (
            with(&|c| c["iss"] = json!("https://evil.example.org")),
            "issuer",
        ),
        (
            with(&|c| c["aud"] = json!("https://other.example.org")),
            "audience",
        ),
        (
            with(&|c| c["aud"] = json!(crate::claims::WLCG_ANY)),
            "audience",
        ),
        (
            with(&|c| {
                c.as_object_mut().unwrap().remove("aud");
            }),
            "claims",
        ),
        (with(&|c| c["exp"] = json!(NOW + 7 * 3600)), "lifetime"),
        (
            with(&|c| {
                c.as_object_mut().unwrap().remove("wlcg.ver");
            }),
            "claims",
        ),
        (with(&|c| c["scope"] = json!("storage.read")), "scope"),
        (
            with(&|c| c["scope"] = json!("storage.read:/a/../b")),
            "scope",
        ),
        (
            with(&|c| c["scope"] = json!("storage.read:/a%2Fb")),
            "scope",
        ),
        (s.token(rs("nokey"), wlcg("storage.read:/")), "unknown_key"),
        (
            s.token(json!({"alg": "RS256"}), wlcg("storage.read:/")),
            "unknown_key",
        ),
        (
            s.token(
                json!({"alg": "none", "kid": "rsa1"}),
                wlcg("storage.read:/"),
            ),
            "algorithm",
        ),
        (
            s.token(
                json!({"alg": "HS256", "kid": "rsa1"}),
                wlcg("storage.read:/"),
            ),
            "algorithm",
        ),
        (
            s.token(
                json!({"alg": "ES256", "kid": "rsa1"}),
                wlcg("storage.read:/"),
            ),
            "key",
        ),
        ("a.b".to_string(), "malformed"),
    ];
    for (token, label) in cases {
        let e = check(&s, &iss, &token).expect_err(label);
        assert_eq!(e.label(), label, "{e}");
    }
    // A signature over other claims.
    let good = s.token(rs("rsa1"), wlcg("storage.read:/"));
    let other = s.token(rs("rsa1"), wlcg("storage.modify:/"));
    let parts: Vec<&str> = good.split('.').collect();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        other.split('.').nth(1).unwrap(),
        parts[2]
    );
    assert_eq!(check(&s, &iss, &forged).unwrap_err(), TokenError::Signature);
}

#[test]
fn the_wlcg_compliance_rights_hold() {
    let s = Signer::new();
    let iss = issuers(&[]);
    let bearer = |scope: &str| check(&s, &iss, &s.token(rs("rsa1"), wlcg(scope))).unwrap();
    let modify = bearer("storage.modify:/");
    assert!(
        modify.may(Operation::Read, "/vo/f").is_err(),
        "modify does not read"
    );
    for op in [
        Operation::Overwrite,
        Operation::Delete,
        Operation::Mkdir,
        Operation::Create,
    ] {
        assert!(modify.may(op, "/vo/f").is_ok(), "{op:?}");
    }
    let create = bearer("storage.create:/");
    assert!(create.may(Operation::Create, "/vo/new").is_ok());
    for op in [Operation::Read, Operation::Overwrite, Operation::Delete] {
        assert!(create.may(op, "/vo/f").is_err(), "{op:?}");
    }
    let stage = bearer("storage.stage:/");
    assert!(
        stage.may(Operation::Read, "/vo/f").is_err(),
        "stage does not read"
    );
    assert!(stage.may(Operation::Stat, "/vo/f").is_ok());
    let foo = bearer("storage.read:/foo");
    assert!(foo.may(Operation::Read, "/vo/foo/x").is_ok());
    assert!(
        foo.may(Operation::Read, "/vo/foobar").is_err(),
        "/foo does not grant /foobar"
    );
    assert!(
        foo.may(Operation::Read, "/vo/foo/../bar").is_err(),
        ".. is applied first"
    );
    assert!(
        foo.may(Operation::Stat, "/vo").is_ok(),
        "leading directories may be looked at"
    );
    assert!(foo.may(Operation::List, "/vo").is_err());
}

#[test]
fn scitokens_and_restricted_paths() {
    let s = Signer::new();
    let sci = json!({"iss": ISS, "aud": "ANY", "exp": NOW + 600, "iat": NOW,
                     "ver": "scitoken:2.0", "scope": "read:/ write:/out"});
    let open = Issuers::new(vec![IssuerConfig {
        url: ISS.into(),
        base_path: "/".into(),
        audiences: vec!["ANY".into()],
        account: "u".into(),
        restricted_paths: vec!["/out/mine".into()],
        map: Vec::new(),
    }])
    .unwrap();
    let b = check(&s, &open, &s.token(rs("rsa1"), sci.clone())).unwrap();
    assert!(b.may(Operation::Overwrite, "/out/mine/f").is_ok());
    assert!(
        b.may(Operation::Overwrite, "/out/theirs").is_err(),
        "restricted"
    );
    assert!(b.may(Operation::Read, "/etc/passwd").is_err(), "restricted");
    // "ANY" only where the issuer lists it.
    let strict = issuers(&[]);
    let mut c = sci;
    c["aud"] = json!("ANY");
    let e = strict.validate(
        &Jwt::decode(&s.token(rs("rsa1"), c)).unwrap(),
        strict.iter().next().unwrap(),
        KeySet::parse(&s.jwks()).unwrap().get("rsa1").unwrap(),
        NOW,
    );
    assert_eq!(e.unwrap_err().label(), "audience");
}

#[test]
fn the_key_cache_fetches_when_due_and_at_most_once_a_minute_for_unknown_keys() {
    let s = Signer::new();
    let mut cache = KeyCache::new();
    let t0 = 1_000_000;
    assert!(cache.due(t0));
    assert!(matches!(cache.lookup("rsa1", t0), Lookup::Fetch));
    cache.fetched(Err("connection refused".into()), t0);
    assert!(matches!(cache.lookup("rsa1", t0 + 10), Lookup::NoKeys(w) if w.contains("refused")));
    assert!(!cache.due(t0 + 10));
    assert!(matches!(cache.lookup("rsa1", t0 + 60), Lookup::Fetch));
    cache.fetched(Ok(KeySet::parse(&s.jwks()).unwrap()), t0 + 60);
    assert!(matches!(cache.lookup("rsa1", t0 + 61), Lookup::Found(_)));
    assert!(matches!(cache.lookup("rotated", t0 + 61), Lookup::Unknown));
    assert!(matches!(cache.lookup("rotated", t0 + 120), Lookup::Fetch));
    assert!(!cache.due(t0 + 120));
    assert!(cache.due(t0 + 60 + 3600));
    // The issuer is down at refresh time: the last good keys stay.
    cache.fetched(Err("timed out".into()), t0 + 3700);
    assert!(matches!(cache.lookup("rsa1", t0 + 3701), Lookup::Found(_)));
    assert_eq!(cache.failure(), Some("timed out"));
}

#[test]
fn weak_and_unknown_keys_are_passed_over_and_a_set_without_keys_refused() {
    let weak = Rsa::generate(1024).unwrap();
    let set = json!({"keys": [{"kty": "RSA", "kid": "w", "n": b64(&weak.n().to_vec()),
                               "e": b64(&weak.e().to_vec())}]});
    let e = KeySet::parse(&serde_json::to_vec(&set).unwrap()).unwrap_err();
    assert!(e.to_string().contains("too weak"), "{e}");
    assert!(KeySet::parse(b"{\"keys\": []}").is_err());
    assert!(KeySet::parse(b"not json").is_err());
    let s = Signer::new();
    assert_eq!(
        KeySet::parse(&s.jwks()).unwrap().len(),
        2,
        "the oct key is passed over"
    );
}

#[test]
fn subjects_and_groups_map_to_accounts_and_group_access_is_the_accounts_rights() {
    let s = Signer::new();
    let rule = |sub: Option<&str>, group: Option<&str>, account: &str, group_access| AccountRule {
        sub: sub.map(str::to_string),
        group: group.map(str::to_string),
        account: account.into(),
        group_access,
    };
    let config = |map: Vec<AccountRule>, restricted: Vec<String>| IssuerConfig {
        url: ISS.into(),
        base_path: "/vo".into(),
        audiences: vec![AUD.into()],
        account: "vouser".into(),
        restricted_paths: restricted,
        map,
    };
    let iss = Issuers::new(vec![config(
        vec![
            rule(Some("bob"), None, "bob", false),
            rule(None, Some("/vo/prod"), "voprod", true),
            rule(None, Some("/vo"), "vomember", false),
        ],
        vec![],
    )])
    .unwrap();
    let token = |claims: Value| check(&s, &iss, &s.token(rs("rsa1"), claims)).unwrap();

    // alice is in /vo and /vo/prod: the first rule that matches, the group one, wins.
    let mut by_group = wlcg("openid offline_access");
    let alice = token(by_group.clone());
    assert_eq!(alice.account, "voprod");
    // No storage scope and group access: the account's rights, under the base path only.
    for op in [
        Operation::Read,
        Operation::Overwrite,
        Operation::Delete,
        Operation::List,
    ] {
        assert!(alice.may(op, "/vo/data/f").is_ok(), "{op:?}");
    }
    assert!(
        alice.may(Operation::Read, "/etc/passwd").is_err(),
        "outside the base path"
    );
    // With a storage scope the scope decides, whatever the group.
    let scoped = token(wlcg("storage.read:/data"));
    assert_eq!(scoped.account, "voprod");
    assert!(scoped.may(Operation::Read, "/vo/data/f").is_ok());
    assert!(scoped.may(Operation::Delete, "/vo/data/f").is_err());
    // A subject rule comes first; it gives no group access.
    by_group["sub"] = json!("bob");
    let bob = token(by_group.clone());
    assert_eq!(bob.account, "bob");
    assert!(
        bob.may(Operation::Read, "/vo/data/f").is_err(),
        "no scope, no group access"
    );
    // A group without group access maps the account but grants nothing by itself.
    by_group["sub"] = json!("carol");
    by_group["wlcg.groups"] = json!(["/vo"]);
    let carol = token(by_group.clone());
    assert_eq!(carol.account, "vomember");
    assert!(carol.may(Operation::Stat, "/vo/f").is_err());
    // Nobody matched: the issuer's account.
    by_group["wlcg.groups"] = json!(["/other"]);
    assert_eq!(token(by_group).account, "vouser");

    // Restricted paths still confine group access.
    let confined = Issuers::new(vec![config(
        vec![rule(None, Some("/vo/prod"), "voprod", true)],
        vec!["/vo/prod".into()],
    )])
    .unwrap();
    let a = check(&s, &confined, &s.token(rs("rsa1"), wlcg("openid"))).unwrap();
    assert!(a.may(Operation::Overwrite, "/vo/prod/f").is_ok());
    assert!(a.may(Operation::Read, "/vo/data/f").is_err());

    // Lines that cannot mean anything are refused when the configuration is read.
    for bad in [
        rule(Some("x"), Some("/vo"), "a", false),
        rule(None, None, "a", false),
        rule(Some("x"), None, "a", true),
        rule(Some("x"), None, "", false),
    ] {
        assert!(
            Issuers::new(vec![config(vec![bad.clone()], vec![])]).is_err(),
            "{bad:?}"
        );
    }
}
