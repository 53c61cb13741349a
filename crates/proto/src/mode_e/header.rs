//! The 17-byte MODE E block header: descriptor, count (u64 BE), offset (u64 BE).

/// Bytes in one header.
pub const HEADER_LEN: usize = 17;

/// Descriptor bit flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Descriptor(pub u8);

impl Descriptor {
    /// 0x80 end of record (legacy, never sent).
    pub const EOR: u8 = 0x80;
    /// 0x40 end of file: offset carries the EOD count; always sent with EOD.
    pub const EOF: u8 = 0x40;
    /// 0x20 suspected errors.
    pub const SUSPECT: u8 = 0x20;
    /// 0x10 restart marker.
    pub const RESTART: u8 = 0x10;
    /// 0x08 end of data on this connection for this transfer.
    pub const EOD: u8 = 0x08;
    /// 0x04 sender will close this connection.
    pub const CLOSE: u8 = 0x04;

    /// Whether every bit of `flag` is set.
    pub fn has(self, flag: u8) -> bool {
        self.0 & flag == flag
    }
}

/// One block header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockHeader {
    /// Flags.
    pub descriptor: Descriptor,
    /// Payload bytes following the header (0 for EOF blocks, whatever the field says).
    pub count: u64,
    /// Payload position; for EOF blocks the number of EODs to expect.
    pub offset: u64,
}

impl BlockHeader {
    /// An ordinary data block.
    pub fn data(offset: u64, count: u64) -> BlockHeader {
        BlockHeader { descriptor: Descriptor(0), count, offset }
    }

    /// EOD on a connection that is kept (cached) afterwards.
    pub fn eod() -> BlockHeader {
        BlockHeader { descriptor: Descriptor(Descriptor::EOD), count: 0, offset: 0 }
    }

    /// EOF + EOD with the number of connections used (`eod_count`).
    pub fn eof(eod_count: u64) -> BlockHeader {
        BlockHeader {
            descriptor: Descriptor(Descriptor::EOF | Descriptor::EOD),
            count: 0,
            offset: eod_count,
        }
    }

    /// Encodes into 17 bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        todo!()
    }

    /// Decodes 17 bytes.
    pub fn decode(bytes: &[u8; HEADER_LEN]) -> BlockHeader {
        let _ = bytes;
        todo!()
    }

    /// Payload bytes that actually follow on the wire (0 when EOF is set, as Globus reads it).
    pub fn payload_len(&self) -> u64 {
        todo!()
    }
}
