//! The TLS 1.3 record layer of protected data channels, fed in arbitrary cuts:
//! - raw bytes from a peer who does not know the key: refused with an error (bad type, size or
//!   tag), never a panic, and nothing comes out as data;
//! - records a keyed peer sealed with arbitrary inner types and bodies (alerts, KeyUpdate and
//!   other post-handshake messages, data): opened or refused, never a panic.
#![no_main]

use ferry_gsi::{RecordLayer, Suite, TrafficSecrets};
use libfuzzer_sys::fuzz_target;

fn layer(suite: Suite, read: u8, write: u8) -> RecordLayer {
    let len = if suite == Suite::Aes256Gcm { 48 } else { 32 };
    RecordLayer::new(&TrafficSecrets {
        suite,
        read: vec![read; len],
        write: vec![write; len],
    })
    .unwrap()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let suite = match mode % 3 {
        0 => Suite::Aes128Gcm,
        1 => Suite::Aes256Gcm,
        _ => Suite::Chacha20Poly1305,
    };
    let chunk = usize::from(mode / 6).max(1);
    let keyed = mode & 0x80 != 0;
    let mut rx = layer(suite, 7, 9);
    let wire: Vec<u8> = if keyed {
        // rest = [kind, len, body...]*: records sealed by the peer that holds the key.
        let mut tx = layer(suite, 9, 7);
        let mut r = rest;
        while let [kind, len, tail @ ..] = r {
            let n = usize::from(*len).min(tail.len());
            if tx.fuzz_seal_raw(*kind, &tail[..n]).is_err() {
                return;
            }
            r = &tail[n..];
        }
        tx.unsent().to_vec()
    } else {
        rest.to_vec()
    };
    let mut out = vec![0u8; 1000];
    for piece in wire.chunks(chunk) {
        rx.receive_with::<()>(piece.len(), |b| {
            b[..piece.len()].copy_from_slice(piece);
            Ok(piece.len())
        })
        .unwrap();
        loop {
            match rx.open(&mut out) {
                // A peer without the key cannot make a record that opens.
                Ok(Some(n)) if !keyed => panic!("{n} unauthenticated bytes accepted"),
                Ok(Some(0)) => return,
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
