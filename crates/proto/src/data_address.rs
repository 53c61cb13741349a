//! Whether a data address a server named (`227`, `229`, `SPAS`) is one that server can mean.
//! A client that connects wherever a reply says is a blind relay for a hostile server (FTP
//! bounce run backwards): it carries an upload to the server's choice of host and port.
//! Multi-homed transfer nodes and striped servers name addresses other than their control
//! address on purpose, so only what no remote server can mean is refused.

use std::net::{IpAddr, SocketAddr};

/// Why a named data address is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DataAddressError {
    /// A port below 1024: a service, never a data listener.
    #[error(
        "the server at {server} named data address {named}: ports below 1024 are never data ports"
    )]
    ServicePort {
        /// The server's control address.
        server: IpAddr,
        /// The address it named.
        named: SocketAddr,
    },
    /// An address of the client's own host, or its link, from a server that is not there.
    #[error("the server at {server} named data address {named}, which is {what}: a server that is not itself {what} cannot mean it")]
    NotTheServers {
        /// The server's control address.
        server: IpAddr,
        /// The address it named.
        named: SocketAddr,
        /// "loopback", "link-local", "a private address" …
        what: &'static str,
    },
    /// Another host than the server, where only the server itself may be named.
    #[error("the server at {server} named data address {named}: only the server's own address is taken here")]
    NotTheServer {
        /// The server's control address.
        server: IpAddr,
        /// The address it named.
        named: SocketAddr,
    },
    /// Unspecified, multicast or broadcast: no host listens there.
    #[error("the server at {server} named data address {named}, where no host can listen")]
    Unusable {
        /// The server's control address.
        server: IpAddr,
        /// The address it named.
        named: SocketAddr,
    },
}

/// How far from the client an address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    Loopback,
    LinkLocal,
    Private,
    Global,
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn scope(ip: IpAddr) -> Scope {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Scope::Loopback
            } else if v4.is_link_local() {
                Scope::LinkLocal
            } else if v4.is_private() || (a == 100 && (64..128).contains(&b)) {
                // RFC 1918 and the carrier-grade NAT range (RFC 6598).
                Scope::Private
            } else {
                Scope::Global
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Scope::Loopback
            } else if first & 0xffc0 == 0xfe80 {
                Scope::LinkLocal
            } else if first & 0xfe00 == 0xfc00 {
                Scope::Private
            } else {
                Scope::Global
            }
        }
    }
}

fn unusable(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast(),
        IpAddr::V6(v6) => v6.is_unspecified() || v6.is_multicast(),
    }
}

/// Checks a data address `named` by the server whose control connection is at `server`: a
/// port below 1024, an address where nothing listens, and an address nearer the client than
/// the server itself is (loopback from a server that is not local, link-local from one beyond
/// the link, private from one reached at a global address) are refused.
pub fn check_server_data_address(
    server: IpAddr,
    named: SocketAddr,
) -> Result<(), DataAddressError> {
    if named.port() < 1024 {
        return Err(DataAddressError::ServicePort { server, named });
    }
    if unusable(named.ip()) {
        return Err(DataAddressError::Unusable { server, named });
    }
    let (to, from) = (scope(named.ip()), scope(server));
    if to < from {
        let what = match to {
            Scope::Loopback => "loopback",
            Scope::LinkLocal => "link-local",
            _ => "a private address",
        };
        return Err(DataAddressError::NotTheServers {
            server,
            named,
            what,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(server: &str, named: &str) -> Result<(), DataAddressError> {
        check_server_data_address(server.parse().unwrap(), named.parse().unwrap())
    }

    #[test]
    fn what_a_remote_server_cannot_mean_is_refused() {
        // The reviewer's case: a loopback server is local, so 127.0.0.2 is possible from it;
        // from a server elsewhere it is the client's own host.
        assert!(check("192.0.2.7", "127.0.0.2:5000").is_err());
        assert!(check("192.0.2.7", "10.0.0.5:5000").is_err());
        assert!(check("192.0.2.7", "192.168.1.1:5000").is_err());
        assert!(check("192.0.2.7", "100.64.0.1:5000").is_err());
        assert!(check("192.0.2.7", "169.254.1.1:5000").is_err());
        assert!(check("10.0.0.9", "169.254.1.1:5000").is_err());
        assert!(check("10.0.0.9", "127.0.0.1:5000").is_err());
        assert!(check("2001:db8::1", "[fe80::1]:5000").is_err());
        assert!(check("2001:db8::1", "[::1]:5000").is_err());
        assert!(check("2001:db8::1", "[fd00::1]:5000").is_err());
        for named in ["0.0.0.0:5000", "224.0.0.1:5000", "255.255.255.255:5000"] {
            assert!(check("10.0.0.9", named).is_err(), "{named}");
        }
        for named in ["192.0.2.8:25", "127.0.0.1:22", "10.0.0.1:0"] {
            assert!(matches!(
                check("127.0.0.1", named),
                Err(DataAddressError::ServicePort { .. })
            ));
        }
    }

    #[test]
    fn data_interfaces_and_data_nodes_stay_reachable() {
        // A data node on the site's private network, named by a frontend on it.
        assert!(check("10.0.0.9", "10.0.1.20:50000").is_ok());
        // A multi-homed node's separate data interface, public to public.
        assert!(check("192.0.2.7", "198.51.100.3:50000").is_ok());
        // A server on this host may name any of its loopback addresses.
        assert!(check("127.0.0.1", "127.0.0.2:50000").is_ok());
        assert!(check("::ffff:127.0.0.1", "127.0.0.1:50000").is_ok());
        // A private server naming a public address (its NAT's outside) is fine.
        assert!(check("10.0.0.9", "192.0.2.7:50000").is_ok());
        assert!(check("2001:db8::1", "[2001:db8::2]:50000").is_ok());
    }
}
