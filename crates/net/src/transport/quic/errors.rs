//! How a QUIC data connection's handshake or stream failed, in words a user can act on.

use std::io;
use std::net::SocketAddr;

use super::binding;
use super::gsi::Refusal;
use crate::NetError;

/// A failed handshake with `peer` as the error the DTP reports: `refusal` holds this side's
/// reason for refusing the peer's credential, if it did; `protected`: DCAU A or S.
pub(super) fn failed(
    e: io::Error,
    refusal: &Refusal,
    peer: SocketAddr,
    protected: bool,
) -> NetError {
    match (refusal.take(), tls_alert(&e)) {
        (None, None) if e.kind() == io::ErrorKind::PermissionDenied => NetError::Security(format!(
            "QUIC data connection with {peer}: {}",
            explained(e)
        )),
        (None, None) if closed_with(&e, binding::REFUSED) => NetError::Security(format!(
            "QUIC data connection with {peer}: the peer refused it: {}",
            explained(e)
        )),
        (None, None) => NetError::Connect {
            addr: peer,
            source: explained(e),
        },
        (Some(why), _) => NetError::Security(format!(
            "QUIC data connection with {peer}: its credential is refused: {why}"
        )),
        (None, Some(Alert::Theirs)) if protected => NetError::Security(format!(
            "QUIC data connection with {peer}: the peer refused our credential ({})",
            explained(e)
        )),
        (None, Some(Alert::Theirs)) => NetError::Security(format!(
            "QUIC data connection with {peer}: the peer refused the handshake ({}); \
             does it ask for DCAU A or S where this side has DCAU N?",
            explained(e)
        )),
        (None, Some(Alert::Ours)) => NetError::Security(format!(
            "QUIC data connection with {peer}: TLS handshake failed: {}",
            explained(e)
        )),
    }
}

/// Which side ended a failed handshake with a TLS alert.
enum Alert {
    /// The peer sent it.
    Theirs,
    /// This side did.
    Ours,
}

/// Whether a failed handshake ended in a TLS alert (QUIC's CRYPTO_ERROR codes 0x100-0x1ff),
/// and whose.
fn tls_alert(e: &io::Error) -> Option<Alert> {
    let crypto = |code: u64| (0x100..0x200).contains(&code);
    match connection_error(e)? {
        quinn::ConnectionError::ConnectionClosed(c) if crypto(u64::from(c.error_code)) => {
            Some(Alert::Theirs)
        }
        quinn::ConnectionError::TransportError(t) if crypto(u64::from(t.code)) => Some(Alert::Ours),
        _ => None,
    }
}

/// The connection's end behind an I/O error of its handshake or stream, if that is what it is.
pub(super) fn connection_error(e: &io::Error) -> Option<&quinn::ConnectionError> {
    let inner = e.get_ref()?;
    if let Some(c) = inner.downcast_ref::<quinn::ConnectionError>() {
        return Some(c);
    }
    match (
        inner.downcast_ref::<quinn::ReadError>(),
        inner.downcast_ref::<quinn::WriteError>(),
    ) {
        (Some(quinn::ReadError::ConnectionLost(c)), _) => Some(c),
        (_, Some(quinn::WriteError::ConnectionLost(c))) => Some(c),
        _ => None,
    }
}

/// Whether the peer closed the connection with application error `code`.
fn closed_with(e: &io::Error, code: u8) -> bool {
    matches!(connection_error(e), Some(quinn::ConnectionError::ApplicationClosed(c))
        if c.error_code == quinn::VarInt::from(code))
}

/// An I/O error of a handshake or stream, saying how the connection ended when it did.
pub(super) fn explained(e: io::Error) -> io::Error {
    match connection_error(&e) {
        Some(c) => io::Error::new(e.kind(), c.clone()),
        None => e,
    }
}
