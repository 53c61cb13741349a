//! Host-port forms: `PORT`/`PASV` (`h1,h2,h3,h4,p1,p2`), `EPRT`/`EPSV` (`|1|ip|port|`), SPAS/SPOR lists.

use std::fmt;
use std::net::SocketAddr;

/// A data-channel endpoint as carried on the control channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostPort(pub SocketAddr);

/// Why a host-port string is not valid: the PI answers 501.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HostPortError {
    /// Not six comma-separated numbers 0-255.
    #[error("malformed PORT argument")]
    MalformedPort,
    /// Not `|proto|addr|port|` with a delimiter from ASCII 33-126.
    #[error("malformed EPRT argument")]
    MalformedEprt,
    /// Network protocol other than 1 (IPv4) or 2 (IPv6): 522.
    #[error("network protocol not supported, use (1,2)")]
    UnsupportedProtocol,
}

impl HostPort {
    /// Parses the PORT form `h1,h2,h3,h4,p1,p2` (IPv4 only).
    pub fn parse_port(s: &str) -> Result<HostPort, HostPortError> {
        let _ = s;
        todo!()
    }

    /// Parses the EPRT form `<d>1<d>ip<d>port<d>` / `<d>2<d>ip6<d>port<d>` (any delimiter).
    pub fn parse_eprt(s: &str) -> Result<HostPort, HostPortError> {
        let _ = s;
        todo!()
    }

    /// Parses either form, as SPOR entries come in both.
    pub fn parse_any(s: &str) -> Result<HostPort, HostPortError> {
        let _ = s;
        todo!()
    }

    /// The PORT form; `None` for an IPv6 address (which only the EPRT form can carry).
    pub fn to_port_form(&self) -> Option<String> {
        todo!()
    }

    /// The EPRT form `|1|ip|port|` or `|2|ip6|port|`.
    pub fn to_eprt_form(&self) -> String {
        todo!()
    }

    /// The `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)` reply text (without the code); `None` for IPv6.
    pub fn pasv_reply_text(&self) -> Option<String> {
        todo!()
    }

    /// The `229 Entering Extended Passive Mode (|||port|)` reply text (without the code).
    pub fn epsv_reply_text(port: u16) -> String {
        let _ = port;
        todo!()
    }

    /// Finds the endpoint in a 227 reply text (the numbers inside the first parentheses, or
    /// the first six comma-separated numbers if there are no parentheses).
    pub fn from_pasv_reply(text: &str) -> Result<HostPort, HostPortError> {
        let _ = text;
        todo!()
    }

    /// Finds the port in a 229 reply text `(|||port|)`; the caller supplies the control peer's IP.
    pub fn port_from_epsv_reply(text: &str) -> Result<u16, HostPortError> {
        let _ = text;
        todo!()
    }

    /// Parses the lines of a multi-line SPAS reply (each ` h1,..,p2` or ` |1|ip|port|`), skipping
    /// the first and last lines.
    pub fn from_spas_reply(lines: &[String]) -> Result<Vec<HostPort>, HostPortError> {
        let _ = lines;
        todo!()
    }
}

impl fmt::Display for HostPort {
    /// The PORT form for IPv4, the EPRT form for IPv6.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let _ = f;
        todo!()
    }
}
