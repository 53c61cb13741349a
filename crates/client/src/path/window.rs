//! How much one data socket of a path may buffer, which gcp's stream rules judge a path by:
//! the sender's sending limit against the receiver's receiving one, from this host's kernel or
//! a ferry server's FEAT (`TCP-AUTOTUNE-MAX`).

/// The most one socket's autotuning may buffer here: the smaller of the third values of
/// `net.ipv4.tcp_rmem` (receiving) and `tcp_wmem` (sending), as this host's kernel has them.
pub(super) fn autotune_max() -> Option<u64> {
    match (
        ferry_net::autotune_max(true),
        ferry_net::autotune_max(false),
    ) {
        (Some(r), Some(w)) => Some(r.min(w)),
        (r, w) => r.or(w),
    }
}

/// The most one data socket of a path may buffer: the sender's sending limit against the
/// receiver's receiving limit, each from this host's kernel or a ferry server's FEAT
/// (`TCP-AUTOTUNE-MAX`), and where the figure comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Window {
    pub(super) bytes: Option<u64>,
    pub(super) from: String,
}

impl Window {
    /// The window of a path whose sender may buffer `send` and receiver `receive` (`None`:
    /// not known), named `sender` and `receiver`; falls back to this host's limits.
    pub(super) fn of(
        send: Option<u64>,
        receive: Option<u64>,
        sender: &str,
        receiver: &str,
    ) -> Window {
        match (send, receive) {
            (Some(s), Some(r)) => Window {
                bytes: Some(s.min(r)),
                from: format!(
                    "{sender} sends with up to {}, {receiver} receives with up to {} \
                     (net.ipv4.tcp_wmem, tcp_rmem)",
                    crate::human_bytes(s),
                    crate::human_bytes(r)
                ),
            },
            _ => Window {
                bytes: autotune_max(),
                from: format!(
                    "this host's net.ipv4.tcp_rmem, tcp_wmem, standing in for {} (a server \
                     that is not ferry does not say its own)",
                    if send.is_none() { sender } else { receiver }
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paths_window_is_the_senders_sending_limit_against_the_receivers_receiving_one() {
        let w = Window::of(Some(64 << 10), Some(6 << 20), "b:2811", "c:2811");
        assert_eq!(w.bytes, Some(64 << 10));
        assert!(w.from.contains("b:2811 sends with up to"), "{}", w.from);
        // A server that does not say stands in for nothing: this host's limits are used, and
        // the explanation names the server they stand in for.
        let w = Window::of(None, Some(6 << 20), "globus:2811", "c:2811");
        assert_eq!(w.bytes, autotune_max());
        assert!(w.from.contains("standing in for globus:2811"), "{}", w.from);
    }
}
