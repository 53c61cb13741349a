//! Label sets more than one program's families use, so the same label reads the same in every
//! scrape.

use prometheus_client::encoding::EncodeLabelSet;

/// A `direction` label: which way bytes went (`send`/`receive`, `sent`/`received`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DirectionLabel {
    /// The direction's name.
    pub direction: &'static str,
}

/// A `result` label: how something ended (`ok`, `failed`, `refused` …).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ResultLabel {
    /// The result's name.
    pub result: &'static str,
}
