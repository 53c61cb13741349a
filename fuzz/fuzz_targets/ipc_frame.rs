//! `FrameDecoder` (the striped frontend ⇄ data node link) over arbitrary bytes fed in arbitrary
//! pieces: never panics, and the frames it returns are exactly the input's length-prefixed
//! payloads up to the first oversized one.
#![no_main]

use ferry_proto::frame::{FrameDecoder, FRAME_HEADER};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 256;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk % 32).max(1);
    let mut decoder = FrameDecoder::new(LIMIT);
    let mut got = Vec::new();
    let mut failed = false;
    'feed: for piece in rest.chunks(chunk) {
        decoder.feed(piece);
        loop {
            match decoder.next_frame() {
                Ok(Some(f)) => got.push(f),
                Ok(None) => break,
                Err(e) => {
                    assert!(e.len > LIMIT as u64);
                    failed = true;
                    break 'feed;
                }
            }
        }
    }
    // The same frames, parsed by hand.
    let mut want = Vec::new();
    let mut at = 0;
    while rest.len() >= at + FRAME_HEADER {
        let len = u32::from_be_bytes(rest[at..at + 4].try_into().unwrap()) as usize;
        if len > LIMIT || rest.len() < at + FRAME_HEADER + len {
            break;
        }
        want.push(rest[at + FRAME_HEADER..at + FRAME_HEADER + len].to_vec());
        at += FRAME_HEADER + len;
    }
    assert_eq!(got, want);
    if !failed {
        assert_eq!(decoder.buffered(), rest.len() - at);
    }
});
