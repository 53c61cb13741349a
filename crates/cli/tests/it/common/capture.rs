//! Collecting a child process's output while it runs, for messages when a test fails.

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};

/// Copies everything `from` yields into `into` on a thread of its own, until end of file.
pub fn drain(mut from: impl Read + Send + 'static, into: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => into
                    .lock()
                    .expect("output buffer")
                    .extend_from_slice(&buf[..n]),
            }
        }
    })
}

/// `text` with `prefix` before every line.
pub fn indent(text: &str, prefix: &str) -> String {
    text.lines()
        .map(|l| format!("{prefix}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
