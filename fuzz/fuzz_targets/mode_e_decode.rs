//! `BlockDecoder` over arbitrary bytes with a small block limit: never panics, consumes what it
//! is given, and every payload byte lies inside the block its header announced.
#![no_main]

use ferry_proto::mode_e::{BlockDecoder, BlockHeader, DecoderEvent};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk % 32).max(1);
    let mut decoder = BlockDecoder::new(64);
    let mut events = Vec::new();
    let mut current: Option<BlockHeader> = None;
    let mut expected_next = 0u64;
    let mut left = 0u64;
    for piece in rest.chunks(chunk) {
        events.clear();
        match decoder.feed(piece, &mut events) {
            Ok(used) => assert_eq!(used, piece.len()),
            Err(_) => {
                assert!(
                    decoder.feed(piece, &mut Vec::new()).is_err(),
                    "errors are final"
                );
                return;
            }
        }
        for event in &events {
            match event {
                DecoderEvent::Header(h) => {
                    assert_eq!(left, 0, "header inside a payload");
                    assert!(h.payload_len() <= 64);
                    current = Some(*h);
                    expected_next = h.offset;
                    left = h.payload_len();
                }
                DecoderEvent::Payload { offset, data } => {
                    assert!(current.is_some());
                    assert_eq!(*offset, expected_next);
                    assert!(!data.is_empty() && data.len() as u64 <= left);
                    expected_next += data.len() as u64;
                    left -= data.len() as u64;
                }
            }
        }
    }
});
