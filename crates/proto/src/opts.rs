//! `OPTS` arguments.

/// Stripe layout requested with `OPTS RETR StripeLayout=...;`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StripeLayout {
    /// `StripeLayout=Partitioned;`.
    Partitioned,
    /// `StripeLayout=Blocked;` (with `BlockSize=n;`).
    Blocked,
}

/// Parsed `OPTS RETR` items; absent items are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetrOpts {
    /// `Parallelism=start[,min,max];` (only `start` is used).
    pub parallelism: Option<u32>,
    /// `StripeLayout=...;`.
    pub layout: Option<StripeLayout>,
    /// `BlockSize=n;`.
    pub block_size: Option<u64>,
    /// `Markers=sec;`: perf markers on RETR every `sec` seconds.
    pub markers: Option<u32>,
}

/// One `OPTS` command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Opts {
    /// `OPTS RETR k=v;...`.
    Retr(RetrOpts),
    /// `OPTS CKSM Markers=sec;`.
    Cksm {
        /// Marker interval in seconds (`None` if the item is missing).
        markers: Option<u32>,
    },
    /// `OPTS PASV|EPSV|SPAS AllowDelayed=0|1`.
    AllowDelayed {
        /// Which command (upper-cased).
        command: String,
        /// The setting.
        allow: bool,
    },
    /// `OPTS MLST|MLSD|MLSR fact;fact;...`: facts to show (lower-cased names).
    Mlst(Vec<String>),
    /// `OPTS UTF8 ON|OFF`.
    Utf8(bool),
    /// Any other `OPTS <word> <params>` (upper-cased word, params as sent).
    Other {
        /// Option word.
        command: String,
        /// Parameter string.
        params: String,
    },
}
