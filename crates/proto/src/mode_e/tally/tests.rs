use proptest::prelude::*;

use super::*;

#[test]
fn connection_tally_records_data_and_eod() {
    let mut conn = ConnectionTally::default();
    conn.record_data(0, 10);
    conn.record_data(10, 5);
    conn.record_data(0, 10);
    assert_eq!(conn.ranges, RangeSet::from_range(0, 15));
    assert_eq!(conn.bytes, 25, "duplicates count as received bytes");
    conn.record_eod(Some(4));
    assert_eq!((conn.eods, conn.eof_count), (1, Some(4)));
    assert_eq!(conn.take_ranges(), RangeSet::from_range(0, 15));
    assert!(conn.ranges.is_empty());
}

#[test]
fn transfer_completes_when_announced_eods_arrive() {
    let mut transfer = TransferTally::default();
    let mut plain = ConnectionTally::default();
    plain.record_eod(None);
    transfer.merge(&plain).expect("no conflict");
    assert!(!transfer.is_complete(), "no EOF seen yet");
    let mut last = ConnectionTally::default();
    last.record_eod(Some(3));
    transfer.merge(&last).expect("no conflict");
    assert!(!transfer.is_complete(), "2 of 3 EODs");
    transfer.merge(&plain).expect("no conflict");
    assert!(transfer.is_complete());
    assert!(!transfer.is_overrun());
    transfer.merge(&plain).expect("no conflict");
    assert!(transfer.is_complete());
    assert!(transfer.is_overrun());
}

#[test]
fn conflicting_eof_counts_are_refused_without_merging() {
    let mut transfer = TransferTally::default();
    let mut a = ConnectionTally::default();
    a.record_eod(Some(2));
    transfer.merge(&a).expect("first");
    let mut b = ConnectionTally::default();
    b.record_data(0, 100);
    b.record_eod(Some(3));
    assert_eq!(
        transfer.merge(&b),
        Err(TallyConflict {
            first: 2,
            second: 3
        })
    );
    assert!(transfer.ranges.is_empty());
    assert_eq!(transfer.eods, 1);
}

#[test]
fn no_eof_means_never_complete() {
    let mut transfer = TransferTally::default();
    let mut conn = ConnectionTally::default();
    conn.record_eod(None);
    for _ in 0..5 {
        transfer.merge(&conn).expect("no conflict");
    }
    assert!(!transfer.is_complete());
    assert!(!transfer.is_overrun());
}

proptest! {
    #[test]
    fn random_splits_over_connections_cover_the_file(
        size in 0u64..100_000,
        cuts in proptest::collection::vec(0u64..100_000, 0..50),
        conns in 1usize..8,
        assign in proptest::collection::vec(any::<usize>(), 1..50),
    ) {
        let mut points: Vec<u64> = cuts.into_iter().map(|c| c % (size + 1)).chain([0, size]).collect();
        points.sort_unstable();
        points.dedup();
        let mut tallies = vec![ConnectionTally::default(); conns];
        for (i, w) in points.windows(2).enumerate() {
            tallies[assign[i % assign.len()] % conns].record_data(w[0], w[1] - w[0]);
        }
        for (i, t) in tallies.iter_mut().enumerate() {
            t.record_eod((i == 0).then_some(conns as u64));
        }
        let mut transfer = TransferTally::default();
        for (n, t) in tallies.iter().enumerate().rev() {
            prop_assert!(!transfer.is_complete());
            transfer.merge(t).expect("one EOF");
            prop_assert_eq!(transfer.is_complete(), n == 0);
        }
        prop_assert_eq!(transfer.ranges, RangeSet::from_range(0, size));
        prop_assert_eq!(transfer.bytes, size);
        prop_assert_eq!(transfer.eods, conns as u64);
    }
}
