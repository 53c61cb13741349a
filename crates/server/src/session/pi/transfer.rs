//! Transfer commands: the PI turns RETR, STOR, ERET, ESTO, APPE, STOU and the listings into a
//! transfer description from the session's settings, and words what the mover reports: the
//! preliminary reply only once the transfer has begun (so a file that cannot be opened gets a
//! single 5xx), markers, and the final reply.

use ferry_dtp::{
    marker_reply, ChannelSecurity, Direction, DtpError, DtpEvent, ListKind, MarkerIntervals,
    Section, StripeInfo, TransferDescription, TransferOutcome, TransferSource,
};
use ferry_proto::command::{Eret, Esto, Restart, TransferMode, TransferType};
use ferry_proto::{Command, RangeSet, Reply};
use ferry_storage::{StorageError, VirtualPath};

use super::files::{Answer, Then};
use super::{Interrupt, LoginState, Pending, Pi, Request};

/// A transfer for the driver to run.
#[derive(Debug)]
pub(crate) struct TransferRun {
    /// What the mover runs (`id` 0: the driver numbers transfers).
    pub(crate) desc: TransferDescription,
    /// The command, for the transfer log.
    pub(crate) verb: &'static str,
}

/// The transfer under way.
#[derive(Debug)]
pub(super) struct Running {
    /// Text of the 150 reply when it must name a file (STOU).
    announce: Option<String>,
    /// The mover reuses a cached data channel: 125 rather than 150.
    reuse: bool,
    /// The preliminary reply is out.
    begun: bool,
}

impl Pi {
    pub(super) fn cmd_transfer(&mut self, cmd: Command) {
        let Command::Appe(path) = &cmd else {
            return self.start_transfer(cmd, None);
        };
        // An append starts where the file ends: ask storage first.
        let vp = match self.resolve(path) {
            Ok(vp) => vp,
            Err(e) => {
                self.settings.restart = None;
                return self.storage_error(&e);
            }
        };
        self.storage(Then::Appe(cmd), move |s| match s.stat(&vp) {
            Ok(m) => Ok(Answer::Size(m.size)),
            Err(StorageError::NotFound(_)) => Ok(Answer::Size(0)),
            Err(e) => Err(e),
        });
    }

    /// Plans `cmd` (`appe_size`: where an APPE starts) and asks the driver to run it.
    pub(super) fn start_transfer(&mut self, cmd: Command, appe_size: Option<u64>) {
        let planned = self.plan(cmd, appe_size);
        self.settings.restart = None;
        match planned {
            Err(reply) => self.send(reply),
            Ok((run, announce)) => {
                self.settings.allo = None;
                self.pending = Some(Pending::Transfer(Running {
                    announce,
                    reuse: false,
                    begun: false,
                }));
                self.request(Request::Transfer(Box::new(run)));
            }
        }
    }

    /// The mover will (`true`) reuse a cached data channel for this transfer.
    pub(crate) fn transfer_started(&mut self, reuse: bool) {
        if let Some(Pending::Transfer(r)) = &mut self.pending {
            r.reuse = reuse;
        }
    }

    /// One event of the running transfer: nothing reaches the client before the preliminary
    /// reply, markers included.
    pub(crate) fn transfer_event(&mut self, ev: &DtpEvent) {
        self.begin();
        if let Some(r) = marker_reply(ev) {
            self.send(r);
        }
    }

    /// A line that arrived while the transfer runs.
    pub(crate) fn during_transfer(&mut self, line: &[u8]) -> Interrupt {
        match Command::parse(line) {
            Ok(Command::Abor) => Interrupt::Abort,
            Ok(Command::Stat(None)) => {
                self.reply(213, "Status: transfer in progress.");
                Interrupt::Answered
            }
            _ => Interrupt::Later,
        }
    }

    /// The transfer ended: with the mover's result (and its note for the 226), or stopped by
    /// the client (`aborted`).
    pub(crate) fn transfer_done(
        &mut self,
        result: &Result<TransferOutcome, DtpError>,
        aborted: bool,
        note: &str,
    ) {
        if !matches!(self.pending, Some(Pending::Transfer(_))) {
            return;
        }
        self.last_tcp = result.as_ref().ok().and_then(|o| o.tcp.clone());
        if result.is_ok() {
            // A mover that finished without saying it began still gets its 150 first.
            self.begin();
        }
        self.pending = None;
        if aborted {
            self.request(Request::ForgetCache);
            self.reply(426, "Transfer aborted.");
            return self.reply(226, "Abort successful.");
        }
        match result {
            Ok(_) => self.reply(226, format!("Transfer Complete.{note}")),
            // A forwarder's report names each failed hop on a line of its own.
            Err(e) => self.send(Reply::from_text(e.reply_code(), &e.to_string())),
        }
    }

    /// Sends the preliminary reply unless it went already.
    fn begin(&mut self) {
        let Some(Pending::Transfer(r)) = &mut self.pending else {
            return;
        };
        if r.begun {
            return;
        }
        r.begun = true;
        let reply = match (r.announce.take(), r.reuse) {
            (Some(a), _) => Reply::new(150, a),
            (None, true) => {
                Reply::new(125, "Beginning transfer; reusing existing data connection.")
            }
            (None, false) => Reply::new(150, "Beginning transfer."),
        };
        self.send(reply);
    }

    /// The description `cmd` asks for, and the text of a 150 that must name the file (STOU).
    pub(super) fn plan(
        &self,
        cmd: Command,
        appe_size: Option<u64>,
    ) -> Result<(TransferRun, Option<String>), Reply> {
        let LoginState::In { read_only, .. } = self.login else {
            return Err(Reply::new(530, "Please login with USER and PASS."));
        };
        let s = &self.settings;
        let restart = match &s.restart {
            None => RangeSet::new(),
            Some(Restart::Stream(0)) => RangeSet::new(),
            Some(Restart::Stream(n)) => RangeSet::from_range(0, *n),
            Some(Restart::Ranges(r)) => r.clone(),
        };
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
            Command::Appe(p) => What::receive("APPE", p, appe_size.unwrap_or(0)),
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
            return Err(Reply::new(
                550,
                "Permission denied: this login is read-only.",
            ));
        }
        let s = &self.settings;
        let channel = s.channel.clone().ok_or_else(|| {
            Reply::new(
                425,
                "Can't open data connection: send PASV, EPSV, SPAS, PORT, EPRT or SPOR first.",
            )
        })?;
        let path: VirtualPath = self.resolve(&path).map_err(storage_err)?;
        let is_listing = matches!(source, TransferSource::Listing { .. });
        let markers = match direction {
            Direction::Receive if s.mode == TransferMode::Extended => MarkerIntervals {
                restart_ms: nonzero_ms(s.restart_interval_s),
                perf_ms: nonzero_ms(s.perf_interval_s),
            },
            Direction::Send if !is_listing => MarkerIntervals {
                restart_ms: None,
                perf_ms: s.retr_markers_s.and_then(nonzero_ms),
            },
            _ => MarkerIntervals::default(),
        };
        let config = &self.ctx.config;
        let desc = TransferDescription {
            id: 0,
            direction,
            source,
            path,
            mode: s.mode,
            ascii: s.transfer_type == TransferType::Ascii && !is_listing,
            section,
            restart: if is_listing { RangeSet::new() } else { restart },
            truncate,
            create_new,
            parallelism: s.parallelism,
            block_size: s.block_size.or(config.block_size),
            tuning: self.data_tuning(),
            channel,
            stack: s.net_stack.clone(),
            disk_stack: s.disk_stack.clone(),
            security: ChannelSecurity {
                dcau: s.dcau.clone(),
                prot: s.prot,
            },
            markers,
            stripe: StripeInfo::default(),
            layout: s.layout,
            idle_timeout_ms: config.data_idle_timeout.saturating_mul(1000),
            checksums: config.transfer_checksum_algorithms(),
        };
        Ok((TransferRun { desc, verb }, announce))
    }

    fn listing(&self, verb: &'static str, kind: ListKind, p: Option<String>) -> What {
        What {
            source: TransferSource::Listing {
                kind,
                facts: self.settings.mlst_facts.clone(),
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
