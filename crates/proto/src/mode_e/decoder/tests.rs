use proptest::prelude::*;

use super::*;
use crate::mode_e::{ConnectionTally, TransferTally};
use crate::ranges::RangeSet;

fn block(header: BlockHeader, payload: &[u8]) -> Vec<u8> {
    let mut out = header.encode().to_vec();
    out.extend_from_slice(payload);
    out
}

fn decode_all(decoder: &mut BlockDecoder, bytes: &[u8]) -> Result<Vec<DecoderEvent>, DecodeError> {
    let mut out = Vec::new();
    let used = decoder.feed(bytes, &mut out)?;
    assert_eq!(used, bytes.len());
    Ok(out)
}

#[test]
fn header_and_payload_split_byte_by_byte_decode() {
    let wire = [
        block(BlockHeader::data(100, 3), b"abc"),
        BlockHeader::eof(1).encode().to_vec(),
    ]
    .concat();
    let mut decoder = BlockDecoder::new(1024);
    let mut events = Vec::new();
    for b in &wire {
        assert_eq!(decoder.feed(std::slice::from_ref(b), &mut events), Ok(1));
    }
    assert_eq!(
        events,
        vec![
            DecoderEvent::Header(BlockHeader::data(100, 3)),
            DecoderEvent::Payload {
                offset: 100,
                data: b"a".to_vec()
            },
            DecoderEvent::Payload {
                offset: 101,
                data: b"b".to_vec()
            },
            DecoderEvent::Payload {
                offset: 102,
                data: b"c".to_vec()
            },
            DecoderEvent::Header(BlockHeader::eof(1)),
        ]
    );
    assert!(decoder.eod_seen());
}

#[test]
fn payload_in_one_feed_is_one_event() {
    let mut decoder = BlockDecoder::new(1024);
    let events =
        decode_all(&mut decoder, &block(BlockHeader::data(0, 5), b"hello")).expect("valid");
    assert_eq!(
        events[1],
        DecoderEvent::Payload {
            offset: 0,
            data: b"hello".to_vec()
        }
    );
}

#[test]
fn zero_length_data_block_has_no_payload_event() {
    let mut decoder = BlockDecoder::new(16);
    let events = decode_all(&mut decoder, &BlockHeader::data(7, 0).encode()).expect("tolerated");
    assert_eq!(events, vec![DecoderEvent::Header(BlockHeader::data(7, 0))]);
}

#[test]
fn eof_block_count_field_is_not_payload() {
    let mut eof = BlockHeader::eof(2);
    eof.count = 1 << 40;
    let mut decoder = BlockDecoder::new(16);
    let events = decode_all(&mut decoder, &eof.encode()).expect("count ignored with EOF");
    assert_eq!(events, vec![DecoderEvent::Header(eof)]);
}

#[test]
fn block_over_the_limit_is_refused() {
    let mut decoder = BlockDecoder::new(16);
    assert_eq!(
        decode_all(&mut decoder, &BlockHeader::data(0, 17).encode()),
        Err(DecodeError::BlockTooLarge { count: 17, max: 16 })
    );
}

#[test]
fn offset_plus_count_overflow_is_refused() {
    let mut decoder = BlockDecoder::new(16);
    assert_eq!(
        decode_all(&mut decoder, &BlockHeader::data(u64::MAX - 1, 2).encode()),
        Err(DecodeError::Overflow {
            offset: u64::MAX - 1,
            count: 2
        })
    );
    let mut decoder = BlockDecoder::new(16);
    assert!(decode_all(&mut decoder, &BlockHeader::data(u64::MAX - 2, 2).encode()).is_ok());
}

#[test]
fn close_without_eod_is_a_violation() {
    let close = BlockHeader {
        descriptor: Descriptor(Descriptor::CLOSE),
        count: 0,
        offset: 0,
    };
    let mut decoder = BlockDecoder::new(16);
    assert!(matches!(
        decode_all(&mut decoder, &close.encode()),
        Err(DecodeError::Violation(_))
    ));
    let close_eod = BlockHeader {
        descriptor: Descriptor(Descriptor::CLOSE | Descriptor::EOD),
        count: 0,
        offset: 0,
    };
    let mut decoder = BlockDecoder::new(16);
    assert!(decode_all(&mut decoder, &close_eod.encode()).is_ok());
}

#[test]
fn data_after_eod_is_a_violation_until_reset() {
    let mut decoder = BlockDecoder::new(16);
    decode_all(&mut decoder, &BlockHeader::eod().encode()).expect("eod");
    let mut probe = BlockDecoder::new(16);
    probe.eod_seen = true;
    assert!(matches!(
        decode_all(&mut probe, &BlockHeader::data(0, 1).encode()),
        Err(DecodeError::Violation(_))
    ));
    assert!(matches!(
        decode_all(
            &mut BlockDecoder {
                eod_seen: true,
                ..BlockDecoder::new(16)
            },
            &BlockHeader::eod().encode()
        ),
        Err(DecodeError::Violation(_))
    ));
    decoder.reset();
    assert!(!decoder.eod_seen());
    assert!(decode_all(&mut decoder, &block(BlockHeader::data(0, 1), b"x")).is_ok());
}

#[test]
fn close_after_eod_closes_a_cached_connection() {
    let mut decoder = BlockDecoder::new(16);
    decode_all(&mut decoder, &BlockHeader::eod().encode()).expect("eod");
    let close = BlockHeader {
        descriptor: Descriptor(Descriptor::CLOSE),
        count: 0,
        offset: 0,
    };
    assert!(decode_all(&mut decoder, &close.encode()).is_ok());
}

#[test]
fn data_block_may_carry_eod() {
    let last = BlockHeader {
        descriptor: Descriptor(Descriptor::EOD),
        count: 2,
        offset: 8,
    };
    let mut decoder = BlockDecoder::new(16);
    let events = decode_all(&mut decoder, &block(last, b"hi")).expect("valid");
    assert_eq!(
        events[1],
        DecoderEvent::Payload {
            offset: 8,
            data: b"hi".to_vec()
        }
    );
    assert!(decoder.eod_seen());
}

#[test]
fn eof_without_eod_and_restart_blocks_are_refused() {
    for flags in [Descriptor::EOF, Descriptor::RESTART] {
        let header = BlockHeader {
            descriptor: Descriptor(flags),
            count: 0,
            offset: 1,
        };
        assert!(matches!(
            BlockDecoder::new(16).check_header(&header),
            Err(DecodeError::Violation(_))
        ));
    }
}

#[test]
fn errors_are_sticky() {
    let mut decoder = BlockDecoder::new(4);
    let bad = BlockHeader::data(0, 5).encode();
    let err = decode_all(&mut decoder, &bad).expect_err("too large");
    let mut out = Vec::new();
    assert_eq!(
        decoder.feed(&BlockHeader::eod().encode(), &mut out),
        Err(err)
    );
    assert!(out.is_empty());
}

#[test]
fn check_header_records_eod_for_callers_that_read_headers() {
    let mut decoder = BlockDecoder::new(16);
    assert_eq!(decoder.check_header(&BlockHeader::data(0, 16)), Ok(()));
    assert!(!decoder.eod_seen());
    assert_eq!(decoder.check_header(&BlockHeader::eof(3)), Ok(()));
    assert!(decoder.eod_seen());
    assert!(decoder.check_header(&BlockHeader::data(16, 1)).is_err());
}

/// One transfer: the file, how it is cut into blocks, which connection carries each block
/// and in what order, and where each connection's byte stream is split into reads.
#[derive(Debug, Clone)]
struct Scenario {
    data: Vec<u8>,
    sizes: Vec<u64>,
    conns: usize,
    assign: Vec<usize>,
    order_keys: Vec<u64>,
    cuts: Vec<proptest::sample::Index>,
    merge_order: Vec<u64>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        proptest::collection::vec(any::<u8>(), 0..3000),
        proptest::collection::vec(1u64..=300, 1..20),
        1usize..=5,
        proptest::collection::vec(any::<usize>(), 1..20),
        proptest::collection::vec(any::<u64>(), 1..40),
        proptest::collection::vec(any::<proptest::sample::Index>(), 0..30),
        proptest::collection::vec(any::<u64>(), 5),
    )
        .prop_map(
            |(data, sizes, conns, assign, order_keys, cuts, merge_order)| Scenario {
                data,
                sizes,
                conns,
                assign,
                order_keys,
                cuts,
                merge_order,
            },
        )
}

/// Encodes each connection's stream; the connection with the last index carries EOF.
fn encode(s: &Scenario) -> Vec<Vec<u8>> {
    let mut blocks: Vec<(usize, u64, u64, u64)> = Vec::new();
    let mut offset = 0u64;
    let mut i = 0;
    while offset < s.data.len() as u64 {
        let len = s.sizes[i % s.sizes.len()].min(s.data.len() as u64 - offset);
        let conn = s.assign[i % s.assign.len()] % s.conns;
        let key = s.order_keys[i % s.order_keys.len()].rotate_left(i as u32);
        blocks.push((conn, key, offset, len));
        offset += len;
        i += 1;
    }
    blocks.sort_by_key(|&(conn, key, ..)| (conn, key));
    let mut streams = vec![Vec::new(); s.conns];
    for (conn, _, offset, len) in blocks {
        let payload = &s.data[offset as usize..(offset + len) as usize];
        streams[conn].extend(block(BlockHeader::data(offset, len), payload));
    }
    for (conn, stream) in streams.iter_mut().enumerate() {
        let end = if conn + 1 == s.conns {
            BlockHeader::eof(s.conns as u64)
        } else {
            BlockHeader::eod()
        };
        stream.extend_from_slice(&end.encode());
    }
    streams
}

proptest! {
    #[test]
    fn mode_e_blocks_in_any_order_reassemble_exactly(s in scenario()) {
        let streams = encode(&s);
        let mut file = vec![0u8; s.data.len()];
        let mut written = vec![false; s.data.len()];
        let mut tallies = Vec::new();
        for (conn, stream) in streams.iter().enumerate() {
            let mut decoder = BlockDecoder::new(300);
            let mut tally = ConnectionTally::default();
            let mut cuts: Vec<usize> = s.cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
            cuts.sort_unstable();
            let mut prev = 0;
            for cut in cuts.into_iter().chain([stream.len()]) {
                let mut events = Vec::new();
                let used = decoder.feed(&stream[prev..cut], &mut events).expect("valid stream");
                prop_assert_eq!(used, cut - prev);
                prev = cut;
                for event in events {
                    match event {
                        DecoderEvent::Header(h) if h.descriptor.has(Descriptor::EOD) => {
                            let eof = h.descriptor.has(Descriptor::EOF).then_some(h.offset);
                            tally.record_eod(eof);
                        }
                        DecoderEvent::Header(_) => {}
                        DecoderEvent::Payload { offset, data } => {
                            let at = offset as usize;
                            prop_assert!(!written[at..at + data.len()].iter().any(|&w| w), "conn {} wrote twice", conn);
                            file[at..at + data.len()].copy_from_slice(&data);
                            written[at..at + data.len()].iter_mut().for_each(|w| *w = true);
                            tally.record_data(offset, data.len() as u64);
                        }
                    }
                }
            }
            prop_assert!(decoder.eod_seen());
            tallies.push(tally);
        }
        prop_assert_eq!(&file, &s.data);

        // Merge in a random order: complete only once every connection's EOD is in.
        let mut order: Vec<usize> = (0..tallies.len()).collect();
        order.sort_by_key(|&i| s.merge_order[i % s.merge_order.len()].rotate_left(i as u32));
        let mut transfer = TransferTally::default();
        for (n, &i) in order.iter().enumerate() {
            prop_assert!(!transfer.is_complete());
            transfer.merge(&tallies[i]).expect("consistent EOF");
            prop_assert_eq!(transfer.is_complete(), n + 1 == tallies.len());
        }
        prop_assert!(!transfer.is_overrun());
        prop_assert_eq!(transfer.ranges, RangeSet::from_range(0, s.data.len() as u64));
        prop_assert_eq!(transfer.bytes, s.data.len() as u64);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), max in 0u64..64) {
        let mut decoder = BlockDecoder::new(max);
        let mut out = Vec::new();
        for chunk in bytes.chunks(7) {
            if decoder.feed(chunk, &mut out).is_err() {
                break;
            }
        }
    }
}
