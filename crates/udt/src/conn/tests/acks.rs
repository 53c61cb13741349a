//! What a receiver's full ACK carries.

use super::*;

#[test]
fn a_full_ack_carries_libudts_arrival_figure_and_ferrys_count_after_it() {
    let t0 = Instant::now();
    let mut r = receiver::Receiver::new(t0, 1 << 16);
    for i in 0..500u64 {
        let at = t0 + Duration::from_micros(100 * i);
        r.arrivals.arrived(at, i as u32);
        r.insert(at, i, &[7; 8]);
    }
    let (_, ack) = r
        .full_ack(t0 + Duration::from_millis(50), 100_000, 10_000)
        .expect("a full ACK is owed");
    let info = ack.full.expect("full");
    assert_eq!(info.receive_rate, Some(10_000));
    assert_eq!(info.counted_rate, Some(10_000));
    // Seven words after the header: libudt reads the first six.
    let mut buf = [0u8; 64];
    let n = crate::packet::write_control(&mut buf, 0, 0, &crate::packet::Control::Ack(ack));
    assert_eq!(n, crate::packet::HEADER + 28);
}
