//! What the kernel knows of a TCP connection's path (`TCP_INFO`): round trip, losses,
//! delivery rate, congestion control. Read at the end of a transfer from each data
//! connection, summed over them, and reported (transfer log, client tuning).
//!
//! Neither socket2 nor rustix reads `TCP_INFO`, and libc's `tcp_info` stops at
//! `tcpi_total_retrans`, so the later fields (Linux 4.1 to 5.4) are laid out here after it,
//! as `include/uapi/linux/tcp.h` has them. The kernel copies what both sides know and says
//! how much; fields past that stay zero and are reported as unknown.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd};

/// `struct tcp_info` as Linux 5.4+ has it, up to `tcpi_snd_wnd`.
#[repr(C)]
#[derive(Default)]
struct RawTcpInfo {
    head: Head,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
}

/// The fields libc also has (the 104 bytes every kernel since 2.6 fills).
#[repr(C)]
#[derive(Default)]
struct Head {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    app_limited: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
}

/// One connection's path as its kernel saw it, or several summed (see [`TcpStats::merge`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpStats {
    /// Connections summed.
    pub connections: u32,
    /// Congestion control (the first connection's; they share a setting).
    pub congestion: String,
    /// Smoothed round trip, µs (the largest of the connections').
    pub rtt_us: u32,
    /// Smallest round trip seen, µs (the smallest over the connections; 0: unknown).
    pub min_rtt_us: u32,
    /// Payload bytes sent, retransmissions included (0 on a receiving side).
    pub bytes_sent: u64,
    /// Payload bytes sent again.
    pub bytes_retrans: u64,
    /// Payload bytes received.
    pub bytes_received: u64,
    /// Packets that arrived out of order (a receiver's sign of loss; Linux 5.4+).
    pub out_of_order: u64,
    /// Sum of the connections' last delivery-rate estimates, bytes/s (a sender's).
    pub delivery_rate: u64,
}

impl TcpStats {
    /// Reads `TCP_INFO` and `TCP_CONGESTION` of a TCP socket.
    pub(crate) fn of<S: AsFd + AsRawFd>(socket: &S) -> std::io::Result<TcpStats> {
        let fd = socket.as_raw_fd();
        let mut raw = RawTcpInfo::default();
        let mut len = std::mem::size_of::<RawTcpInfo>() as libc::socklen_t;
        // SAFETY: `raw` is a plain-old-data struct of `len` bytes that outlives the call; the
        // kernel writes at most `len` bytes into it and stores the count in `len`.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                (&mut raw as *mut RawTcpInfo).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let congestion =
            crate::Congestion::of_socket(socket2::SockRef::from(socket)).unwrap_or_default();
        // Fields the kernel did not fill stay zero; only the retransmitted bytes have an
        // older stand-in (segments times MSS).
        let filled = |field_end: usize| len as usize >= field_end;
        let bytes_retrans_end = std::mem::offset_of!(RawTcpInfo, bytes_retrans) + 8;
        Ok(TcpStats {
            connections: 1,
            congestion,
            rtt_us: raw.head.rtt,
            min_rtt_us: raw.min_rtt,
            bytes_sent: raw.bytes_sent,
            bytes_retrans: if filled(bytes_retrans_end) {
                raw.bytes_retrans
            } else {
                u64::from(raw.head.total_retrans) * u64::from(raw.head.snd_mss)
            },
            bytes_received: raw.bytes_received,
            out_of_order: u64::from(raw.rcv_ooopack),
            delivery_rate: raw.delivery_rate,
        })
    }

    /// What moved between `before` and these figures (the same connection, read twice): the
    /// counts are differences, round trips and rate the latest.
    pub fn since(&self, before: &TcpStats) -> TcpStats {
        TcpStats {
            bytes_sent: self.bytes_sent.saturating_sub(before.bytes_sent),
            bytes_retrans: self.bytes_retrans.saturating_sub(before.bytes_retrans),
            bytes_received: self.bytes_received.saturating_sub(before.bytes_received),
            out_of_order: self.out_of_order.saturating_sub(before.out_of_order),
            ..self.clone()
        }
    }

    /// Adds what a later transfer's connections saw to an earlier one's (files one after
    /// another): counts add up, connections are the most any had, round trips and rate the
    /// later ones.
    pub fn then(&mut self, later: &TcpStats) {
        if self.connections == 0 {
            *self = later.clone();
            return;
        }
        *self = TcpStats {
            connections: self.connections.max(later.connections),
            min_rtt_us: least_known(self.min_rtt_us, later.min_rtt_us),
            bytes_sent: self.bytes_sent + later.bytes_sent,
            bytes_retrans: self.bytes_retrans + later.bytes_retrans,
            bytes_received: self.bytes_received + later.bytes_received,
            out_of_order: self.out_of_order + later.out_of_order,
            ..later.clone()
        };
    }

    /// Adds another connection's figures.
    pub fn merge(&mut self, other: &TcpStats) {
        if self.connections == 0 {
            *self = other.clone();
            return;
        }
        self.connections += other.connections;
        self.rtt_us = self.rtt_us.max(other.rtt_us);
        self.min_rtt_us = least_known(self.min_rtt_us, other.min_rtt_us);
        self.bytes_sent += other.bytes_sent;
        self.bytes_retrans += other.bytes_retrans;
        self.bytes_received += other.bytes_received;
        self.out_of_order += other.out_of_order;
        self.delivery_rate += other.delivery_rate;
    }

    /// Summed figures of these connections since they last reported (`None` when none is
    /// TCP).
    pub fn of_all<'a>(
        conns: impl IntoIterator<Item = &'a mut crate::DataConn>,
    ) -> Option<TcpStats> {
        let mut sum = TcpStats::default();
        for s in conns.into_iter().filter_map(|c| c.tcp_stats()) {
            sum.merge(&s);
        }
        (sum.connections > 0).then_some(sum)
    }

    /// The figures as `SITE TCPINFO` answers them: `key=value;` facts, in the field order.
    pub fn to_facts(&self) -> String {
        format!(
            "connections={};congestion={};rtt_us={};min_rtt_us={};bytes_sent={};\
             bytes_retrans={};bytes_received={};out_of_order={};delivery_rate={};",
            self.connections,
            self.congestion,
            self.rtt_us,
            self.min_rtt_us,
            self.bytes_sent,
            self.bytes_retrans,
            self.bytes_received,
            self.out_of_order,
            self.delivery_rate
        )
    }

    /// Reads [`TcpStats::to_facts`]' form back; unknown keys are skipped (a later server may
    /// say more), a known key with a bad value is an error.
    pub fn from_facts(text: &str) -> Result<TcpStats, String> {
        let mut t = TcpStats::default();
        for fact in text.trim().split(';').filter(|f| !f.is_empty()) {
            let (k, v) = fact
                .split_once('=')
                .ok_or_else(|| format!("'{fact}' is not key=value"))?;
            let bad = |_| format!("{k}: '{v}' is not a number");
            match k.trim() {
                "connections" => t.connections = v.parse().map_err(bad)?,
                "congestion" => t.congestion = v.to_string(),
                "rtt_us" => t.rtt_us = v.parse().map_err(bad)?,
                "min_rtt_us" => t.min_rtt_us = v.parse().map_err(bad)?,
                "bytes_sent" => t.bytes_sent = v.parse().map_err(bad)?,
                "bytes_retrans" => t.bytes_retrans = v.parse().map_err(bad)?,
                "bytes_received" => t.bytes_received = v.parse().map_err(bad)?,
                "out_of_order" => t.out_of_order = v.parse().map_err(bad)?,
                "delivery_rate" => t.delivery_rate = v.parse().map_err(bad)?,
                _ => {}
            }
        }
        Ok(t)
    }

    /// The share of sent bytes sent again (0 when nothing was sent).
    pub fn retransmit_ratio(&self) -> f64 {
        if self.bytes_sent == 0 {
            0.0
        } else {
            self.bytes_retrans as f64 / self.bytes_sent as f64
        }
    }
}

/// The smaller of two round trips where 0 means unknown.
fn least_known(a: u32, b: u32) -> u32 {
    match (a, b) {
        (0, b) => b,
        (a, 0) => a,
        (a, b) => a.min(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_matches_linux() {
        // Offsets from include/uapi/linux/tcp.h (x86-64 and aarch64 alike).
        assert_eq!(std::mem::size_of::<Head>(), 104);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, min_rtt), 148);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, delivery_rate), 160);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, bytes_sent), 200);
        assert_eq!(std::mem::offset_of!(RawTcpInfo, rcv_ooopack), 224);
        assert_eq!(std::mem::size_of::<RawTcpInfo>(), 232);
    }

    #[test]
    fn facts_go_there_and_back_and_bad_values_are_named() {
        let t = TcpStats {
            connections: 4,
            congestion: "bbr".into(),
            rtt_us: 75_000,
            min_rtt_us: 74_100,
            bytes_sent: 1 << 30,
            bytes_retrans: 1 << 20,
            bytes_received: 0,
            out_of_order: 0,
            delivery_rate: 110_000_000,
        };
        assert_eq!(TcpStats::from_facts(&t.to_facts()).unwrap(), t);
        assert_eq!(
            TcpStats::from_facts("connections=2;future_key=x;")
                .unwrap()
                .connections,
            2
        );
        assert!(TcpStats::from_facts("rtt_us=soon;")
            .unwrap_err()
            .contains("rtt_us"));
        assert!(TcpStats::from_facts("nonsense").is_err());
    }

    #[tokio::test]
    async fn a_loopback_connection_reports_what_it_sent_and_its_congestion_control() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let tuning = crate::SocketTuning {
            congestion: Some(crate::Congestion::new("reno").unwrap()),
            ..Default::default()
        };
        let listener = crate::bind_listener("127.0.0.1".parse().unwrap(), None, tuning).unwrap();
        let addr = listener.local_addr().unwrap();
        let (sent, received) = tokio::join!(
            async {
                let mut c = crate::connect(addr, tuning).await.unwrap();
                c.write_all(&[7u8; 1 << 20]).await.unwrap();
                c.flush().await.unwrap();
                let mut ack = [0u8; 1];
                c.read_exact(&mut ack).await.unwrap();
                c.tcp_stats().unwrap()
            },
            async {
                let mut c = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 1 << 20];
                c.read_exact(&mut buf).await.unwrap();
                c.write_all(&[1]).await.unwrap();
                c.tcp_stats().unwrap()
            }
        );
        assert_eq!(sent.congestion, "reno");
        assert_eq!(
            received.congestion, "reno",
            "an accepted connection has the listener's"
        );
        assert!(sent.bytes_sent >= 1 << 20, "{sent:?}");
        assert!(received.bytes_received >= 1 << 20, "{received:?}");
        assert!(sent.rtt_us > 0, "{sent:?}");
        let mut both = sent.clone();
        both.merge(&received);
        assert_eq!(both.connections, 2);
        assert_eq!(both.bytes_sent, sent.bytes_sent + received.bytes_sent);
        let mut files = sent.clone();
        files.then(&sent);
        assert_eq!(
            (files.connections, files.bytes_sent),
            (1, 2 * sent.bytes_sent)
        );
    }

    #[tokio::test]
    async fn a_reused_connection_reports_only_what_moved_since_it_last_did() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener =
            crate::bind_listener("127.0.0.1".parse().unwrap(), None, Default::default()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (mut out, mut inn) = tokio::join!(
            async { crate::connect(addr, Default::default()).await.unwrap() },
            async { listener.accept().await.unwrap() }
        );
        let mut buf = vec![0u8; 1 << 20];
        for _ in 0..2 {
            out.write_all(&buf).await.unwrap();
            inn.read_exact(&mut buf).await.unwrap();
            let t = inn.tcp_stats().unwrap();
            assert!(
                (1 << 20..2 << 20).contains(&t.bytes_received),
                "each transfer counts its own bytes: {t:?}"
            );
        }
    }
}
