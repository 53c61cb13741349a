//! Socket options applied to data connections before they connect or listen.

use std::io;

use tokio::net::TcpSocket;

/// TCP buffer sizes and options for data connections; `None` leaves the kernel's choice
/// (buffer autotuning, the system's congestion control).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SocketTuning {
    /// `SO_SNDBUF` in bytes.
    pub send_buffer: Option<u32>,
    /// `SO_RCVBUF` in bytes.
    pub recv_buffer: Option<u32>,
    /// `TCP_CONGESTION`: the congestion control of the socket (what matters is the sending
    /// side's; Linux gives an accepted connection its listener's).
    pub congestion: Option<Congestion>,
}

impl SocketTuning {
    /// Applies the buffer sizes and congestion control; must run before `connect`/`listen`
    /// so window scaling follows.
    pub fn apply(&self, socket: &TcpSocket) -> io::Result<()> {
        if let Some(n) = self.send_buffer {
            socket.set_send_buffer_size(n)?;
        }
        if let Some(n) = self.recv_buffer {
            socket.set_recv_buffer_size(n)?;
        }
        if let Some(cc) = &self.congestion {
            cc.set_on(socket2::SockRef::from(socket))?;
        }
        Ok(())
    }
}

/// Longest congestion-control name Linux takes (`TCP_CA_NAME_MAX` less the NUL).
const NAME_MAX: usize = 15;

/// A TCP congestion control algorithm by its kernel name (`cubic`, `bbr`, `reno`), held
/// inline so that [`SocketTuning`] stays `Copy`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Congestion {
    len: u8,
    name: [u8; NAME_MAX],
}

impl Congestion {
    /// The name, if it can be one (1 to 15 ASCII letters, digits, `_` or `-`); whether this
    /// kernel has it is [`Congestion::check`]'s question.
    pub fn new(name: &str) -> Result<Congestion, String> {
        let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
        if name.is_empty() || name.len() > NAME_MAX || !name.bytes().all(ok) {
            return Err(format!(
                "'{name}' is not a congestion control name (1 to {NAME_MAX} letters, digits, \
                 '_' or '-')"
            ));
        }
        let mut buf = [0u8; NAME_MAX];
        buf[..name.len()].copy_from_slice(name.as_bytes());
        Ok(Congestion {
            len: name.len() as u8,
            name: buf,
        })
    }

    /// The kernel's name.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever stored (see `new`).
        std::str::from_utf8(&self.name[..usize::from(self.len)]).unwrap_or("")
    }

    /// The congestion control a socket has, by name.
    pub(crate) fn of_socket(socket: socket2::SockRef<'_>) -> Option<String> {
        socket.tcp_congestion().ok().map(|n| {
            String::from_utf8_lossy(&n)
                .trim_end_matches('\0')
                .to_string()
        })
    }

    fn set_on(&self, socket: socket2::SockRef<'_>) -> io::Result<()> {
        socket
            .set_tcp_congestion(self.as_str().as_bytes())
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot set TCP congestion control {}: {e} ({})",
                        self.as_str(),
                        offered_here()
                    ),
                )
            })
    }

    /// Whether this process may give a socket this congestion control: tried on a socket
    /// that is never connected, so the answer is the kernel's (an unprivileged process gets
    /// only `net.ipv4.tcp_allowed_congestion_control`; one with CAP_NET_ADMIN any the kernel
    /// has or can load).
    pub fn check(&self) -> Result<(), String> {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .map_err(|e| format!("cannot open a socket to try {}: {e}", self.as_str()))?;
        self.set_on(socket2::SockRef::from(&socket))
            .map_err(|e| e.to_string())
    }

    /// The congestion controls every process may choose here, from
    /// `/proc/sys/net/ipv4/tcp_allowed_congestion_control` (empty where it cannot be read).
    pub fn allowed() -> Vec<Congestion> {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|n| Congestion::new(n).ok())
            .collect()
    }

    /// The congestion controls this process can give its sockets: the kernel's available
    /// ones (`net.ipv4.tcp_available_congestion_control`) that a socket here accepts.
    pub fn offered_here() -> Vec<Congestion> {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|n| Congestion::new(n).ok())
            .filter(|c| c.check().is_ok())
            .collect()
    }

    /// The system's default (`net.ipv4.tcp_congestion_control`), if it can be read.
    pub fn system_default() -> Option<Congestion> {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
            .ok()
            .and_then(|s| Congestion::new(s.trim()).ok())
    }
}

/// The most this host's TCP autotuning lets one socket buffer: the third value of
/// `net.ipv4.tcp_rmem` (`receiving`) or `tcp_wmem`, in this process's network namespace;
/// `None` where it cannot be read.
pub fn autotune_max(receiving: bool) -> Option<u64> {
    let key = if receiving { "tcp_rmem" } else { "tcp_wmem" };
    std::fs::read_to_string(format!("/proc/sys/net/ipv4/{key}"))
        .ok()?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// What `allowed` says, for error messages.
fn offered_here() -> String {
    let allowed: Vec<String> = Congestion::allowed()
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    if allowed.is_empty() {
        "net.ipv4.tcp_allowed_congestion_control cannot be read".into()
    } else {
        format!(
            "net.ipv4.tcp_allowed_congestion_control: {}",
            allowed.join(" ")
        )
    }
}

impl std::fmt::Debug for Congestion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl std::fmt::Display for Congestion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Congestion {
    type Err = String;
    fn from_str(s: &str) -> Result<Congestion, String> {
        Congestion::new(s)
    }
}

impl serde::Serialize for Congestion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Congestion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Congestion, D::Error> {
        let s = String::deserialize(d)?;
        Congestion::new(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_for_shape_and_kept_inline() {
        assert_eq!(Congestion::new("bbr").unwrap().as_str(), "bbr");
        assert_eq!(Congestion::new("a-b_c9").unwrap().to_string(), "a-b_c9");
        for bad in ["", "cubic ", "x".repeat(16).as_str(), "bbr;rm", "bbr,cubic"] {
            assert!(Congestion::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reno_is_always_available_and_a_made_up_name_is_refused_with_the_list() {
        // Linux always has reno (built in, and always allowed).
        Congestion::new("reno").unwrap().check().unwrap();
        let err = Congestion::new("nosuchcc").unwrap().check().unwrap_err();
        assert!(
            err.contains("nosuchcc") && err.contains("tcp_allowed_congestion_control"),
            "{err}"
        );
    }
}
