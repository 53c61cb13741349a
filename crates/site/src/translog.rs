//! The transfer log (`--log-transfer FILE`): one line per transfer, as JSON (who, what, bytes,
//! streams, duration, result; failures too), or in the Globus GridFTP server's own format
//! (`--log-transfer-format globus`: `DATE=… HOST=… NL.EVNT=FTP_INFO … CODE=226`), which the
//! grid accounting tools read. Like Globus, that format records successful transfers only.

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use ferry_proto::civil::Civil;
use serde::{Deserialize, Serialize};

/// The transfer log file cannot be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the transfer log {path}: {source}")]
pub struct TransferLogError {
    /// The file.
    pub path: String,
    /// Why.
    pub source: std::io::Error,
}

/// How transfer-log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransferLogFormat {
    /// One JSON object per line, failed transfers included.
    #[default]
    Json,
    /// The Globus server's `-log-transfer` line (successful transfers only).
    Globus,
}

/// One finished transfer.
#[derive(Debug, Serialize)]
pub struct TransferRecord<'a> {
    /// End, seconds since the epoch.
    pub time: f64,
    /// Who: the login name or the mapped account.
    pub user: &'a str,
    /// The client's address.
    pub peer: String,
    /// What moved the bytes: `RETR`, `STOR`, `ERET`, `ESTO`, or the HTTP method (`GET`, `PUT`).
    pub command: &'a str,
    /// The file, as the client named it.
    pub path: &'a str,
    /// Bytes moved.
    pub bytes: u64,
    /// Parallel data streams (connections).
    pub streams: u32,
    /// Transfer mode: `S`, `E`, or `HTTP`.
    pub mode: &'a str,
    /// The data channel's transport, the bottom driver of the session's net stack (`tcp`,
    /// `quic`).
    pub transport: &'a str,
    /// How long it took, in seconds.
    pub duration_s: f64,
    /// `ok`, or why it failed.
    pub result: &'a str,
    /// The reply code that ended it (226 when it succeeded).
    pub code: u16,
    /// `SITE TASKID`, if the client named its task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<&'a str>,
    /// The checksums the transfer took while its bytes moved (`{"ADLER32": "0a1b2c3d"}`), for
    /// audits; absent when it took none.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub checksums: std::collections::BTreeMap<&'a str, &'a str>,
    /// What the kernel knew of the data connections at the end (`TCP_INFO` summed over them:
    /// congestion control, round trip, bytes sent and sent again, out-of-order arrivals), for
    /// finding slow or lossy paths; MODE E over TCP only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<&'a ferry_net::TcpStats>,
    /// Globus' `TYPE`: RETR, ERET (a part or a restart), STOR, ESTO (appending or resuming),
    /// LIST, NLST, MLSD.
    #[serde(skip)]
    pub globus_type: &'a str,
    /// TCP buffer size asked for (0: the system's).
    #[serde(skip)]
    pub buffer: u32,
    /// MODE E block size.
    #[serde(skip)]
    pub block: u32,
    /// Data nodes that moved it.
    #[serde(skip)]
    pub stripes: usize,
    /// The host at the other end of the data channel (Globus' DEST), when known.
    #[serde(skip)]
    pub data_peer: Option<std::net::IpAddr>,
}

#[derive(Debug)]
struct Open {
    path: PathBuf,
    file: std::fs::File,
    format: TransferLogFormat,
}

/// An append-only log file shared by all sessions (one short write per transfer), reopened on
/// reload so that logrotate can move it away.
#[derive(Debug, Default)]
pub struct TransferLog {
    open: Mutex<Option<Open>>,
}

impl TransferLog {
    /// Opens `path` (creating it) in place of the file written so far, or stops logging when
    /// `None`. On error the old file stays in use.
    pub fn open(
        &self,
        path: Option<&Path>,
        format: TransferLogFormat,
    ) -> Result<(), TransferLogError> {
        let next = match path {
            Some(p) => Some(Open {
                path: p.to_path_buf(),
                file: std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|source| TransferLogError {
                        path: p.display().to_string(),
                        source,
                    })?,
                format,
            }),
            None => None,
        };
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = next;
        Ok(())
    }

    /// Opens the file in use again by its path (after logrotate moved it away).
    pub fn reopen(&self) -> Result<(), TransferLogError> {
        let (path, format) = {
            let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            match open.as_ref() {
                Some(o) => (o.path.clone(), o.format),
                None => return Ok(()),
            }
        };
        self.open(Some(&path), format)
    }

    /// The file being written.
    pub fn path(&self) -> Option<PathBuf> {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.as_ref().map(|o| o.path.clone())
    }

    /// Appends one record (JSON, or a Globus line for a successful transfer).
    pub fn write(&self, rec: &TransferRecord<'_>, host: &str) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let Some(o) = open.as_mut() else { return };
        let line = match o.format {
            TransferLogFormat::Json => match serde_json::to_string(rec) {
                Ok(mut l) => {
                    l.push('\n');
                    l
                }
                Err(_) => return,
            },
            TransferLogFormat::Globus if rec.code == 226 => globus_line(rec, host),
            TransferLogFormat::Globus => return,
        };
        if let Err(e) = o.file.write_all(line.as_bytes()) {
            tracing::warn!(path = %o.path.display(), "cannot write transfer log: {e}");
        }
    }
}

/// `YYYYMMDDhhmmss.uuuuuu` in UTC, as Globus writes DATE and START.
fn globus_time(since_epoch: Duration) -> String {
    let secs = i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX);
    format!(
        "{}.{:06}",
        Civil::from_unix(secs),
        since_epoch.subsec_micros()
    )
}

/// The Globus GridFTP server's transfer-log line (globus_i_gfs_log_transfer): fields in its
/// order, `VOLUME=/` as it writes it, `TASKID=none` when the client sent no `SITE TASKID`.
fn globus_line(rec: &TransferRecord<'_>, host: &str) -> String {
    let end = Duration::from_secs_f64(rec.time.max(0.0));
    let start = end.saturating_sub(Duration::from_secs_f64(rec.duration_s.max(0.0)));
    // As Globus: the data channel's peer, 0.0.0.0 when unknown.
    let dest = match rec.data_peer {
        Some(ip) => ip.to_canonical().to_string(),
        None => "0.0.0.0".into(),
    };
    let mut l = String::with_capacity(320);
    let _ = writeln!(
        l,
        "DATE={} HOST={host} PROG=ferry NL.EVNT=FTP_INFO START={} USER={} FILE={} \
         BUFFER={} BLOCK={} NBYTES={} VOLUME=/ STREAMS={} STRIPES={} DEST=[{dest}] TYPE={} \
         CODE={} TASKID={}",
        globus_time(end),
        globus_time(start),
        field(rec.user),
        field(rec.path),
        rec.buffer,
        rec.block,
        rec.bytes,
        rec.streams,
        rec.stripes.max(1),
        rec.globus_type,
        rec.code,
        field(rec.task_id.unwrap_or("none")),
    );
    l
}

/// A value without the line breaks that would split a record (Globus writes paths as they
/// are, spaces included).
fn field(s: &str) -> String {
    s.replace(['\n', '\r'], "?")
}

/// This host's name for Globus' HOST field.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(code: u16) -> TransferRecord<'static> {
        TransferRecord {
            time: 1_764_111_033.5,
            user: "alice",
            peer: "[::ffff:10.1.2.3]:40000".into(),
            command: "RETR",
            path: "/data/run 7.bin",
            bytes: 12345,
            streams: 4,
            mode: "E",
            transport: "tcp",
            duration_s: 0.25,
            result: "ok",
            code,
            task_id: None,
            checksums: Default::default(),
            tcp: None,
            globus_type: "ERET",
            buffer: 0,
            block: 262_144,
            stripes: 0,
            data_peer: Some("::ffff:10.1.2.3".parse().expect("ip")),
        }
    }

    #[test]
    fn globus_lines_have_the_globus_fields_in_order() {
        let l = globus_line(&record(226), "dtn1.example.org");
        assert_eq!(
            l,
            "DATE=20251125225033.500000 HOST=dtn1.example.org PROG=ferry NL.EVNT=FTP_INFO \
             START=20251125225033.250000 USER=alice FILE=/data/run 7.bin BUFFER=0 BLOCK=262144 \
             NBYTES=12345 VOLUME=/ STREAMS=4 STRIPES=1 DEST=[10.1.2.3] TYPE=ERET CODE=226 \
             TASKID=none\n"
        );
    }

    #[test]
    fn the_globus_format_skips_failures_and_json_keeps_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = TransferLog::default();
        let g = dir.path().join("g.log");
        log.open(Some(&g), TransferLogFormat::Globus).expect("open");
        log.write(&record(426), "h");
        log.write(&record(226), "h");
        let text = std::fs::read_to_string(&g).expect("read");
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("CODE=226"));
        // Reopening (after logrotate moved the file) starts a new file.
        let moved = dir.path().join("g.log.1");
        std::fs::rename(&g, &moved).expect("rename");
        log.reopen().expect("reopen");
        log.write(&record(226), "h");
        assert_eq!(
            std::fs::read_to_string(&g)
                .expect("new file")
                .lines()
                .count(),
            1
        );
        assert_eq!(
            std::fs::read_to_string(&moved)
                .expect("old file")
                .lines()
                .count(),
            1
        );
        let j = dir.path().join("j.log");
        log.open(Some(&j), TransferLogFormat::Json).expect("reopen");
        assert_eq!(log.path().as_deref(), Some(j.as_path()));
        log.write(&record(426), "h");
        let v: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&j).expect("read").trim()).expect("json");
        assert_eq!(v["code"], 426);
        assert_eq!(v["user"], "alice");
        assert!(log
            .open(
                Some(&dir.path().join("no/such/dir")),
                TransferLogFormat::Json
            )
            .is_err());
        assert_eq!(
            log.path().as_deref(),
            Some(j.as_path()),
            "the old file stays"
        );
    }
}
