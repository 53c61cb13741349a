use proptest::prelude::*;

use super::*;

fn set(ranges: &[(u64, u64)]) -> RangeSet {
    let mut s = RangeSet::new();
    for &(a, b) in ranges {
        s.insert(a, b);
    }
    s
}

fn ranges(s: &RangeSet) -> Vec<(u64, u64)> {
    s.iter().collect()
}

#[test]
fn adjacent_ranges_merge() {
    assert_eq!(ranges(&set(&[(0, 5), (5, 9)])), vec![(0, 9)]);
    assert_eq!(ranges(&set(&[(5, 9), (0, 5)])), vec![(0, 9)]);
    assert_eq!(ranges(&set(&[(0, 4), (5, 9)])), vec![(0, 4), (5, 9)]);
}

#[test]
fn overlapping_ranges_merge_and_bridge_gaps() {
    let s = set(&[(0, 2), (4, 6), (8, 10), (1, 9)]);
    assert_eq!(ranges(&s), vec![(0, 10)]);
    assert_eq!(s.total(), 10);
}

#[test]
fn empty_ranges_are_ignored() {
    assert!(set(&[(5, 5), (9, 3)]).is_empty());
    assert!(RangeSet::from_range(7, 7).is_empty());
    assert_eq!(RangeSet::parse("5-5,1-2"), Ok(RangeSet::from_range(1, 2)));
}

#[test]
fn subtract_cuts_holes_and_ends() {
    let mut s = set(&[(0, 10), (20, 30)]);
    s.subtract(&set(&[(2, 4), (8, 22), (29, 40)]));
    assert_eq!(ranges(&s), vec![(0, 2), (4, 8), (22, 29)]);
}

#[test]
fn complement_within_lists_the_missing_bytes() {
    let s = set(&[(0, 10), (20, 30)]);
    assert_eq!(
        ranges(&s.complement_within(0, 40)),
        vec![(10, 20), (30, 40)]
    );
    assert_eq!(ranges(&s.complement_within(5, 25)), vec![(10, 20)]);
    assert!(s.complement_within(0, 10).is_empty());
}

#[test]
fn contains_range_needs_every_byte() {
    let s = set(&[(0, 10), (20, 30)]);
    assert!(s.contains_range(0, 10));
    assert!(s.contains_range(21, 29));
    assert!(!s.contains_range(5, 21));
    assert!(!s.contains_range(10, 11));
    assert!(s.contains_range(15, 15), "empty range");
}

#[test]
fn parse_reads_the_wire_form_with_blanks() {
    let s = RangeSet::parse(" 20-30 , 0-10 ").expect("valid");
    assert_eq!(ranges(&s), vec![(0, 10), (20, 30)]);
    assert_eq!(s.to_string(), "0-10,20-30");
    assert_eq!(RangeSet::parse(""), Ok(RangeSet::new()));
    assert_eq!(RangeSet::new().to_string(), "");
}

#[test]
fn parse_refuses_bad_lists() {
    assert_eq!(RangeSet::parse("0-10,"), Err(RangeError::Malformed));
    assert_eq!(RangeSet::parse("0-"), Err(RangeError::Malformed));
    assert_eq!(RangeSet::parse("a-b"), Err(RangeError::Malformed));
    assert_eq!(RangeSet::parse("+1-5"), Err(RangeError::Malformed));
    assert_eq!(RangeSet::parse("1-2-3"), Err(RangeError::Malformed));
    assert_eq!(RangeSet::parse("10-5"), Err(RangeError::Reversed));
    assert_eq!(
        RangeSet::parse("0-99999999999999999999"),
        Err(RangeError::Malformed)
    );
}

#[test]
fn parse_is_bounded() {
    let at_limit: Vec<String> = (0..MAX_PARSED_RANGES as u64)
        .map(|i| format!("{}-{}", i * 2, i * 2 + 1))
        .collect();
    assert_eq!(
        RangeSet::parse(&at_limit.join(",")).map(|s| s.len()),
        Ok(MAX_PARSED_RANGES)
    );
    let over = format!("{},0-1", at_limit.join(","));
    assert_eq!(RangeSet::parse(&over), Err(RangeError::TooMany));
}

#[test]
fn shifts_saturate_and_drop_what_vanishes() {
    let s = set(&[(0, 5), (10, 20)]);
    assert_eq!(ranges(&s.shifted_down(7)), vec![(3, 13)]);
    assert_eq!(ranges(&s.shifted_down(100)), vec![]);
    assert_eq!(ranges(&s.shifted_up(5)), vec![(5, 10), (15, 25)]);
    let near_max = set(&[(u64::MAX - 10, u64::MAX)]);
    assert_eq!(
        ranges(&near_max.shifted_up(5)),
        vec![(u64::MAX - 5, u64::MAX)]
    );
}

#[test]
fn deserialize_reads_the_wire_form() {
    // No serde format crate is a dependency, so read through serde's own string deserializer.
    use serde::de::value::{Error, StrDeserializer};
    use serde::de::IntoDeserializer;
    let s = set(&[(0, 10), (20, 30)]);
    let de: StrDeserializer<'_, Error> = "20-30,0-10".into_deserializer();
    let back = <RangeSet as serde::Deserialize>::deserialize(de).expect("valid");
    assert_eq!(back, s);
    let bad: StrDeserializer<'_, Error> = "9-1".into_deserializer();
    assert!(<RangeSet as serde::Deserialize>::deserialize(bad).is_err());
}

/// Operations on a set, mirrored on a bitmap of 64 bytes.
#[derive(Debug, Clone)]
enum Op {
    Insert(u64, u64),
    Merge(Vec<(u64, u64)>),
    Subtract(Vec<(u64, u64)>),
}

fn small_range() -> impl Strategy<Value = (u64, u64)> {
    (0u64..64, 0u64..64)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        small_range().prop_map(|(a, b)| Op::Insert(a, b)),
        proptest::collection::vec(small_range(), 0..8).prop_map(Op::Merge),
        proptest::collection::vec(small_range(), 0..4).prop_map(Op::Subtract),
    ]
}

fn bits(ranges: &[(u64, u64)]) -> u64 {
    ranges
        .iter()
        .filter(|(a, b)| a < b)
        .fold(0, |acc, &(a, b)| acc | mask(a, b))
}

fn mask(a: u64, b: u64) -> u64 {
    (a..b).fold(0u64, |acc, i| acc | 1 << i)
}

fn set_bits(s: &RangeSet) -> u64 {
    s.iter().fold(0, |acc, (a, b)| acc | mask(a, b))
}

proptest! {
    #[test]
    fn operations_agree_with_a_bitmap(ops in proptest::collection::vec(op(), 0..20)) {
        let mut s = RangeSet::new();
        let mut model = 0u64;
        for op in ops {
            match op {
                Op::Insert(a, b) => {
                    s.insert(a, b);
                    model |= bits(&[(a, b)]);
                }
                Op::Merge(list) => {
                    let mut other = RangeSet::new();
                    for &(a, b) in &list {
                        other.insert(a, b);
                    }
                    s.merge(&other);
                    model |= bits(&list);
                }
                Op::Subtract(list) => {
                    let mut other = RangeSet::new();
                    for &(a, b) in &list {
                        other.insert(a, b);
                    }
                    s.subtract(&other);
                    model &= !bits(&list);
                }
            }
            prop_assert_eq!(set_bits(&s), model);
            prop_assert_eq!(s.total(), u64::from(model.count_ones()));
            // Sorted, disjoint, coalesced: a gap of at least one byte between ranges.
            let v: Vec<_> = s.iter().collect();
            prop_assert!(v.iter().all(|(a, b)| a < b));
            prop_assert!(v.windows(2).all(|w| w[0].1 < w[1].0));
        }
        let (lo, hi) = (5u64, 50u64);
        let expected = mask(lo, hi) & !model;
        prop_assert_eq!(set_bits(&s.complement_within(lo, hi)), expected);
        for a in 0..64u64 {
            for b in a..=64u64.min(a + 8) {
                let want = b == a || mask(a, b) & model == mask(a, b);
                prop_assert_eq!(s.contains_range(a, b), want);
            }
        }
    }

    #[test]
    fn parse_of_display_round_trips(pairs in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..20)) {
        let mut s = RangeSet::new();
        for (a, b) in pairs {
            s.insert(a.min(b), a.max(b));
        }
        prop_assert_eq!(RangeSet::parse(&s.to_string()), Ok(s));
    }

    #[test]
    fn shifting_down_then_up_keeps_ranges_above_the_delta(
        pairs in proptest::collection::vec((0u64..1000, 0u64..1000), 0..10),
        delta in 0u64..500,
    ) {
        let mut s = RangeSet::new();
        for (a, b) in pairs {
            s.insert(a.min(b), a.max(b));
        }
        let mut expected = s.clone();
        expected.subtract(&RangeSet::from_range(0, delta));
        prop_assert_eq!(s.shifted_down(delta).shifted_up(delta), expected);
    }

    #[test]
    fn intersect_keeps_exactly_the_bytes_in_both(
        a in proptest::collection::vec((0u64..64, 0u64..64), 0..8),
        b in proptest::collection::vec((0u64..64, 0u64..64), 0..8),
    ) {
        let set = |pairs: &[(u64, u64)]| {
            let mut s = RangeSet::new();
            for &(x, y) in pairs {
                s.insert(x.min(y), x.max(y));
            }
            s
        };
        let (sa, sb) = (set(&a), set(&b));
        let both = sa.intersect(&sb);
        prop_assert_eq!(&both, &sb.intersect(&sa));
        for byte in 0..64u64 {
            let want = sa.contains_range(byte, byte + 1) && sb.contains_range(byte, byte + 1);
            prop_assert_eq!(both.contains_range(byte, byte + 1), want);
        }
    }
}
