//! Transfer commands: build the transfer description, hand it to the DTP, relay its markers,
//! and keep reading the control channel (ABOR, STAT, pipelined commands) while it runs.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use ferry_dtp::{
    marker_reply, relay, ChannelSecurity, Direction, DtpError, DtpEvent, ListKind, MarkerIntervals,
    RelaySink, Relayed, Section, StripeInfo, TransferDescription, TransferSource, Watch,
};
use ferry_proto::command::{Eret, Esto, Restart, TransferMode, TransferType};
use ferry_proto::line::LineEvent;
use ferry_proto::{Command, RangeSet, Reply};
use ferry_storage::{StorageError, VirtualPath};

use super::{queue_line, ControlReader, Session};
use crate::translog::TransferRecord;

type Io = std::io::Result<()>;

/// What the PI decided a transfer command means.
struct Planned {
    desc: TransferDescription,
    verb: &'static str,
    /// Text of the 150 reply when it must name a file (STOU).
    announce: Option<String>,
}

impl Session {
    pub(crate) async fn cmd_transfer(&mut self, cmd: Command, reader: &mut ControlReader) -> Io {
        let planned = match self.plan(cmd) {
            Ok(p) => p,
            Err(reply) => {
                self.restart = None;
                return self.send(&reply).await;
            }
        };
        self.restart = None;
        self.allo = None;
        self.run_planned(planned, reader).await
    }

    fn plan(&mut self, cmd: Command) -> Result<Planned, Reply> {
        let Some(login) = self.login.as_ref() else {
            return Err(Reply::new(530, "Please login with USER and PASS."));
        };
        let read_only = login.read_only;
        let storage = std::sync::Arc::clone(&login.storage);
        let restart = match &self.restart {
            None => RangeSet::new(),
            Some(Restart::Stream(0)) => RangeSet::new(),
            Some(Restart::Stream(n)) => RangeSet::from_range(0, *n),
            Some(Restart::Ranges(r)) => r.clone(),
        };
        let refuse_write = || Reply::new(550, "Permission denied: this login is read-only.");
        let storage_err = |e: StorageError| Reply::new(e.reply_code(), e.to_string());
        let mut announce = None;
        let whole = Section {
            file_offset: 0,
            length: None,
        };
        let what = match cmd {
            Command::Retr(p) => What::send("RETR", p, whole),
            Command::Eret(Eret::Partial {
                offset,
                length,
                path,
            }) => What::send(
                "ERET",
                path,
                self.retrieve_section("P", &format!("{offset} {length}"))?,
            ),
            Command::Eret(Eret::Module { name, params, path }) => {
                What::send("ERET", path, self.retrieve_section(&name, &params)?)
            }
            Command::Stor(p) => What::receive("STOR", p, 0).truncating(),
            Command::Esto(Esto::Adjusted { offset, path }) => {
                What::receive("ESTO", path, self.store_base("A", &offset.to_string())?)
            }
            Command::Esto(Esto::Module { name, params, path }) => {
                What::receive("ESTO", path, self.store_base(&name, &params)?)
            }
            Command::Appe(p) => {
                let vp = self.resolve(&p).map_err(storage_err)?;
                let size = match storage.stat(&vp) {
                    Ok(m) => m.size,
                    Err(StorageError::NotFound(_)) => 0,
                    Err(e) => return Err(storage_err(e)),
                };
                What::receive("APPE", p, size)
            }
            Command::Stou(p) => {
                let base = p.unwrap_or_else(|| "ferry".into());
                let name = format!("{base}.{:016x}", rand::random::<u64>());
                announce = Some(format!("FILE: {name}"));
                What {
                    create_new: true,
                    ..What::receive("STOU", name, 0).truncating()
                }
            }
            Command::List(p) => self.listing("LIST", ListKind::List, p),
            Command::Nlst(p) => self.listing("NLST", ListKind::Nlst, p),
            Command::Mlsd(p) => self.listing("MLSD", ListKind::Mlsd, p),
            other => {
                return Err(Reply::new(
                    502,
                    format!("{} is not a transfer command.", other.verb()),
                ))
            }
        };
        let What {
            verb,
            direction,
            source,
            path,
            section,
            truncate,
            create_new,
        } = what;
        if direction == Direction::Receive && read_only {
            return Err(refuse_write());
        }
        let channel = self.channel.clone().ok_or_else(|| {
            Reply::new(
                425,
                "Can't open data connection: send PASV, EPSV, SPAS, PORT, EPRT or SPOR first.",
            )
        })?;
        let path: VirtualPath = self.resolve(&path).map_err(storage_err)?;
        let is_listing = matches!(source, TransferSource::Listing { .. });
        let markers = match direction {
            Direction::Receive if self.mode == TransferMode::Extended => MarkerIntervals {
                restart_ms: nonzero_ms(self.restart_interval_s),
                perf_ms: nonzero_ms(self.perf_interval_s),
            },
            Direction::Send if !is_listing => MarkerIntervals {
                restart_ms: None,
                perf_ms: self.retr_markers_s.and_then(nonzero_ms),
            },
            _ => MarkerIntervals::default(),
        };
        let id = self
            .ctx
            .next_transfer
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let desc = TransferDescription {
            id,
            direction,
            source,
            path,
            mode: self.mode,
            ascii: self.transfer_type == TransferType::Ascii && !is_listing,
            section,
            restart: if is_listing { RangeSet::new() } else { restart },
            truncate,
            create_new,
            parallelism: self.parallelism,
            block_size: self.block_size.or(self.ctx.config.block_size),
            tuning: self.tuning,
            channel,
            stack: self.net_stack.clone(),
            disk_stack: self.disk_stack.clone(),
            security: ChannelSecurity {
                dcau: self.dcau.clone(),
                prot: self.prot,
            },
            markers,
            stripe: StripeInfo::default(),
            layout: self.layout,
            idle_timeout_ms: self.ctx.config.data_idle_timeout.saturating_mul(1000),
        };
        Ok(Planned {
            desc,
            verb,
            announce,
        })
    }

    fn listing(&self, verb: &'static str, kind: ListKind, p: Option<String>) -> What {
        What {
            source: TransferSource::Listing {
                kind,
                facts: self.mlst_facts.clone(),
            },
            ..What::send(
                verb,
                p.unwrap_or_else(|| ".".into()),
                Section {
                    file_offset: 0,
                    length: None,
                },
            )
        }
    }

    fn retrieve_section(&self, module: &str, params: &str) -> Result<Section, Reply> {
        let s = self
            .ctx
            .modules
            .plan_retrieve(module, params)
            .map_err(module_reply)?;
        Ok(Section {
            file_offset: s.file_offset,
            length: s.length,
        })
    }

    fn store_base(&self, module: &str, params: &str) -> Result<u64, Reply> {
        let p = self
            .ctx
            .modules
            .plan_store(module, params)
            .map_err(module_reply)?;
        Ok(p.file_base)
    }

    async fn run_planned(&mut self, planned: Planned, reader: &mut ControlReader) -> Io {
        let Planned {
            desc,
            verb,
            announce,
        } = planned;
        let started = Instant::now();
        let Session { login, wr, .. } = self;
        let Some(login) = login.as_mut() else {
            return Ok(());
        };
        let preliminary = match (announce, login.dtp.will_reuse(&desc)) {
            (Some(a), _) => Reply::new(150, a),
            (None, true) => {
                Reply::new(125, "Beginning transfer; reusing existing data connection.")
            }
            (None, false) => Reply::new(150, "Beginning transfer."),
        };
        let mut sink = ControlSink {
            wr,
            reader,
            preliminary: Some(preliminary),
            stopped: None,
        };
        let relayed = relay(&mut *login.dtp, &desc, &mut sink).await?;
        let result = match relayed {
            Relayed::Finished(r) => r,
            Relayed::Stopped => Err(DtpError::Connection(
                sink.stopped.unwrap_or("aborted by client").into(),
            )),
        };
        if result.is_ok() {
            // A mover that finished without saying it began still gets its 150 first.
            sink.begin().await?;
        }
        let aborted = sink.stopped.is_some();
        let elapsed = started.elapsed();
        let moved = login.dtp.bytes_moved();
        let note = login.dtp.note();
        let (code, text, bytes, streams) = match &result {
            Ok(o) => (226, format!("Transfer Complete.{note}"), o.bytes, o.streams),
            Err(e) => (e.reply_code(), e.to_string(), moved, 0),
        };
        self.log_transfer(
            verb,
            &desc,
            bytes,
            streams,
            elapsed.as_secs_f64(),
            if result.is_ok() { "ok" } else { &text },
        );
        if aborted {
            if let Some(login) = self.login.as_mut() {
                login.dtp.forget_cache();
            }
            self.reply(426, "Transfer aborted.").await?;
            return self.reply(226, "Abort successful.").await;
        }
        self.reply(code, text).await
    }

    fn log_transfer(
        &self,
        verb: &str,
        desc: &TransferDescription,
        bytes: u64,
        streams: u32,
        secs: f64,
        result: &str,
    ) {
        tracing::info!(
            peer = %self.peer, user = self.user_name(), verb, path = %desc.path, bytes, streams,
            secs, result, "transfer"
        );
        if let Some(log) = &self.ctx.translog {
            log.write(&TransferRecord {
                time: SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0),
                user: self.user_name(),
                peer: self.peer.to_string(),
                command: verb,
                path: desc.path.as_str(),
                bytes,
                streams,
                mode: if desc.mode == TransferMode::Extended {
                    "E"
                } else {
                    "S"
                },
                duration_s: secs,
                result,
            });
        }
    }
}

/// The PI's end of a relayed transfer: events become the preliminary reply and 111/112
/// markers; while the data moves the control channel is read, ABOR and a lost client stop the
/// transfer, STAT answers, and other commands wait their turn (pipelining).
struct ControlSink<'a> {
    wr: &'a mut super::ControlWriter,
    reader: &'a mut ControlReader,
    /// 150 or 125, until sent.
    preliminary: Option<Reply>,
    /// Why the control channel stopped the transfer.
    stopped: Option<&'static str>,
}

impl ControlSink<'_> {
    /// Sends the preliminary reply unless it went already.
    async fn begin(&mut self) -> Io {
        match self.preliminary.take() {
            Some(r) => self.wr.write_all(&r.to_bytes()).await,
            None => Ok(()),
        }
    }

    fn stop(&mut self, why: &'static str) -> Watch {
        self.stopped = Some(why);
        Watch::Stop
    }
}

impl RelaySink for ControlSink<'_> {
    type Error = std::io::Error;

    async fn event(&mut self, ev: DtpEvent) -> Io {
        // Nothing reaches the client before the preliminary reply, markers included.
        self.begin().await?;
        match marker_reply(&ev) {
            Some(r) => self.wr.write_all(&r.to_bytes()).await,
            None => Ok(()),
        }
    }

    async fn watch(&mut self) -> std::io::Result<Watch> {
        if self.reader.eof {
            return std::future::pending().await;
        }
        if !matches!(self.reader.fill().await, Ok(true)) {
            // The client went away: stop moving data for it.
            return Ok(self.stop("control connection closed"));
        }
        while let Some(ev) = self.reader.next_from_wire() {
            if let LineEvent::Line(l) = &ev {
                match Command::parse(&super::strip_telnet(l)) {
                    Ok(Command::Abor) => return Ok(self.stop("aborted by client")),
                    Ok(Command::Stat(None)) => {
                        let r = Reply::new(213, "Status: transfer in progress.");
                        self.wr.write_all(&r.to_bytes()).await?;
                        continue;
                    }
                    _ => {}
                }
            }
            if !queue_line(self.reader, ev) {
                return Ok(self.stop("too many commands queued during the transfer"));
            }
        }
        Ok(Watch::Continue)
    }
}

fn nonzero_ms(s: u32) -> Option<u64> {
    (s > 0).then(|| u64::from(s) * 1000)
}

fn module_reply(e: ferry_storage::modules::ModuleError) -> Reply {
    match e {
        ferry_storage::modules::ModuleError::Unknown(_) => Reply::new(504, e.to_string()),
        _ => Reply::new(501, e.to_string()),
    }
}

/// What a transfer command asks for, before it becomes a transfer description.
struct What {
    verb: &'static str,
    direction: Direction,
    source: TransferSource,
    path: String,
    section: Section,
    /// Receiving: truncate the file first (STOR, STOU).
    truncate: bool,
    /// Receiving: fail if the file exists (STOU).
    create_new: bool,
}

impl What {
    /// Sends a file's `section`.
    fn send(verb: &'static str, path: String, section: Section) -> What {
        What {
            verb,
            direction: Direction::Send,
            source: TransferSource::File,
            path,
            section,
            truncate: false,
            create_new: false,
        }
    }

    /// Receives into a file, wire offset 0 at `file_offset`.
    fn receive(verb: &'static str, path: String, file_offset: u64) -> What {
        What {
            direction: Direction::Receive,
            ..What::send(
                verb,
                path,
                Section {
                    file_offset,
                    length: None,
                },
            )
        }
    }

    fn truncating(self) -> What {
        What {
            truncate: true,
            ..self
        }
    }
}
