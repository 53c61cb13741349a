//! Host-port forms: `PORT`/`PASV` (`h1,h2,h3,h4,p1,p2`), `EPRT`/`EPSV` (`|1|ip|port|`), SPAS/SPOR lists.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

#[cfg(test)]
mod tests;

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
        let mut n = [0u8; 6];
        let mut parts = s.trim().split(',');
        for slot in &mut n {
            let part = parts.next().ok_or(HostPortError::MalformedPort)?.trim();
            if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HostPortError::MalformedPort);
            }
            *slot = part.parse().map_err(|_| HostPortError::MalformedPort)?;
        }
        if parts.next().is_some() {
            return Err(HostPortError::MalformedPort);
        }
        let ip = Ipv4Addr::new(n[0], n[1], n[2], n[3]);
        let port = u16::from_be_bytes([n[4], n[5]]);
        Ok(HostPort(SocketAddr::new(IpAddr::V4(ip), port)))
    }

    /// Parses the EPRT form `<d>1<d>ip<d>port<d>` / `<d>2<d>ip6<d>port<d>` (any delimiter).
    pub fn parse_eprt(s: &str) -> Result<HostPort, HostPortError> {
        let s = s.trim();
        let delim = s.chars().next().ok_or(HostPortError::MalformedEprt)?;
        if !('!'..='~').contains(&delim) {
            return Err(HostPortError::MalformedEprt);
        }
        let fields: Vec<&str> = s.split(delim).collect();
        // "" proto addr port "" : the string starts and ends with the delimiter.
        let [first, proto, addr, port, last] = fields[..] else {
            return Err(HostPortError::MalformedEprt);
        };
        if !first.is_empty() || !last.is_empty() {
            return Err(HostPortError::MalformedEprt);
        }
        let port = parse_port_number(port).ok_or(HostPortError::MalformedEprt)?;
        let ip = match proto {
            "1" => IpAddr::V4(
                addr.parse::<Ipv4Addr>()
                    .map_err(|_| HostPortError::MalformedEprt)?,
            ),
            "2" => IpAddr::V6(
                addr.parse::<Ipv6Addr>()
                    .map_err(|_| HostPortError::MalformedEprt)?,
            ),
            p if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                return Err(HostPortError::UnsupportedProtocol)
            }
            _ => return Err(HostPortError::MalformedEprt),
        };
        Ok(HostPort(SocketAddr::new(ip, port)))
    }

    /// Parses either form, as SPOR entries come in both.
    pub fn parse_any(s: &str) -> Result<HostPort, HostPortError> {
        let t = s.trim();
        if t.starts_with(|c: char| c.is_ascii_digit()) && t.contains(',') {
            HostPort::parse_port(t)
        } else {
            HostPort::parse_eprt(t)
        }
    }

    /// The PORT form; `None` for an IPv6 address (which only the EPRT form can carry).
    pub fn to_port_form(&self) -> Option<String> {
        let SocketAddr::V4(v4) = self.0 else {
            return None;
        };
        let [h1, h2, h3, h4] = v4.ip().octets();
        let [p1, p2] = v4.port().to_be_bytes();
        Some(format!("{h1},{h2},{h3},{h4},{p1},{p2}"))
    }

    /// The EPRT form `|1|ip|port|` or `|2|ip6|port|`.
    pub fn to_eprt_form(&self) -> String {
        match self.0 {
            SocketAddr::V4(v4) => format!("|1|{}|{}|", v4.ip(), v4.port()),
            SocketAddr::V6(v6) => format!("|2|{}|{}|", v6.ip(), v6.port()),
        }
    }

    /// The `227 Entering Passive Mode (h1,h2,h3,h4,p1,p2)` reply text (without the code); `None` for IPv6.
    pub fn pasv_reply_text(&self) -> Option<String> {
        self.to_port_form()
            .map(|hp| format!("Entering Passive Mode ({hp})"))
    }

    /// The `229 Entering Extended Passive Mode (|||port|)` reply text (without the code).
    pub fn epsv_reply_text(port: u16) -> String {
        format!("Entering Extended Passive Mode (|||{port}|)")
    }

    /// Finds the endpoint in a 227 reply text (the numbers inside the first parentheses, or
    /// the first six comma-separated numbers if there are no parentheses).
    pub fn from_pasv_reply(text: &str) -> Result<HostPort, HostPortError> {
        if let Some((_, after)) = text.split_once('(') {
            let (inside, _) = after.split_once(')').ok_or(HostPortError::MalformedPort)?;
            return HostPort::parse_port(inside);
        }
        // No parentheses: try each maximal run of digits and commas, first that parses wins.
        text.split(|c: char| !(c.is_ascii_digit() || c == ','))
            .map(|run| run.trim_matches(','))
            .find_map(|run| HostPort::parse_port(run).ok())
            .ok_or(HostPortError::MalformedPort)
    }

    /// Finds the port in a 229 reply text `(|||port|)`; the caller supplies the control peer's IP.
    ///
    /// The address form `(|1|ip|port|)` that some servers send is accepted too; its address is
    /// ignored.
    pub fn port_from_epsv_reply(text: &str) -> Result<u16, HostPortError> {
        let (_, after) = text.split_once('(').ok_or(HostPortError::MalformedEprt)?;
        let (inside, _) = after.split_once(')').ok_or(HostPortError::MalformedEprt)?;
        let delim = inside.chars().next().ok_or(HostPortError::MalformedEprt)?;
        if !('!'..='~').contains(&delim) {
            return Err(HostPortError::MalformedEprt);
        }
        let fields: Vec<&str> = inside.split(delim).collect();
        let [first, _proto, _addr, port, last] = fields[..] else {
            return Err(HostPortError::MalformedEprt);
        };
        if !first.is_empty() || !last.is_empty() {
            return Err(HostPortError::MalformedEprt);
        }
        parse_port_number(port).ok_or(HostPortError::MalformedEprt)
    }

    /// Parses the lines of a multi-line SPAS reply (each ` h1,..,p2` or ` |1|ip|port|`), skipping
    /// the first and last lines.
    ///
    /// Blank lines are skipped; a reply without any address is [`HostPortError::MalformedPort`].
    pub fn from_spas_reply(lines: &[String]) -> Result<Vec<HostPort>, HostPortError> {
        let inner = match lines {
            [_, inner @ .., _] => inner,
            _ => &[],
        };
        let found = inner
            .iter()
            .filter(|line| !line.trim().is_empty())
            .map(|line| HostPort::parse_any(line))
            .collect::<Result<Vec<_>, _>>()?;
        if found.is_empty() {
            return Err(HostPortError::MalformedPort);
        }
        Ok(found)
    }
}

/// A decimal port 0-65535 (digits only).
fn parse_port_number(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl fmt::Display for HostPort {
    /// The PORT form for IPv4, the EPRT form for IPv6.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_port_form() {
            Some(port_form) => f.write_str(&port_form),
            None => f.write_str(&self.to_eprt_form()),
        }
    }
}
