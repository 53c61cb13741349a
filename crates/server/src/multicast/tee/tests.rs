use super::*;

fn read_all(tee: &Tee, child: usize, chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; chunk];
    loop {
        let n = tee.read(child, &mut buf, out.len() as u64).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn blocks_in_any_order_reach_every_child_and_memory_stays_bounded() {
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let tee = Arc::new(Tee::new(3, 100_000, &RangeSet::new()));
    let readers: Vec<_> = (0..3)
        .map(|c| {
            let tee = Arc::clone(&tee);
            std::thread::spawn(move || read_all(&tee, c, 7_000 + c * 3_000))
        })
        .collect();
    // Two writer "streams", each with rising offsets, interleaved unevenly.
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let tee = Arc::clone(&tee);
            let data = data.clone();
            std::thread::spawn(move || {
                for (i, block) in data.chunks(16_384).enumerate() {
                    if i % 2 == w {
                        tee.write(block, (i * 16_384) as u64).unwrap();
                        assert!(tee.lock().held <= 100_000 + 2 * 16_384);
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    tee.complete();
    for r in readers {
        assert_eq!(r.join().unwrap(), data);
    }
    assert_eq!(tee.lock().held, 0);
}

#[test]
fn pieces_go_out_past_a_missing_block_each_to_one_stream_and_end_after_all() {
    let tee = Arc::new(Tee::new(1, 1 << 20, &RangeSet::new()));
    // Bytes 0..100 are late; what came after them goes out first, adjacent blocks as one.
    tee.write(&[1u8; 100], 100).unwrap();
    tee.write(&[2u8; 100], 200).unwrap();
    let mut buf = [0u8; 150];
    assert_eq!(tee.next_piece(0, &mut buf).unwrap(), Some((100, 150)));
    assert_eq!((buf[99], buf[100]), (1, 2));
    assert_eq!(tee.next_piece(0, &mut buf).unwrap(), Some((250, 50)));
    // Two streams of the child wait; the late block reaches one of them, then the end.
    let streams: Vec<_> = (0..2)
        .map(|_| {
            let tee = Arc::clone(&tee);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 64];
                while let Some((at, n)) = tee.next_piece(0, &mut buf).unwrap() {
                    got.push((at, buf[..n].to_vec()));
                }
                got
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(30));
    tee.write(&[3u8; 100], 0).unwrap();
    tee.write(&[4u8; 10], 300).unwrap();
    tee.complete();
    let mut got: Vec<_> = streams
        .into_iter()
        .flat_map(|s| s.join().unwrap())
        .collect();
    got.sort();
    let mut at = 0u64;
    let mut rest = Vec::new();
    for (offset, bytes) in &got {
        // Disjoint, and nothing missing: 0..100 and 300..310, each byte once.
        if *offset == 300 {
            at = 300;
        }
        assert_eq!(*offset, at);
        at += bytes.len() as u64;
        rest.extend_from_slice(bytes);
    }
    assert_eq!(at, 310);
    assert_eq!(rest, [[3u8; 100].as_slice(), &[4u8; 10]].concat());
    assert_eq!(tee.lock().held, 0);
}

#[test]
fn a_child_that_leaves_holds_nothing_back_and_abort_stops_readers() {
    let tee = Arc::new(Tee::new(2, 1_000, &RangeSet::new()));
    tee.leave(1);
    for i in 0..10u64 {
        // Child 0 reads as it goes; child 1 is gone and must not block the writes.
        tee.write(&[i as u8; 500], i * 500).unwrap();
        let mut buf = [0u8; 500];
        assert_eq!(tee.read(0, &mut buf, i * 500).unwrap(), 500);
    }
    assert_eq!(tee.lock().held, 0);
    let t = Arc::clone(&tee);
    let waiting = std::thread::spawn(move || t.read(0, &mut [0u8; 10], 5_000));
    std::thread::sleep(std::time::Duration::from_millis(50));
    tee.abort();
    assert!(waiting.join().unwrap().is_err());
    assert!(tee.write(b"x", 0).is_err());
}

#[test]
fn a_restart_is_read_past_and_held_is_what_every_subtree_confirmed() {
    // Every destination holds the first 1 000 bytes already: the node receives the rest.
    let held_before = RangeSet::from_range(0, 1_000);
    let tee = Arc::new(Tee::new(2, 10_000, &held_before));
    for i in 1..4u64 {
        tee.write(&[i as u8; 1_000], i * 1_000).unwrap();
    }
    tee.complete();
    let mut buf = [0u8; 1_000];
    for child in 0..2 {
        // The first byte a child's sender claims is past the restart.
        assert_eq!(tee.read(child, &mut buf, 1_000).unwrap(), 1_000);
        assert_eq!(buf[0], 1);
    }
    // Markers: only what both subtrees confirmed, a child that stopped counting as it was.
    let written = RangeSet::from_range(1_000, 4_000);
    assert!(tee.held(&written).is_empty());
    tee.confirm(0, &RangeSet::from_range(1_000, 3_000));
    tee.confirm(1, &RangeSet::from_range(1_000, 2_000));
    assert_eq!(tee.held(&written), RangeSet::from_range(1_000, 2_000));
    tee.leave(1);
    tee.confirm(0, &RangeSet::from_range(3_000, 4_000));
    assert_eq!(tee.held(&written), RangeSet::from_range(1_000, 2_000));
    assert_eq!(tee.confirmed(1), RangeSet::from_range(1_000, 2_000));
}
