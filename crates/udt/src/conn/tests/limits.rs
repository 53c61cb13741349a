//! What a peer can make a connection hold: payloads no longer than the negotiated MSS, a
//! flow window held to [`MAX_RECEIVE_BUFFER`], memory that follows what arrived.

use super::*;
use crate::packet::SOLO_MESSAGE;

/// Feeds `conn` (from [`accepted`]) a data packet numbered `ahead` after the peer's ISN.
fn data_at(conn: &mut Connection, now: Instant, ahead: u32, payload: &[u8]) {
    conn.handle(
        now,
        &Packet::Data {
            seq: seq::wire(ACCEPTED_ISN, u64::from(ahead)),
            message: SOLO_MESSAGE,
            timestamp: 0,
            dst: 9,
            payload,
        },
    );
}

/// Heap bytes a stored packet may cost at most, generously: its share of a block of slots.
const PER_PACKET: usize = 16 << 10;
/// Heap bytes one packet far ahead may cost: a block of slots and the index of blocks up to
/// it (a slot per packet up to it took megabytes).
const FAR_PACKET: usize = 64 << 10;

#[test]
fn a_payload_longer_than_the_negotiated_mss_is_dropped_and_counted() {
    let t0 = Instant::now();
    let mut conn = accepted(t0, true);
    // Both sides said MSS 1500: 1 456 bytes of payload at most.
    let big = vec![7u8; 65_000];
    for i in 0..100 {
        data_at(&mut conn, t0, i, &big);
    }
    data_at(&mut conn, t0, 100, &big[..1_457]);
    assert_eq!(conn.stats().oversized, 101);
    assert_eq!(conn.buffered_bytes(), 0);
    assert!(!conn.readable());
    // A full packet is still taken.
    data_at(&mut conn, t0, 0, &big[..1_456]);
    assert_eq!(conn.buffered_bytes(), 1_456);
    assert!(conn.readable());
}

#[test]
fn a_packet_beyond_the_bounded_window_after_a_huge_fc_is_dropped() {
    let t0 = Instant::now();
    let config = Config {
        flight_flag: 1 << 24,
        ..Config::default()
    };
    let mut conn = accepted_with(config, t0, true);
    let offered = conn.response.expect("a response").flight_flag as usize;
    assert!(
        offered * 1_456 <= MAX_RECEIVE_BUFFER,
        "{offered} packets offered"
    );
    data_at(&mut conn, t0, (1 << 24) - 1, &[1; 16]);
    assert_eq!(conn.stats().beyond_window, 1);
    let r = conn.receiver.as_ref().expect("open");
    assert_eq!(r.loss_count(), 0);
    assert_eq!(conn.buffered_bytes(), 0);
    assert!(r.footprint() < FAR_PACKET, "{} bytes", r.footprint());
}

#[test]
fn a_gap_of_any_length_is_one_loss_entry_and_allocates_nothing_up_to_it() {
    let t0 = Instant::now();
    let mut conn = accepted(t0, true);
    data_at(&mut conn, t0, 100_000, &[1; 16]);
    assert_eq!(conn.buffered_bytes(), 16);
    let nak = vec![ACCEPTED_ISN | 0x8000_0000, ACCEPTED_ISN + 99_999];
    assert!(
        conn.control.contains(&Control::Nak(nak)),
        "{:?}",
        conn.control
    );
    let r = conn.receiver.as_ref().expect("open");
    assert_eq!(r.loss_count(), 100_000);
    assert_eq!(r.loss_entries(), 1);
    assert!(r.footprint() < FAR_PACKET, "{} bytes", r.footprint());
    // A packet inside the gap splits it in two.
    data_at(&mut conn, t0, 50_000, &[2; 16]);
    let r = conn.receiver.as_ref().expect("open");
    assert_eq!(r.loss_count(), 99_999);
    assert_eq!(r.loss_entries(), 2);
    assert!(r.footprint() < 2 * FAR_PACKET, "{} bytes", r.footprint());
    assert!(!conn.readable());
}

#[test]
fn tiny_packets_strewn_across_the_window_cost_memory_per_packet_not_per_gap() {
    let t0 = Instant::now();
    let mut conn = accepted(t0, true);
    let packets = 200;
    for i in 1..=packets {
        data_at(&mut conn, t0, i * 600, &[3; 16]);
    }
    let r = conn.receiver.as_ref().expect("open");
    assert_eq!(r.loss_entries(), packets as usize);
    let per = r.footprint() / packets as usize;
    assert!(per < PER_PACKET, "{per} bytes a packet");
}

#[test]
fn the_flow_window_holds_at_most_the_receive_buffer_bound_at_any_mss() {
    // The default is what a legitimate peer meets: unchanged.
    assert_eq!(Config::default().flow_window(), 131_072);
    for mss in [128, 576, 1500, 9000, 65_535] {
        let config = Config {
            mss,
            flight_flag: 1 << 24,
            ..Config::default()
        };
        let window = config.flow_window() as usize;
        assert!(
            window * payload_len(mss) <= MAX_RECEIVE_BUFFER,
            "mss {mss}: {window} packets"
        );
        assert!(window >= 32, "mss {mss}: {window} packets");
    }
}

#[test]
fn a_huge_flight_flag_is_held_to_the_bound_and_still_delivers_every_byte() {
    let d = data(3_000_000);
    let config = Config {
        flight_flag: 1 << 24,
        ..Config::default()
    };
    let out = transfer(&d, Path::clean(), config, 4, Duration::from_secs(60));
    assert!(out.received == d);
}
