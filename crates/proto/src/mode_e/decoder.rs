//! A streaming MODE E decoder for one connection: bytes in, headers and payload slices out.

use super::header::BlockHeader;

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
#[derive(Debug)]
pub struct BlockDecoder {
    max_block: u64,
    header_buf: [u8; super::header::HEADER_LEN],
    header_fill: usize,
    remaining: u64,
    next_offset: u64,
    eod_seen: bool,
}

impl BlockDecoder {
    /// A decoder refusing blocks larger than `max_block` bytes.
    pub fn new(max_block: u64) -> BlockDecoder {
        BlockDecoder {
            max_block,
            header_buf: [0; super::header::HEADER_LEN],
            header_fill: 0,
            remaining: 0,
            next_offset: 0,
            eod_seen: false,
        }
    }

    /// Consumes bytes, pushing events to `out`; returns how many bytes were consumed (all of them
    /// unless an error stops it).
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<DecoderEvent>) -> Result<usize, DecodeError> {
        let _ = (bytes, out);
        todo!()
    }

    /// Validates a header the way `feed` does (size limit, overflow, CLOSE rules).
    pub fn check_header(&mut self, header: &BlockHeader) -> Result<(), DecodeError> {
        let _ = header;
        todo!()
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
