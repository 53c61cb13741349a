//! `ReplyParser` fed arbitrary bytes in arbitrary chunks: never panics, memory stays bounded,
//! and every reply it returns is written back to bytes that parse to the same reply.
#![no_main]

use ferry_proto::reply::{MAX_REPLY_LINE, MAX_REPLY_LINES};
use ferry_proto::ReplyParser;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunk size, so splits vary with the input.
    let Some((&chunk, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);
    let mut parser = ReplyParser::new();
    for piece in rest.chunks(chunk) {
        parser.feed(piece);
        loop {
            match parser.next_reply() {
                Ok(Some(reply)) => {
                    assert!(!reply.lines.is_empty());
                    assert!(reply.lines.len() <= MAX_REPLY_LINES);
                    assert!(reply.lines.iter().all(|l| l.len() < MAX_REPLY_LINE));
                    let wire = reply.to_bytes();
                    let mut again = ReplyParser::new();
                    again.feed(&wire);
                    let reparsed = again.next_reply();
                    // Lines holding a CR come back with a space instead (the formatter
                    // refuses line ends inside text), and a line that gains its `NNN-` prefix
                    // and CR can pass the limit; everything else round-trips.
                    let fits = wire
                        .split(|&b| b == b'\n')
                        .all(|l| l.len() < MAX_REPLY_LINE);
                    if fits && reply.lines.iter().all(|l| !l.contains('\r')) {
                        assert_eq!(reparsed, Ok(Some(reply)));
                    }
                }
                Ok(None) => break,
                Err(_) => {}
            }
        }
    }
});
