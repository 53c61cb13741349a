//! Striping across hosts: a frontend PI hands each transfer to DTPs on its data nodes over an
//! authenticated IPC link and merges what they report.
//!
//! - [`ipc`]: the link (TLS 1.3 keyed by a shared secret, or GSI TLS with host credentials)
//!   and its messages: one transfer description out, events back.
//! - [`node`]: `ferry serve --data-node`, a DTP per frontend session.
//! - [`frontend`]: the frontend's side, a DTP stand-in that drives many nodes.
//! - [`node_job`]: one node's part of a transfer, as the frontend runs it.

pub(crate) mod frontend;
pub(crate) mod ipc;
pub(crate) mod node;
mod node_job;

use std::net::IpAddr;
use std::str::FromStr;

/// Who may open an IPC link to a data node (`--ipc-allow-from`).
#[derive(Debug, Clone)]
pub(crate) struct AllowFrom(Vec<ipnet::IpNet>);

impl AllowFrom {
    /// One entry: an address (`10.0.0.5`) or a network (`10.0.0.0/8`, `fd00::/8`).
    pub(crate) fn parse(entry: &str) -> Result<ipnet::IpNet, String> {
        let e = entry.trim();
        if let Ok(net) = ipnet::IpNet::from_str(e) {
            return Ok(net);
        }
        IpAddr::from_str(e)
            .map(ipnet::IpNet::from)
            .map_err(|_| format!("{entry:?} is neither an address nor a network"))
    }

    /// The list; an empty list allows everyone (the link's authentication still applies).
    pub(crate) fn new(entries: &[String]) -> Result<AllowFrom, String> {
        AllowFrom::parse_all(entries).map(AllowFrom)
    }

    /// Every entry as a network.
    pub(crate) fn parse_all(entries: &[String]) -> Result<Vec<ipnet::IpNet>, String> {
        entries.iter().map(|e| AllowFrom::parse(e)).collect()
    }

    /// Whether `ip` may connect.
    pub(crate) fn allows(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.is_empty() || self.0.iter().any(|n| n.contains(&ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_from_takes_addresses_and_networks() {
        let a = AllowFrom::new(&["127.0.0.1".into(), "10.1.0.0/16".into()]).unwrap();
        assert!(a.allows("127.0.0.1".parse().unwrap()));
        assert!(a.allows("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!a.allows("10.2.0.1".parse().unwrap()));
        assert!(AllowFrom::new(&[])
            .unwrap()
            .allows("192.0.2.1".parse().unwrap()));
        assert!(AllowFrom::parse("10.0.0.0/33").is_err());
        assert!(AllowFrom::parse("nodes.example").is_err());
    }
}
