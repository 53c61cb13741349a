//! Length-prefixed frames for the link between a striped frontend and its data nodes.
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of payload (the IPC layer
//! puts one JSON message in each). The decoder is fed whatever the socket gave and hands out
//! whole payloads; a length above the limit is an error before any of it is buffered.

/// Bytes of the length prefix.
pub const FRAME_HEADER: usize = 4;

/// A frame that cannot be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("IPC frame of {len} bytes is larger than the {limit}-byte limit")]
pub struct FrameTooLarge {
    /// Announced length.
    pub len: u64,
    /// Largest accepted.
    pub limit: usize,
}

/// Prefixes `payload` with its length; `None` if it does not fit in 32 bits.
pub fn encode_frame(payload: &[u8]) -> Option<Vec<u8>> {
    let len = u32::try_from(payload.len()).ok()?;
    let mut out = Vec::with_capacity(FRAME_HEADER + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Some(out)
}

/// Splits a byte stream into frames.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    limit: usize,
}

impl FrameDecoder {
    /// A decoder accepting payloads up to `limit` bytes.
    pub fn new(limit: usize) -> FrameDecoder {
        FrameDecoder {
            buf: Vec::new(),
            limit,
        }
    }

    /// Adds bytes read from the link.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered and not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next whole payload, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, FrameTooLarge> {
        let Some(head) = self.buf.get(..FRAME_HEADER) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > self.limit {
            return Err(FrameTooLarge {
                len: len as u64,
                limit: self.limit,
            });
        }
        if self.buf.len() < FRAME_HEADER + len {
            return Ok(None);
        }
        let payload = self.buf[FRAME_HEADER..FRAME_HEADER + len].to_vec();
        self.buf.drain(..FRAME_HEADER + len);
        Ok(Some(payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn oversized_frames_are_refused_before_buffering() {
        let mut d = FrameDecoder::new(8);
        d.feed(&[0, 0, 0, 9]);
        assert_eq!(d.next_frame(), Err(FrameTooLarge { len: 9, limit: 8 }));
        let mut d = FrameDecoder::new(8);
        d.feed(&[0, 0]);
        assert_eq!(d.next_frame(), Ok(None));
    }

    proptest! {
        #[test]
        fn frames_survive_any_split(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8),
            cut in 1usize..17,
        ) {
            let wire: Vec<u8> = payloads.iter().flat_map(|p| encode_frame(p).unwrap()).collect();
            let mut d = FrameDecoder::new(64);
            let mut out = Vec::new();
            for piece in wire.chunks(cut) {
                d.feed(piece);
                while let Some(f) = d.next_frame().unwrap() {
                    out.push(f);
                }
            }
            prop_assert_eq!(out, payloads);
            prop_assert_eq!(d.buffered(), 0);
        }
    }
}
