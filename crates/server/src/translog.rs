//! The transfer log: one JSON line per transfer (who, what, bytes, streams, duration, result).

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;

/// One finished transfer.
#[derive(Debug, Serialize)]
pub(crate) struct TransferRecord<'a> {
    pub(crate) time: f64,
    pub(crate) user: &'a str,
    pub(crate) peer: String,
    pub(crate) command: &'a str,
    pub(crate) path: &'a str,
    pub(crate) bytes: u64,
    pub(crate) streams: u32,
    pub(crate) mode: &'a str,
    pub(crate) duration_s: f64,
    pub(crate) result: &'a str,
}

/// An append-only log file shared by all sessions (one short write per transfer).
#[derive(Debug)]
pub(crate) struct TransferLog {
    file: Mutex<std::fs::File>,
}

impl TransferLog {
    pub(crate) fn open(path: &Path) -> std::io::Result<TransferLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(TransferLog {
            file: Mutex::new(file),
        })
    }

    pub(crate) fn write(&self, rec: &TransferRecord<'_>) {
        let Ok(mut line) = serde_json::to_vec(rec) else {
            return;
        };
        line.push(b'\n');
        if let Ok(mut f) = self.file.lock() {
            if let Err(e) = f.write_all(&line) {
                tracing::warn!("cannot write transfer log: {e}");
            }
        }
    }
}
