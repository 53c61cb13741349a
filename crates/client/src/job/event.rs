//! What one run of a [`super::FileCopy`] reports while it goes.

use ferry_proto::RangeSet;

/// What a run reports while it goes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum FileCopyEvent {
    /// A performance sample: bytes moved by this run so far, and the seconds it has taken.
    Performance {
        /// Bytes this run moved.
        bytes: u64,
        /// Seconds since the run started.
        seconds: f64,
    },
    /// A checkpoint from the receiver's restart markers: everything the destination holds now,
    /// the job's own ranges included. Persist it to resume later.
    Stored {
        /// Ranges stored at the destination.
        ranges: RangeSet,
    },
    /// Something the user should know that does not stop the copy (a fallback taken).
    Warning {
        /// What happened and why, in a sentence.
        message: String,
    },
    /// A choice made for this file (`--transport auto`), with its reason.
    Note {
        /// What was chosen and why, in a sentence.
        message: String,
    },
    /// The data starts moving in MODE E over TCP on this many streams (after any fallback;
    /// not said for stream mode, other transports or local copies).
    Moving {
        /// Parallel TCP streams of this run.
        streams: u32,
    },
    /// A hop of the destination's forwarding tree failed ([`crate::Progress::ForwardFailed`]).
    ForwardFailed(ferry_proto::multicast::ForwardFailure),
    /// The data connections' round trip, µs ([`crate::Progress::DataRtt`]).
    DataRtt {
        /// Microseconds.
        rtt_us: u32,
    },
    /// Both ends have this checksum.
    Checksum {
        /// The algorithm's name as servers spell it (`ADLER32`, `MD5` …).
        algorithm: String,
        /// Its value.
        value: String,
    },
}
