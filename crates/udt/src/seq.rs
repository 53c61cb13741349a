//! UDT's 31-bit sequence numbers, and the 64-bit counts the core keeps instead.
//!
//! On the wire a packet carries its sequence number modulo 2^31; inside, every packet is
//! numbered from the connection's initial sequence number on, so comparisons never wrap.

/// The largest sequence number; the next is 0.
pub const MAX_SEQ: u32 = 0x7FFF_FFFF;
/// Half the space: two numbers further apart than this compare the other way round.
const THRESHOLD: u32 = 0x3FFF_FFFF;

/// The signed distance from `from` to `to` on the 31-bit circle (positive: `to` is later).
pub fn offset(from: u32, to: u32) -> i64 {
    let (a, b) = (i64::from(from & MAX_SEQ), i64::from(to & MAX_SEQ));
    let d = b - a;
    if d.unsigned_abs() < u64::from(THRESHOLD) {
        d
    } else if a < b {
        d - i64::from(MAX_SEQ) - 1
    } else {
        d + i64::from(MAX_SEQ) + 1
    }
}

/// The wire number of the packet `count` packets after `isn`.
pub fn wire(isn: u32, count: u64) -> u32 {
    ((u64::from(isn) + count) & u64::from(MAX_SEQ)) as u32
}

/// The count (packets after `isn`) of wire number `seq`, taken as the one nearest `near`.
pub fn unwrap(isn: u32, near: u64, seq: u32) -> Option<u64> {
    let counted = i64::try_from(near).ok()? + offset(wire(isn, near), seq);
    u64::try_from(counted).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn numbers_wrap_at_two_to_the_thirty_one() {
        assert_eq!(wire(MAX_SEQ, 1), 0);
        assert_eq!(offset(MAX_SEQ, 0), 1);
        assert_eq!(offset(0, MAX_SEQ), -1);
        assert_eq!(offset(5, 3), -2);
        assert_eq!(unwrap(MAX_SEQ - 1, 0, 1), Some(3));
        assert_eq!(unwrap(10, 0, 9), None);
    }

    proptest! {
        #[test]
        fn a_count_survives_the_wire_near_its_neighbours(
            isn in 0..=MAX_SEQ, count in 0u64..1 << 40, drift in -(1i64 << 29)..(1i64 << 29),
        ) {
            let near = (count as i64 + drift).max(0) as u64;
            let seq = wire(isn, count);
            prop_assert_eq!(unwrap(isn, near, seq), Some(count));
        }
    }
}
