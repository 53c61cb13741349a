//! A streaming MODE E decoder for one connection: bytes in, headers and payload slices out.

use super::header::{BlockHeader, Descriptor, HEADER_LEN};

#[cfg(test)]
mod tests;

/// What the decoder produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecoderEvent {
    /// A complete header; its payload (if any) follows as `Payload` events.
    Header(BlockHeader),
    /// Payload bytes of the current block at file offset `offset`.
    Payload {
        /// Position of `data[0]` in the file.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
}

/// Why the byte stream is not valid MODE E.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A block larger than the configured maximum.
    #[error("block of {count} bytes exceeds the limit of {max}")]
    BlockTooLarge {
        /// Count from the header.
        count: u64,
        /// Configured maximum.
        max: u64,
    },
    /// `offset + count` overflows u64.
    #[error("block offset {offset} + count {count} overflows")]
    Overflow {
        /// Offset from the header.
        offset: u64,
        /// Count from the header.
        count: u64,
    },
    /// CLOSE without EOD, or data after EOD on the same connection for this transfer.
    #[error("protocol violation: {0}")]
    Violation(&'static str),
}

/// Decodes one connection's byte stream. After an EOD, [`BlockDecoder::reset`] re-arms it for
/// the next transfer on a cached connection.
///
/// Errors are final: once `feed` has failed, every later `feed` returns the same error (the
/// connection is out of step and must be closed).
#[derive(Debug)]
pub struct BlockDecoder {
    max_block: u64,
    header_buf: [u8; HEADER_LEN],
    header_fill: usize,
    remaining: u64,
    next_offset: u64,
    eod_seen: bool,
    failed: Option<DecodeError>,
}

impl BlockDecoder {
    /// A decoder refusing blocks larger than `max_block` bytes.
    pub fn new(max_block: u64) -> BlockDecoder {
        BlockDecoder {
            max_block,
            header_buf: [0; HEADER_LEN],
            header_fill: 0,
            remaining: 0,
            next_offset: 0,
            eod_seen: false,
            failed: None,
        }
    }

    /// Consumes bytes, pushing events to `out`; returns how many bytes were consumed (all of them
    /// unless an error stops it).
    pub fn feed(
        &mut self,
        bytes: &[u8],
        out: &mut Vec<DecoderEvent>,
    ) -> Result<usize, DecodeError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let mut pos = 0;
        while pos < bytes.len() {
            let avail = bytes.len() - pos;
            if self.remaining > 0 {
                let n = usize::try_from(self.remaining).map_or(avail, |r| r.min(avail));
                out.push(DecoderEvent::Payload {
                    offset: self.next_offset,
                    data: bytes[pos..pos + n].to_vec(),
                });
                // check_header proved offset + count fits in u64.
                self.next_offset += n as u64;
                self.remaining -= n as u64;
                pos += n;
                continue;
            }
            let n = (HEADER_LEN - self.header_fill).min(avail);
            self.header_buf[self.header_fill..self.header_fill + n]
                .copy_from_slice(&bytes[pos..pos + n]);
            self.header_fill += n;
            pos += n;
            if self.header_fill == HEADER_LEN {
                self.header_fill = 0;
                let header = BlockHeader::decode(&self.header_buf);
                if let Err(err) = self.check_header(&header) {
                    self.failed = Some(err.clone());
                    return Err(err);
                }
                out.push(DecoderEvent::Header(header));
                self.remaining = header.payload_len();
                self.next_offset = header.offset;
            }
        }
        Ok(pos)
    }

    /// Validates a header the way `feed` does (size limit, overflow, CLOSE rules).
    ///
    /// For callers that read headers themselves: it records an EOD like `feed` does. After EOD
    /// only a payload-less CLOSE header may follow (a cached connection being closed). Headers
    /// with the restart-marker bit, and EOF without EOD, are refused: Globus never sends them.
    pub fn check_header(&mut self, header: &BlockHeader) -> Result<(), DecodeError> {
        let d = header.descriptor;
        let len = header.payload_len();
        if len > self.max_block {
            return Err(DecodeError::BlockTooLarge {
                count: header.count,
                max: self.max_block,
            });
        }
        if !d.has(Descriptor::EOF) && header.offset.checked_add(len).is_none() {
            return Err(DecodeError::Overflow {
                offset: header.offset,
                count: header.count,
            });
        }
        if d.has(Descriptor::RESTART) {
            return Err(DecodeError::Violation(
                "restart-marker blocks are not supported",
            ));
        }
        if d.has(Descriptor::EOF) && !d.has(Descriptor::EOD) {
            return Err(DecodeError::Violation("EOF without EOD"));
        }
        if self.eod_seen {
            if d.has(Descriptor::CLOSE) && len == 0 && !d.has(Descriptor::EOF) {
                return Ok(());
            }
            return Err(DecodeError::Violation(
                "block after EOD on the same connection",
            ));
        }
        if d.has(Descriptor::CLOSE) && !d.has(Descriptor::EOD) {
            return Err(DecodeError::Violation("CLOSE before EOD"));
        }
        if d.has(Descriptor::EOD) {
            self.eod_seen = true;
        }
        Ok(())
    }

    /// Whether EOD has been seen on this connection for the current transfer.
    pub fn eod_seen(&self) -> bool {
        self.eod_seen
    }

    /// Re-arms the decoder for the next transfer on a cached connection.
    pub fn reset(&mut self) {
        self.header_fill = 0;
        self.remaining = 0;
        self.eod_seen = false;
    }
}
