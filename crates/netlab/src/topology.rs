//! Topology files: hosts and the links between them, with each link's rate, delay, jitter,
//! loss, queue and MTU.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::NetlabError;

/// A lab as written in its TOML file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Lab name: namespaces are `fnl-NAME-HOST`.
    pub name: String,
    /// Hosts, each a network namespace (or, with `router = true`, the emulator itself).
    #[serde(rename = "host")]
    pub hosts: Vec<HostSpec>,
    /// Links between hosts.
    #[serde(rename = "link", default)]
    pub links: Vec<LinkSpec>,
    /// TCP congestion control in every host (e.g. `cubic`, `bbr`); default: the machine's.
    pub congestion: Option<String>,
}

/// One host.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// Short name (letters, digits, `-`; at most 8 characters).
    pub name: String,
    /// A router is no namespace: packets between hosts with no direct link pass through it,
    /// crossing both hosts' links to it.
    #[serde(default)]
    pub router: bool,
    /// A worker node on a private network behind this head node: only its head and the
    /// head's other workers can reach it, as with cluster nodes that have no public route.
    pub behind: Option<String>,
}

/// A link as written: both directions get the same settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// One end.
    pub a: String,
    /// The other end.
    pub b: String,
    /// Rate, e.g. `1Gbit`, `400Mbit` (default: unlimited).
    pub rate: Option<String>,
    /// One-way delay, e.g. `30ms` (default 0).
    pub delay: Option<String>,
    /// Jitter added uniformly in ±jitter to the delay, without reordering (default 0).
    pub jitter: Option<String>,
    /// Random loss in percent (default 0).
    #[serde(default)]
    pub loss: f64,
    /// Bytes that may wait for the wire before tail drop, e.g. `4MB` (default: one bandwidth-
    /// delay product, at least 256 KB).
    pub queue: Option<String>,
    /// MTU of the hosts' interfaces on this link (default 1500).
    pub mtu: Option<u32>,
    /// Serve small packets (at most [`SPARSE_MAX`] bytes: ACKs, control-channel replies) ahead
    /// of the queue on the direction leaving a host (not the router), as Linux's default qdisc
    /// (fq_codel) serves sparse flows first on a host's uplink, rather than one FIFO for
    /// everything (default false). A router's ports stay FIFO, as a switch's are.
    #[serde(default)]
    pub sparse_first: bool,
}

/// The largest packet `sparse_first` serves ahead of the queue: a TCP ACK with SACK blocks, a
/// short FTP reply.
pub const SPARSE_MAX: usize = 200;

/// A link direction's settings, parsed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkParams {
    /// Bits per second; `None` is unlimited.
    pub rate_bps: Option<u64>,
    /// One-way delay.
    pub delay: Duration,
    /// Uniform jitter bound.
    pub jitter: Duration,
    /// Loss probability, 0..=1.
    pub loss: f64,
    /// Queue limit in bytes.
    pub queue_bytes: u64,
    /// MTU.
    pub mtu: u32,
    /// Small packets go ahead of the queue (see [`LinkSpec::sparse_first`]).
    pub sparse_first: bool,
}

/// A checked topology: hosts with addresses, links with parsed settings.
#[derive(Debug, Clone)]
pub struct Lab {
    /// The lab's name.
    pub name: String,
    /// Hosts that are namespaces, with their addresses, in file order.
    pub hosts: Vec<Host>,
    /// The router host's name, if any.
    pub router: Option<String>,
    /// Links by the names of their two ends (both orders present).
    pub links: HashMap<(String, String), LinkParams>,
    /// TCP congestion control set in every host, if the file names one.
    pub congestion: Option<String>,
}

/// A namespace host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Its name in the file.
    pub name: String,
    /// Its address on the lab network.
    pub addr: Ipv4Addr,
    /// Its network namespace.
    pub netns: String,
    /// MTU of its interface (the largest of its links).
    pub mtu: u32,
    /// The head node it sits behind, if it is a non-routable worker.
    pub behind: Option<String>,
}

/// The lab network: 10.77.0.0/16, host `i` at 10.77.(i / 250).(i % 250 + 1).
pub const NETWORK: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 0);
/// Prefix length of [`NETWORK`].
pub const PREFIX: u8 = 16;
/// Every namespace, interface and pid file of a lab starts with this.
pub const PREFIX_NAME: &str = "fnl-";

impl Topology {
    /// Reads and parses a topology file.
    pub fn load(path: &Path) -> Result<Topology, NetlabError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| NetlabError::Topology(format!("cannot read {}: {e}", path.display())))?;
        Topology::parse(&text)
            .map_err(|e| NetlabError::Topology(format!("{}: {e}", path.display())))
    }

    /// Parses topology TOML.
    pub fn parse(text: &str) -> Result<Topology, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Checks names and settings and assigns addresses.
    pub fn check(&self) -> Result<Lab, NetlabError> {
        let bad = |m: String| NetlabError::Topology(format!("lab '{}': {m}", self.name));
        if !valid_name(&self.name, 12) {
            return Err(bad("the name must be 1-12 letters, digits or '-'".into()));
        }
        let mut seen = std::collections::HashSet::new();
        let mut router = None;
        for h in &self.hosts {
            if !valid_name(&h.name, 8) {
                return Err(bad(format!(
                    "host '{}': names are 1-8 letters, digits or '-'",
                    h.name
                )));
            }
            if !seen.insert(h.name.clone()) {
                return Err(bad(format!("host '{}' is named twice", h.name)));
            }
            if let Some(head) = &h.behind {
                let ok = self
                    .hosts
                    .iter()
                    .any(|o| &o.name == head && !o.router && o.behind.is_none());
                if !ok {
                    return Err(bad(format!(
                        "host '{}' is behind '{head}', which is not a head node of this lab",
                        h.name
                    )));
                }
            }
            if h.router {
                if router.is_some() {
                    return Err(bad("at most one router".into()));
                }
                router = Some(h.name.clone());
            }
        }
        let mut links = HashMap::new();
        let mut mtu_of: HashMap<String, u32> = HashMap::new();
        for l in &self.links {
            for end in [&l.a, &l.b] {
                if !seen.contains(end) {
                    return Err(bad(format!("link to unknown host '{end}'")));
                }
            }
            if l.a == l.b {
                return Err(bad(format!("link from '{}' to itself", l.a)));
            }
            let p = l
                .params()
                .map_err(|e| bad(format!("link {}-{}: {e}", l.a, l.b)))?;
            for end in [&l.a, &l.b] {
                let m = mtu_of.entry(end.clone()).or_insert(p.mtu);
                *m = (*m).max(p.mtu);
            }
            // Small packets first on a host's own uplink only (its qdisc); a router's ports
            // stay one FIFO, as a switch's are.
            let leaving = |from: &String| LinkParams {
                sparse_first: p.sparse_first && router.as_ref() != Some(from),
                ..p
            };
            if links
                .insert((l.a.clone(), l.b.clone()), leaving(&l.a))
                .is_some()
            {
                return Err(bad(format!("two links between '{}' and '{}'", l.a, l.b)));
            }
            links.insert((l.b.clone(), l.a.clone()), leaving(&l.b));
        }
        let hosts: Vec<Host> = self
            .hosts
            .iter()
            .filter(|h| !h.router)
            .enumerate()
            .map(|(i, h)| Host {
                name: h.name.clone(),
                addr: Ipv4Addr::new(10, 77, (i / 250) as u8, (i % 250 + 1) as u8),
                netns: format!("{PREFIX_NAME}{}-{}", self.name, h.name),
                mtu: mtu_of.get(&h.name).copied().unwrap_or(1500),
                behind: h.behind.clone(),
            })
            .collect();
        if hosts.len() < 2 {
            return Err(bad(
                "a lab needs at least two hosts that are not the router".into(),
            ));
        }
        if let Some(cc) = &self.congestion {
            if !valid_name(cc, 16) {
                return Err(bad(format!("congestion control '{cc}' is not a name")));
            }
        }
        let lab = Lab {
            name: self.name.clone(),
            hosts,
            router,
            links,
            congestion: self.congestion.clone(),
        };
        for a in &lab.hosts {
            for b in &lab.hosts {
                if a != b && lab.reachable(a, b) && lab.path(&a.name, &b.name).is_empty() {
                    return Err(bad(format!("no path from '{}' to '{}'", a.name, b.name)));
                }
            }
        }
        Ok(lab)
    }
}

impl LinkSpec {
    fn params(&self) -> Result<LinkParams, String> {
        let rate_bps = self.rate.as_deref().map(parse_rate).transpose()?;
        let delay = self
            .delay
            .as_deref()
            .map(parse_duration)
            .transpose()?
            .unwrap_or_default();
        let jitter = self
            .jitter
            .as_deref()
            .map(parse_duration)
            .transpose()?
            .unwrap_or_default();
        if jitter > delay {
            return Err("jitter larger than the delay".into());
        }
        if !(0.0..100.0).contains(&self.loss) {
            return Err(format!("loss {} is not a percentage below 100", self.loss));
        }
        let mtu = self.mtu.unwrap_or(1500);
        if !(576..=65_535).contains(&mtu) {
            return Err(format!("mtu {mtu} is not in 576-65535"));
        }
        let bdp = rate_bps
            .map(|r| (r as f64 / 8.0 * (2.0 * delay.as_secs_f64())) as u64)
            .unwrap_or(0);
        let queue_bytes = match self.queue.as_deref() {
            Some(q) => parse_bytes(q)?,
            None => bdp.max(256 * 1024),
        };
        Ok(LinkParams {
            rate_bps,
            delay,
            jitter,
            loss: self.loss / 100.0,
            queue_bytes,
            mtu,
            sparse_first: self.sparse_first,
        })
    }
}

impl Lab {
    /// The links a packet from `from` to `to` crosses: the direct one, else both links through
    /// the router; empty when there is no path.
    pub fn path(&self, from: &str, to: &str) -> Vec<LinkParams> {
        self.route(from, to)
            .iter()
            .filter_map(|k| self.links.get(k).copied())
            .collect()
    }

    /// The link directions (as `(from, to)` names) a packet crosses: the direct link, else two
    /// links through the router, else two through a host linked to both (a head node between
    /// its workers); empty when there is no path or the destination is not reachable.
    pub fn route(&self, from: &str, to: &str) -> Vec<(String, String)> {
        let (Some(a), Some(b)) = (self.host(from), self.host(to)) else {
            return Vec::new();
        };
        if !self.reachable(a, b) {
            return Vec::new();
        }
        let key = |x: &str, y: &str| (x.to_string(), y.to_string());
        if self.links.contains_key(&key(from, to)) {
            return vec![key(from, to)];
        }
        let via = self
            .router
            .iter()
            .map(String::as_str)
            .chain(self.hosts.iter().map(|h| h.name.as_str()));
        for x in via {
            if self.links.contains_key(&key(from, x)) && self.links.contains_key(&key(x, to)) {
                return vec![key(from, x), key(x, to)];
            }
        }
        Vec::new()
    }

    /// Whether `a` may send to `b`: a worker behind a head node talks only to its head and
    /// the head's other workers.
    pub fn reachable(&self, a: &Host, b: &Host) -> bool {
        let cluster = |h: &Host| h.behind.clone().unwrap_or_else(|| h.name.clone());
        match (&a.behind, &b.behind) {
            (None, None) => true,
            _ => cluster(a) == cluster(b),
        }
    }

    /// A host by name.
    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }
}

fn valid_name(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

fn split_unit(s: &str) -> (f64, String) {
    let s = s.trim();
    let at = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let n = s[..at].parse().unwrap_or(f64::NAN);
    (n, s[at..].trim().to_ascii_lowercase())
}

/// `1Gbit`, `400mbit`, `10kbit`, `1000000bit` → bits per second.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let (n, unit) = split_unit(s);
    let scale = match unit.as_str() {
        "bit" | "bps" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => return Err(format!("rate '{s}': use bit, kbit, mbit or gbit")),
    };
    let v = n * scale;
    if !(v.is_finite() && v >= 1000.0) {
        return Err(format!("rate '{s}' is not a rate of at least 1kbit"));
    }
    Ok(v as u64)
}

/// `30ms`, `0.2ms`, `1s`, `500us` → a duration.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = split_unit(s);
    let secs = match unit.as_str() {
        "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        _ => return Err(format!("duration '{s}': use s, ms or us")),
    };
    if !(secs.is_finite() && (0.0..=10.0).contains(&secs)) {
        return Err(format!("duration '{s}' is not between 0 and 10 s"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `4MB`, `256KB`, `1000B` → bytes (decimal units, as tc uses them).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let (n, unit) = split_unit(s);
    let scale = match unit.as_str() {
        "b" | "" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        _ => return Err(format!("size '{s}': use B, KB, MB or GB")),
    };
    let v = n * scale;
    if !(v.is_finite() && v >= 1500.0) {
        return Err(format!("size '{s}' is not at least 1500 bytes"));
    }
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAN: &str = r#"
name = "wan"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
a = "a"
b = "b"
rate = "1Gbit"
delay = "30ms"
"#;

    #[test]
    fn sparse_first_holds_on_a_hosts_uplink_and_not_on_the_routers_port() {
        let text = r#"
name = "star"
[[host]]
name = "r"
router = true
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
a = "a"
b = "r"
rate = "100Mbit"
sparse_first = true
[[link]]
a = "b"
b = "r"
rate = "100Mbit"
"#;
        let lab = Topology::parse(text).unwrap().check().unwrap();
        assert!(lab.links[&("a".to_string(), "r".to_string())].sparse_first);
        assert!(!lab.links[&("r".to_string(), "a".to_string())].sparse_first);
        let wan = Topology::parse(WAN).unwrap().check().unwrap();
        assert!(
            wan.links.values().all(|p| !p.sparse_first),
            "off unless asked"
        );
    }

    #[test]
    fn a_point_to_point_lab_gets_addresses_and_a_bdp_sized_queue() {
        let lab = Topology::parse(WAN).unwrap().check().unwrap();
        assert_eq!(lab.hosts[0].addr, Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(lab.hosts[1].addr, Ipv4Addr::new(10, 77, 0, 2));
        assert_eq!(lab.hosts[1].netns, "fnl-wan-b");
        let p = lab.path("a", "b");
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].rate_bps, Some(1_000_000_000));
        assert_eq!(p[0].delay, Duration::from_millis(30));
        // 1 Gbit/s × 60 ms round trip = 7.5 MB.
        assert_eq!(p[0].queue_bytes, 7_500_000);
    }

    #[test]
    fn hosts_without_a_direct_link_go_through_the_router() {
        let t = r#"
name = "star"
[[host]]
name = "r"
router = true
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
a = "a"
b = "r"
delay = "1ms"
[[link]]
a = "b"
b = "r"
delay = "2ms"
"#;
        let lab = Topology::parse(t).unwrap().check().unwrap();
        assert_eq!(lab.hosts.len(), 2, "the router is no namespace");
        let p = lab.path("a", "b");
        let total: Duration = p.iter().map(|l| l.delay).sum();
        assert_eq!(total, Duration::from_millis(3));
    }

    #[test]
    fn unknown_hosts_bad_units_and_unreachable_hosts_are_refused() {
        let unknown = WAN.replace("b = \"b\"", "b = \"c\"");
        assert!(Topology::parse(&unknown).unwrap().check().is_err());
        let unit = WAN.replace("30ms", "30 parsecs");
        assert!(Topology::parse(&unit).unwrap().check().is_err());
        let island = format!("{WAN}\n[[host]]\nname = \"c\"\n");
        let e = Topology::parse(&island).unwrap().check().unwrap_err();
        assert!(e.to_string().contains("no path"), "{e}");
        assert!(Topology::parse("name = 3").is_err());
    }

    #[test]
    fn workers_behind_a_head_node_reach_only_their_cluster() {
        let t = r#"
name = "cluster"
[[host]]
name = "r"
router = true
[[host]]
name = "client"
[[host]]
name = "head"
[[host]]
name = "w1"
behind = "head"
[[host]]
name = "w2"
behind = "head"
[[link]]
a = "client"
b = "r"
[[link]]
a = "head"
b = "r"
[[link]]
a = "w1"
b = "head"
[[link]]
a = "w2"
b = "head"
"#;
        let lab = Topology::parse(t).unwrap().check().unwrap();
        let h = |n: &str| lab.host(n).unwrap();
        assert!(lab.reachable(h("client"), h("head")));
        assert!(lab.reachable(h("head"), h("w1")));
        assert!(lab.reachable(h("w1"), h("w2")));
        assert!(!lab.reachable(h("client"), h("w1")));
        assert!(!lab.reachable(h("w2"), h("client")));
        let bad = t.replace(
            "behind = \"head\"\n[[host]]\nname = \"w2\"",
            "behind = \"nowhere\"\n[[host]]\nname = \"w2\"",
        );
        assert!(Topology::parse(&bad).unwrap().check().is_err());
    }

    #[test]
    fn units_parse_as_tc_writes_them() {
        assert_eq!(parse_rate("400Mbit").unwrap(), 400_000_000);
        assert_eq!(parse_duration("0.2ms").unwrap(), Duration::from_micros(200));
        assert_eq!(parse_bytes("4MB").unwrap(), 4_000_000);
        assert!(parse_rate("fast").is_err());
        assert!(parse_duration("-1ms").is_err());
    }
}
