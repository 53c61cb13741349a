//! Bearer tokens as a door receives them: the compact JWS, its claims and scopes, an issuer's
//! key set, and the paths scopes are matched against. Nothing may panic.
#![no_main]

use ferry_token::keys::KeySet;
use ferry_token::scope::normalize;
use ferry_token::{Claims, Grants, Jwt, Operation, Profile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = KeySet::parse(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(jwt) = Jwt::decode(text) {
        if let Ok(claims) = Claims::read(&jwt.claims) {
            let _ = claims.check_time(1_800_000_000);
            let _ = claims.check_audience(&["https://ferry.test".to_string()]);
            let _ = Grants::parse(&claims.scopes, claims.profile, "/vo");
        }
    }
    let scopes: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    for profile in [Profile::Wlcg, Profile::SciTokens] {
        if let Ok(grants) = Grants::parse(&scopes, profile, "/vo") {
            for op in [Operation::Read, Operation::Mkdir, Operation::Overwrite] {
                let _ = grants.allow(op, text);
            }
        }
    }
    let _ = normalize(text);
});
