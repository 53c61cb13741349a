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
        BlockHeader {
            descriptor: Descriptor(0),
            count,
            offset,
        }
    }

    /// EOD on a connection that is kept (cached) afterwards.
    pub fn eod() -> BlockHeader {
        BlockHeader {
            descriptor: Descriptor(Descriptor::EOD),
            count: 0,
            offset: 0,
        }
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
        let mut out = [0u8; HEADER_LEN];
        out[0] = self.descriptor.0;
        out[1..9].copy_from_slice(&self.count.to_be_bytes());
        out[9..17].copy_from_slice(&self.offset.to_be_bytes());
        out
    }

    /// Decodes 17 bytes.
    pub fn decode(bytes: &[u8; HEADER_LEN]) -> BlockHeader {
        let mut count = [0u8; 8];
        let mut offset = [0u8; 8];
        count.copy_from_slice(&bytes[1..9]);
        offset.copy_from_slice(&bytes[9..17]);
        BlockHeader {
            descriptor: Descriptor(bytes[0]),
            count: u64::from_be_bytes(count),
            offset: u64::from_be_bytes(offset),
        }
    }

    /// Payload bytes that actually follow on the wire (0 when EOF is set, as Globus reads it).
    pub fn payload_len(&self) -> u64 {
        if self.descriptor.has(Descriptor::EOF) {
            0
        } else {
            self.count
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_fields_are_big_endian() {
        let header = BlockHeader::data(0x0102_0304_0506_0708, 0x1122);
        let bytes = header.encode();
        assert_eq!(bytes[0], 0);
        assert_eq!(bytes[1..9], [0, 0, 0, 0, 0, 0, 0x11, 0x22]);
        assert_eq!(bytes[9..17], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(BlockHeader::decode(&bytes), header);
    }

    #[test]
    fn eof_block_is_0x48_with_the_eod_count_in_the_offset() {
        let bytes = BlockHeader::eof(4).encode();
        assert_eq!(bytes[0], 0x48);
        assert_eq!(bytes[9..17], 4u64.to_be_bytes());
        assert!(BlockHeader::eof(4).descriptor.has(Descriptor::EOD));
    }

    #[test]
    fn eof_block_carries_no_payload_whatever_its_count() {
        let mut header = BlockHeader::eof(2);
        header.count = 999;
        assert_eq!(header.payload_len(), 0);
        let mut eod = BlockHeader::eod();
        eod.count = 10;
        assert_eq!(eod.payload_len(), 10, "a data block may carry EOD");
        assert_eq!(BlockHeader::data(0, 7).payload_len(), 7);
    }

    proptest! {
        #[test]
        fn headers_round_trip(descriptor: u8, count: u64, offset: u64) {
            let header = BlockHeader { descriptor: Descriptor(descriptor), count, offset };
            prop_assert_eq!(BlockHeader::decode(&header.encode()), header);
        }
    }
}
