//! The session key of a copy's QUIC data connections (`quic:bind=HEX`, see ferry-net's quic
//! transport): 32 bytes that both ends of each QUIC data connection must prove they know, so
//! that under DCAU N too (and in anonymous sessions) a data connection is the one the control
//! sessions set up, and not any QUIC peer that reached the port.
//!
//! The key is set in the `SITE SETNETSTACK quic` the client sends to each server of a copy, and
//! in the client's own end of two-party copies. It is derived from a random secret of this
//! process and the names of the servers the copy involves (one for two-party copies, both for
//! third party), so a server learns only the keys of copies it takes part in. A stack that
//! names its own `bind=` keeps it.

use std::sync::OnceLock;

use ferry_proto::stack::StackSpec;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;

/// `stack` with a session key for a copy between `server` and `peer` (the other server of a
/// third-party copy; `None`: this client) when its transport is QUIC.
pub(crate) fn bound(mut stack: StackSpec, server: &str, peer: Option<&str>) -> StackSpec {
    let Some(quic) = stack.drivers.first_mut().filter(|d| d.name == "quic") else {
        return stack;
    };
    if quic.options.split(';').any(|o| o.starts_with("bind=")) {
        return stack;
    }
    let mut parties = [server, peer.unwrap_or("")];
    parties.sort_unstable();
    let key = derive(secret(), &parties.join("\n"));
    if !quic.options.is_empty() {
        quic.options.push(';');
    }
    quic.options.push_str("bind=");
    for b in key {
        quic.options.push_str(&format!("{b:02x}"));
    }
    stack
}

/// `stack` as a user may see it: without a session key (in messages and logs).
pub(crate) fn unkeyed(mut stack: StackSpec) -> StackSpec {
    for d in &mut stack.drivers {
        let kept: Vec<&str> = d
            .options
            .split(';')
            .filter(|o| !o.is_empty() && !o.starts_with("bind="))
            .collect();
        d.options = kept.join(";");
    }
    stack
}

/// This process's secret, made on first use and never written anywhere.
fn secret() -> &'static [u8; 32] {
    static SECRET: OnceLock<[u8; 32]> = OnceLock::new();
    SECRET.get_or_init(|| {
        let mut s = [0u8; 32];
        // Without the kernel's random bytes nothing here is safe to run; openssl only fails
        // when its generator cannot be seeded.
        openssl::rand::rand_bytes(&mut s).unwrap_or_else(|e| {
            panic!("no random bytes for the QUIC session key: {e}");
        });
        s
    })
}

/// HMAC-SHA256 of `parties` under `secret`.
fn derive(secret: &[u8; 32], parties: &str) -> Vec<u8> {
    let sign = || {
        let key = PKey::hmac(secret)?;
        let mut signer = Signer::new(MessageDigest::sha256(), &key)?;
        signer.update(b"ferry quic session key\n")?;
        signer.update(parties.as_bytes())?;
        signer.sign_to_vec()
    };
    sign().unwrap_or_else(|e| panic!("HMAC-SHA256 failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(stack: &StackSpec) -> Option<&str> {
        stack.drivers[0]
            .options
            .split(';')
            .find_map(|o| o.strip_prefix("bind="))
    }

    #[test]
    fn quic_stacks_get_one_key_per_set_of_servers_and_others_none() {
        let quic = |s: &str| StackSpec::parse(s).unwrap();
        let alone = bound(quic("quic"), "a:2811", None);
        let k = key_of(&alone).unwrap();
        assert_eq!(k.len(), 64);
        assert!(k.bytes().all(|b| b.is_ascii_hexdigit()));
        // The same copy again: the same key (the server already has it: no new SETNETSTACK).
        assert_eq!(bound(quic("quic"), "a:2811", None), alone);
        // Both servers of a third-party copy get one key, whichever side asks.
        let ab = bound(quic("quic"), "a:2811", Some("b:2811"));
        let ba = bound(quic("quic"), "b:2811", Some("a:2811"));
        assert_eq!(key_of(&ab), key_of(&ba));
        // Another server, another key.
        assert_ne!(key_of(&ab), Some(k));
        assert_ne!(key_of(&bound(quic("quic"), "c:2811", None)), Some(k));
        // Options stay, a key named by the user stays, other transports get none.
        let cubic = bound(quic("quic:congestion=cubic"), "a:2811", None);
        assert!(cubic.drivers[0]
            .options
            .starts_with("congestion=cubic;bind="));
        let mine = quic(&format!("quic:bind={}", "ab".repeat(32)));
        assert_eq!(bound(mine.clone(), "a:2811", None), mine);
        for other in ["tcp", "udt,gsi", "tcp:congestion=bbr"] {
            assert_eq!(bound(quic(other), "a:2811", None), quic(other));
        }
        // Messages show the stack without its key.
        assert_eq!(unkeyed(cubic).to_string(), "quic:congestion=cubic");
        assert_eq!(unkeyed(alone).to_string(), "quic");
    }
}
