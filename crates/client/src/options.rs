//! What a copy is told and what it tells: the options of `ferry copy` (and of every program
//! that copies through [`copy`](crate::copy)), how a file is verified, and the events and summary
//! a copy reports. The copy, its checks and its pipelines all read these, so they live below
//! all three.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_storage::ChecksumAlgorithm;
use tokio_util::sync::CancellationToken;

use crate::plan::{display, Job};
use crate::request::FileRequest;
use crate::retune::Retune;
use crate::{ClientError, ErrorClass};

/// How `--sync` decides a destination is already up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncLevel {
    /// Always copy.
    Off,
    /// Skip when the destination exists.
    Exists,
    /// Skip when the sizes match.
    Size,
    /// Skip when the checksums match.
    Checksum,
}

impl SyncLevel {
    /// `--sync NAME`: `exists`, `size` or `checksum`; `None` is [`SyncLevel::Off`].
    pub fn from_flag(name: Option<&str>) -> Result<SyncLevel, ClientError> {
        match name {
            None => Ok(SyncLevel::Off),
            Some("exists") => Ok(SyncLevel::Exists),
            Some("size") => Ok(SyncLevel::Size),
            Some("checksum") => Ok(SyncLevel::Checksum),
            Some(other) => Err(ClientError::Usage(format!(
                "--sync takes exists, size or checksum, not '{other}'"
            ))),
        }
    }
}

/// Everything `ferry copy` can be told.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Per-file settings; `parallelism == 0` means "choose by size".
    pub request: FileRequest,
    /// Create missing destination directories.
    pub create_dirs: bool,
    /// Files in flight at once (each on its own sessions).
    pub concurrency: usize,
    /// Retries per file after a network failure.
    pub retries: u32,
    /// First wait between retries (doubles each time).
    pub retry_wait: Duration,
    /// How each file is verified once it is there (`None`: not at all).
    pub verify: Option<Verify>,
    /// Skip rule.
    pub sync: SyncLevel,
    /// Give each destination its source's modification time and permission bits (scp's `-p`).
    pub preserve: bool,
    /// GSI for `gsiftp://` servers.
    pub gsi: crate::GsiOptions,
    /// Stops the copy: files in flight end with [`ClientError::Cancelled`] and no more start.
    pub cancel: CancellationToken,
    /// A rule that may re-choose each file's streams from its first seconds (gcp's).
    pub retune: Option<Retune>,
}

impl CopyOptions {
    /// The wait before retry number `retry` (1 for the first): `retry_wait`, doubling, at
    /// most 32 times it.
    pub fn retry_delay(&self, retry: u32) -> Duration {
        self.retry_wait * 2u32.saturating_pow(retry.saturating_sub(1)).min(32)
    }
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            request: FileRequest {
                parallelism: 0,
                ..FileRequest::default()
            },
            create_dirs: false,
            concurrency: 4,
            retries: 3,
            retry_wait: Duration::from_secs(1),
            verify: Some(Verify::by_default()),
            sync: SyncLevel::Off,
            preserve: false,
            gsi: crate::GsiOptions::default(),
            cancel: CancellationToken::new(),
            retune: None,
        }
    }
}

/// What happens during a copy, for progress bars and `--json`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CopyEvent {
    /// The plan is made.
    Planned {
        /// Files to copy.
        files: usize,
        /// Their bytes, where known.
        bytes: u64,
    },
    /// A file starts.
    Started {
        /// Index in the plan.
        file: usize,
        /// Source.
        src: String,
        /// Destination.
        dst: String,
        /// Size, where known.
        size: Option<u64>,
    },
    /// Bytes of a file moved so far.
    Bytes {
        /// Index in the plan.
        file: usize,
        /// Bytes so far.
        bytes: u64,
    },
    /// A checkpoint: the ranges of a file the destination holds, from its restart markers.
    Stored {
        /// Index in the plan.
        file: usize,
        /// The ranges, as `REST` spells them (`0-1048576,2097152-4194304`).
        ranges: String,
    },
    /// A file is being retried.
    Retry {
        /// Index in the plan.
        file: usize,
        /// Attempt number (2 = first retry).
        attempt: u32,
        /// Bytes the destination already holds, which are not sent again.
        resumed_bytes: u64,
        /// Why the last attempt failed.
        error: String,
    },
    /// A file is done.
    Done {
        /// Index in the plan.
        file: usize,
        /// Bytes the destination holds (the file, or the requested range).
        bytes: u64,
        /// Bytes this copy moved: less than `bytes` when it resumed from what the destination
        /// held, or skipped the file.
        moved: u64,
        /// Seconds it took.
        seconds: f64,
        /// Streams used.
        streams: u32,
        /// Skipped by `--sync`.
        skipped: bool,
        /// The checksum both ends have, when the file was verified.
        checksum: Option<String>,
        /// What the kernel knew of the client's data connections (MODE E over TCP).
        tcp: Option<ferry_net::TcpStats>,
    },
    /// Something the user should know that does not stop the copy; each said once per copy.
    Warning {
        /// What happened and why.
        message: String,
    },
    /// A choice made for the user (`--transport auto`), with its reason; each said once per
    /// copy (shown with `-v`).
    Note {
        /// What was chosen and why.
        message: String,
    },
    /// A hop of the destination's forwarding tree failed (`gridftp_multicast`): the other
    /// destinations go on. May be said twice for one hop (as it fails, and in the final reply).
    ForwardFailed {
        /// Index in the plan.
        file: usize,
        /// The hop's URL.
        url: String,
        /// What every destination of its subtree held, as `REST` spells ranges.
        held: String,
        /// Why it failed.
        error: String,
    },
    /// A file failed for good.
    Failed {
        /// Index in the plan.
        file: usize,
        /// Why.
        error: String,
    },
}

/// The result of a copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopySummary {
    /// Files copied (or skipped as identical).
    pub done: usize,
    /// Files that failed.
    pub failed: usize,
    /// Payload bytes moved.
    pub bytes: u64,
    /// The first failure's class, for the exit code.
    pub first_failure: Option<ErrorClass>,
    /// The client's data connections of every file, summed (MODE E over TCP; `None` when no
    /// file had its own: local and third-party copies).
    pub tcp: Option<ferry_net::TcpStats>,
}

/// Events go to whoever presents them.
pub type EventSink = Arc<dyn Fn(CopyEvent) + Send + Sync>;

/// How a copy checks what arrived: the checksum of the source against the destination's, both
/// taken while the bytes moved where an end is local (and from the server's kept values where
/// it is a ferry server), so neither end reads the file again where it can help it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verify {
    /// The algorithm.
    pub algorithm: ChecksumAlgorithm,
    /// A value both ends must have (FTS3's user-supplied checksum), hex as servers print it.
    pub expected: Option<String>,
    /// Asked for by name: an end that cannot answer `CKSM` fails the copy. When `false` (the
    /// default verification) such an end gives a warning and the copy is not verified.
    pub required: bool,
    /// Which ends are summed. With an `expected` value, FTS3's `source` and `target` modes
    /// sum one end only (a tape source or an object store that cannot answer `CKSM` is no
    /// failure); without one, both ends are always compared.
    pub ends: Ends,
}

/// The ends a verification sums (see [`Verify::ends`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Ends {
    /// The source and the destination (and the expected value, when given).
    #[default]
    Both,
    /// The source against the expected value only.
    Source,
    /// The destination against the expected value only.
    Destination,
}

impl Verify {
    /// What `ferry copy` does unless told otherwise: ADLER32, as FTS3 does, where the servers
    /// can answer it.
    pub fn by_default() -> Verify {
        Verify {
            algorithm: ChecksumAlgorithm::Adler32,
            expected: None,
            required: false,
            ends: Ends::Both,
        }
    }

    /// Verification with `algorithm`, failing where an end cannot answer.
    pub fn required(algorithm: ChecksumAlgorithm) -> Verify {
        Verify {
            algorithm,
            expected: None,
            required: true,
            ends: Ends::Both,
        }
    }

    /// What `--no-verify`, `--checksum NAME`, `--verify-checksum` (`required`) and
    /// `--checksum-value ALG:HEX` ask for together (`None`: no verification).
    pub fn from_flags(
        no_verify: bool,
        named: Option<&str>,
        required: bool,
        value: Option<&str>,
    ) -> Result<Option<Verify>, ClientError> {
        if no_verify {
            return Ok(None);
        }
        let usage = |s: String| Err(ClientError::Usage(s));
        let mut v = match named {
            Some(name) => Verify::required(checksum_algorithm(Some(name))?),
            None => Verify {
                required,
                ..Verify::by_default()
            },
        };
        if let Some(value) = value {
            let Some((alg, hex)) = value.split_once(':') else {
                return usage(format!(
                    "--checksum-value takes ALG:VALUE (ADLER32:1a2b3c4d), not '{value}'"
                ));
            };
            let alg = checksum_algorithm(Some(alg))?;
            if named.is_some() && alg != v.algorithm {
                return usage(format!(
                    "--checksum {} and --checksum-value {} name different algorithms",
                    v.algorithm.name(),
                    alg.name()
                ));
            }
            if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return usage(format!(
                    "--checksum-value: '{hex}' is not a hexadecimal value"
                ));
            }
            v = Verify {
                algorithm: alg,
                expected: Some(hex.to_ascii_lowercase()),
                required: true,
                ends: Ends::Both,
            };
        }
        Ok(Some(v))
    }
}

/// The checksum algorithm `name` names (MD5 when `None`), or the names there are.
pub fn checksum_algorithm(name: Option<&str>) -> Result<ChecksumAlgorithm, ClientError> {
    let name = name.unwrap_or("MD5");
    ChecksumAlgorithm::from_name(name).ok_or_else(|| {
        ClientError::Usage(format!(
            "unknown checksum algorithm '{name}' (MD5, ADLER32, CRC32C, SHA1, SHA256, SHA512)"
        ))
    })
}

pub(crate) fn started(events: &EventSink, i: usize, job: &Job) {
    events(CopyEvent::Started {
        file: i,
        src: display(&job.src),
        dst: display(&job.dst),
        size: job.size,
    });
}

pub(crate) fn finished(
    summary: &Mutex<CopySummary>,
    events: &EventSink,
    i: usize,
    r: Result<CopyEvent, ClientError>,
) {
    let Ok(mut s) = summary.lock() else { return };
    match r {
        Ok(ev) => {
            s.done += 1;
            if let CopyEvent::Done { bytes, tcp, .. } = &ev {
                s.bytes += bytes;
                if let Some(t) = tcp {
                    s.tcp.get_or_insert_with(Default::default).then(t);
                }
            }
            events(ev);
        }
        Err(e) => {
            s.failed += 1;
            s.first_failure.get_or_insert(e.class());
            events(CopyEvent::Failed {
                file: i,
                error: e.to_string(),
            });
        }
    }
}
