//! The first bytes of a QUIC data connection's stream, and with a session key the proof that
//! binds the connection to the control sessions that asked for it.
//!
//! QUIC always encrypts, but under DCAU N neither end names the other: each presents an
//! ephemeral certificate, so any QUIC peer that reaches the port could take the transfer's
//! connection. A session key (`bind=HEX`, 32 random bytes a ferry client puts in the `SITE
//! SETNETSTACK quic` it sends to each server of a copy, and gives its own end) closes that:
//! - each side proves, inside the encrypted connection, that it knows the key *and* that it
//!   holds this end of this very TLS session: its proof is HMAC-SHA256(key, role ‖ exporter),
//!   the exporter being keying material of the connection's TLS session (RFC 5705, label
//!   [`LABEL`]). A peer without the key (another session's, a stray one) cannot make it; one
//!   relaying between two TLS sessions (a man in the middle of the data path) holds two
//!   exporters, and the proofs made for one do not check against the other;
//! - on the wire the connecting side writes [`BOUND`] and its proof where it would write
//!   [`PLAIN`]; the listener checks it and answers [`BOUND`] and its own proof, which the
//!   connecting side checks in turn. A side given a key refuses a peer that proves none, and
//!   a side without one refuses a proof, each with a reason.
//!
//! The key is as secret as the control channel that carries it: a GSI control channel keeps
//! it; a clear one leaves it to whoever reads that channel *and* sits on the data path.

use std::io;

use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;

/// A session key's length in bytes.
pub(crate) const KEY_LEN: usize = 32;
/// The connecting side's first bytes without a session key (and the listener's answer).
pub(super) const PLAIN: &[u8; 8] = b"ferry-q1";
/// The same with a session key: a proof follows.
pub(super) const BOUND: &[u8; 8] = b"ferry-q2";
/// The exporter label the proofs are made over.
const LABEL: &[u8] = b"EXPORTER-ferry-dc-session-key";
/// The application error code a listener closes a connection with when it refuses its
/// session key (a wrong preamble: 1).
pub(super) const REFUSED: u8 = 2;
/// A proof's length: one HMAC-SHA256.
const PROOF_LEN: usize = 32;

/// The key a copy's control sessions share for its QUIC data connections.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionKey([u8; KEY_LEN]);

impl SessionKey {
    /// From [`KEY_LEN`] bytes written as hexadecimal digits, as `bind=` carries it.
    pub(super) fn from_hex(hex: &str) -> Option<SessionKey> {
        if hex.len() != 2 * KEY_LEN || !hex.is_ascii() {
            return None;
        }
        let mut key = [0u8; KEY_LEN];
        for (i, b) in key.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(SessionKey(key))
    }
}

/// Which end of the connection a proof speaks for: each proves its own, so a proof cannot be
/// sent back to the side that made it.
#[derive(Debug, Clone, Copy)]
enum Role {
    Connecting,
    Listening,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Connecting => b"connecting",
            Role::Listening => b"listening",
        }
    }
}

fn proof(conn: &quinn::Connection, key: &SessionKey, role: Role) -> io::Result<[u8; PROOF_LEN]> {
    let mut exported = [0u8; 32];
    conn.export_keying_material(&mut exported, LABEL, role.label())
        .map_err(|_| io::Error::other("the QUIC session exports no keying material"))?;
    let mac = (|| {
        let key = PKey::hmac(&key.0)?;
        let mut signer = Signer::new(MessageDigest::sha256(), &key)?;
        signer.update(role.label())?;
        signer.update(&exported)?;
        signer.sign_to_vec()
    })()
    .map_err(io::Error::other)?;
    let mut out = [0u8; PROOF_LEN];
    out.copy_from_slice(&mac);
    Ok(out)
}

/// Reads the peer's proof and checks it in constant time.
async fn check(
    conn: &quinn::Connection,
    recv: &mut quinn::RecvStream,
    key: &SessionKey,
    role: Role,
) -> io::Result<()> {
    let mut got = [0u8; PROOF_LEN];
    read_exact(recv, &mut got, "the session key's proof").await?;
    if openssl::memcmp::eq(&got, &proof(conn, key, role)?) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        "the peer does not prove this session's key: it is not the peer the control sessions \
         set up (another session's, or one in the middle of the path)",
    ))
}

fn first_bytes(key: Option<&SessionKey>) -> &'static [u8; 8] {
    match key {
        Some(_) => BOUND,
        None => PLAIN,
    }
}

/// What a side given `key` makes of the peer's first 8 bytes: `Ok` when they match, else
/// the reason.
fn agree(got: &[u8; 8], key: Option<&SessionKey>) -> io::Result<()> {
    let denied = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            why.to_string(),
        ))
    };
    match (got, key) {
        (g, Some(_)) if g == BOUND => Ok(()),
        (g, None) if g == PLAIN => Ok(()),
        (g, Some(_)) if g == PLAIN => denied(
            "the peer proves no session key where this side's stack has one (bind=): an older \
             ferry, or a stack set without it",
        ),
        (g, None) if g == BOUND => denied(
            "the peer proves a session key (bind=) this side's stack was not given: set the same \
             quic stack at both ends",
        ),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a ferry data connection (wrong preamble)",
        )),
    }
}

/// The connecting side, its stream just opened: writes its first bytes (and proof), then
/// reads and checks the listener's answer. The answer also says the listener took the
/// connection: TLS 1.3 lets a client finish its handshake before the server has checked the
/// client's certificate.
pub(super) async fn introduce(
    conn: &quinn::Connection,
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    key: Option<&SessionKey>,
) -> io::Result<()> {
    send.write_all(first_bytes(key)).await?;
    if let Some(key) = key {
        send.write_all(&proof(conn, key, Role::Connecting)?).await?;
    }
    let mut answer = [0u8; 8];
    read_exact(recv, &mut answer, "the listener's answer").await?;
    agree(&answer, key).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidData => io::Error::new(
            io::ErrorKind::InvalidData,
            "the listener is not a ferry data channel (wrong answer)",
        ),
        _ => e,
    })?;
    match key {
        Some(key) => check(conn, recv, key, Role::Listening).await,
        None => Ok(()),
    }
}

/// The listening side, the peer's stream just accepted: reads and checks the first bytes (and
/// proof), then answers with its own. A peer refused is told why as the connection closes.
pub(super) async fn answer(
    conn: &quinn::Connection,
    send: &mut quinn::SendStream,
    recv: &mut quinn::RecvStream,
    key: Option<&SessionKey>,
) -> io::Result<()> {
    let mut first = [0u8; 8];
    read_exact(recv, &mut first, "the preamble").await?;
    let checked = match agree(&first, key) {
        Ok(()) => match key {
            Some(key) => check(conn, recv, key, Role::Connecting).await,
            None => Ok(()),
        },
        Err(e) => Err(e),
    };
    if let Err(e) = checked {
        let code: u8 = match e.kind() {
            io::ErrorKind::InvalidData => 1,
            _ => REFUSED,
        };
        conn.close(code.into(), e.to_string().as_bytes());
        return Err(e);
    }
    send.write_all(first_bytes(key)).await?;
    if let Some(key) = key {
        send.write_all(&proof(conn, key, Role::Listening)?).await?;
    }
    Ok(())
}

async fn read_exact(recv: &mut quinn::RecvStream, buf: &mut [u8], what: &str) -> io::Result<()> {
    match recv.read_exact(buf).await {
        Ok(()) => Ok(()),
        Err(quinn::ReadExactError::ReadError(e)) => Err(e.into()),
        Err(quinn::ReadExactError::FinishedEarly(n)) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the stream ended after {n} of {what}'s {} bytes", buf.len()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_64_hex_digits_and_the_first_bytes_say_whether_one_is_proved() {
        let hex = "00ff".repeat(16);
        let key = SessionKey::from_hex(&hex).unwrap();
        assert_eq!(key.0[..2], [0x00, 0xff]);
        for bad in [
            String::new(),
            hex[..62].to_string(),
            format!("{hex}00"),
            "zz".repeat(32),
            "é".repeat(32),
        ] {
            assert!(SessionKey::from_hex(&bad).is_none(), "{bad:?}");
        }
        assert!(agree(BOUND, Some(&key)).is_ok());
        assert!(agree(PLAIN, None).is_ok());
        for (got, key) in [(PLAIN, Some(&key)), (BOUND, None)] {
            let e = agree(got, key).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
            assert!(e.to_string().contains("bind="), "{e}");
        }
        let e = agree(b"GET / HT", Some(&key)).unwrap_err();
        assert!(e.to_string().contains("wrong preamble"), "{e}");
    }
}
