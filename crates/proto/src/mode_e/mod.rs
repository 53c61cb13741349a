//! MODE E (extended block mode): the block header codec, a streaming decoder and the
//! receiver's bookkeeping across connections.

mod decoder;
mod header;
mod tally;

pub use decoder::{BlockDecoder, DecodeError, DecoderEvent};
pub use header::{BlockHeader, Descriptor, HEADER_LEN};
pub use tally::{ConnectionTally, TallyConflict, TransferTally};
