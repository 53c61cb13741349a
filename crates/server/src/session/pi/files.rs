//! File management: SIZE, MDTM, MFMT, MLST, STAT path, CWD, CDUP, PWD, MKD, RMD, DELE,
//! RNFR/RNTO, CKSM and the SITE commands. The PI resolves paths and checks permissions; the
//! storage call itself is a [`StorageCall`] the driver runs off the async workers, and its
//! [`Answer`] comes back through [`Pi::storage_done`] to be worded as the reply.

use ferry_dtp::perm_letters;
use ferry_proto::site::SiteCommand;
use ferry_proto::stack::StackSpec;
use ferry_proto::{Command, Reply};
use ferry_storage::listing::{format_mdtm, list_line, mlsx_facts, FactSelection};
use ferry_storage::{
    ChecksumAlgorithm, DirEntry, FileKind, Metadata, Storage, StorageError, VirtualPath,
};

use super::stacks::StackKind;
use super::{clamp_buffer, LoginState, Pending, Pi, Request};

/// A call on the session's storage, made by the driver on a blocking thread, unless the
/// storage has the answer at hand.
pub(crate) struct StorageCall {
    /// Asked first, on the session's task: what the storage has without reading a file (see
    /// [`Storage::checksum_at_hand`]).
    at_hand: Option<AtHand>,
    call: Call,
}

type AtHand = Box<dyn FnOnce(&dyn Storage) -> Option<Answer> + Send + 'static>;
type Call = Box<dyn FnOnce(&dyn Storage) -> Result<Answer, StorageError> + Send + 'static>;

impl StorageCall {
    /// The answer, if the storage has it at hand (asked once); else [`StorageCall::run`] it.
    pub(crate) fn at_hand(&mut self, s: &dyn Storage) -> Option<Answer> {
        self.at_hand.take().and_then(|ask| ask(s))
    }

    /// Makes the call (it may block on the storage).
    pub(crate) fn run(self, s: &dyn Storage) -> Result<Answer, StorageError> {
        (self.call)(s)
    }
}

/// What a storage call found.
#[derive(Debug)]
pub(crate) enum Answer {
    /// It was done.
    Done,
    /// An entry's metadata.
    Meta(Metadata),
    /// Listing lines.
    Lines(Vec<String>),
    /// A checksum.
    Sum(String),
    /// A file's size, 0 when it does not exist (where APPE starts).
    Size(u64),
}

/// How the PI words a storage call's answer.
#[derive(Debug)]
pub(super) enum Then {
    Cwd(VirtualPath),
    Size,
    Mdtm,
    Ok250,
    Mkd(String),
    Mlst {
        shown: String,
        read_only: bool,
    },
    Stat(String),
    Rnfr(VirtualPath),
    Cksm,
    /// APPE: the file's size is where the upload starts.
    Appe(Command),
}

/// The block sizes a client may ask for with `SITE BLOCKSIZE`: the smallest the configuration
/// accepts, and 64 MiB (a block costs no memory: it is sent in buffer-sized pieces).
const MIN_CLIENT_BLOCK: u64 = 4096;
const MAX_CLIENT_BLOCK: u64 = 64 << 20;

impl Pi {
    fn read_only(&self) -> bool {
        !matches!(
            self.login,
            LoginState::In {
                read_only: false,
                ..
            }
        )
    }

    /// Asks the driver for a storage call, answered by [`Pi::storage_done`].
    pub(super) fn storage(
        &mut self,
        then: Then,
        call: impl FnOnce(&dyn Storage) -> Result<Answer, StorageError> + Send + 'static,
    ) {
        self.pending = Some(Pending::Storage(then));
        self.request(Request::Storage(StorageCall {
            at_hand: None,
            call: Box::new(call),
        }));
    }

    /// As [`Pi::storage`], asking `at_hand` first.
    fn storage_or_at_hand(
        &mut self,
        then: Then,
        at_hand: impl FnOnce(&dyn Storage) -> Option<Answer> + Send + 'static,
        call: impl FnOnce(&dyn Storage) -> Result<Answer, StorageError> + Send + 'static,
    ) {
        self.pending = Some(Pending::Storage(then));
        self.request(Request::Storage(StorageCall {
            at_hand: Some(Box::new(at_hand)),
            call: Box::new(call),
        }));
    }

    pub(super) fn cmd_file(&mut self, cmd: Command) {
        if let Err(e) = self.try_file(cmd) {
            self.storage_error(&e);
        }
    }

    fn try_file(&mut self, cmd: Command) -> Result<(), StorageError> {
        let read_only = self.read_only();
        let writable = |vp: &VirtualPath| writable(read_only, vp);
        match cmd {
            Command::Pwd => {
                let cwd = self.settings.cwd.as_str().replace('"', "\"\"");
                self.reply(257, format!("\"{cwd}\" is current directory."));
            }
            Command::Cwd(p) => {
                let vp = self.resolve(&p)?;
                let check = vp.clone();
                self.storage(Then::Cwd(vp), move |s| {
                    if s.stat(&check)?.kind != FileKind::Dir {
                        return Err(StorageError::NotADirectory(check.to_string()));
                    }
                    Ok(Answer::Done)
                });
            }
            Command::Cdup => {
                self.settings.cwd = self.settings.cwd.parent().unwrap_or_else(VirtualPath::root);
                self.reply(250, "CDUP command successful.");
            }
            Command::Size(p) => {
                let vp = self.resolve(&p)?;
                self.storage(Then::Size, move |s| s.stat(&vp).map(Answer::Meta));
            }
            Command::Mdtm(p) => {
                let vp = self.resolve(&p)?;
                self.storage(Then::Mdtm, move |s| s.stat(&vp).map(Answer::Meta));
            }
            Command::Mfmt { mtime, path } => {
                let vp = self.resolve(&path)?;
                writable(&vp)?;
                self.storage(Then::Ok250, move |s| {
                    s.set_mtime(&vp, mtime).map(|_| Answer::Done)
                });
            }
            Command::Mlst(p) => {
                let shown = p.clone().unwrap_or_else(|| self.settings.cwd.to_string());
                let vp = self.resolve(p.as_deref().unwrap_or("."))?;
                self.storage(Then::Mlst { shown, read_only }, move |s| {
                    s.stat(&vp).map(Answer::Meta)
                });
            }
            Command::Stat(Some(p)) => {
                let vp = self.resolve(&p)?;
                self.storage(Then::Stat(p), move |s| {
                    let m = s.stat(&vp)?;
                    let now = ferry_proto::clock::unix_now();
                    let lines = if m.kind == FileKind::Dir {
                        s.list(&vp)?.iter().map(|e| list_line(e, now)).collect()
                    } else {
                        let name = vp.file_name().unwrap_or("/").to_string();
                        vec![list_line(&DirEntry { name, metadata: m }, now)]
                    };
                    Ok(Answer::Lines(lines))
                });
            }
            Command::Mkd(p) => {
                let vp = self.resolve(&p)?;
                writable(&vp)?;
                self.storage(Then::Mkd(vp.to_string()), move |s| {
                    s.mkdir(&vp).map(|_| Answer::Done)
                });
            }
            Command::Rmd(p) => {
                let vp = self.resolve(&p)?;
                writable(&vp)?;
                self.storage(Then::Ok250, move |s| s.rmdir(&vp).map(|_| Answer::Done));
            }
            Command::Dele(p) => {
                let vp = self.resolve(&p)?;
                writable(&vp)?;
                self.storage(Then::Ok250, move |s| {
                    if s.symlink_metadata(&vp)?.kind == FileKind::Dir {
                        return Err(StorageError::IsADirectory(vp.to_string()));
                    }
                    s.remove_file(&vp).map(|_| Answer::Done)
                });
            }
            Command::Rnfr(p) => {
                let vp = self.resolve(&p)?;
                writable(&vp)?;
                let check = vp.clone();
                self.storage(Then::Rnfr(vp), move |s| {
                    s.symlink_metadata(&check).map(|_| Answer::Done)
                });
            }
            Command::Rnto(p) => {
                let Some(from) = self.rename_from.take() else {
                    self.reply(503, "Send RNFR first.");
                    return Ok(());
                };
                let to = self.resolve(&p)?;
                self.storage(Then::Ok250, move |s| {
                    s.rename(&from, &to).map(|_| Answer::Done)
                });
            }
            Command::Cksm {
                algorithm,
                offset,
                length,
                path,
            } => {
                let Some(alg) = ChecksumAlgorithm::from_name(&algorithm) else {
                    return Err(StorageError::UnsupportedAlgorithm(algorithm));
                };
                let vp = self.resolve(&path)?;
                if offset == 0 && length.is_none() {
                    // A verified copy's CKSM, after the transfer that summed the file: the
                    // value is in memory, and the blocking pool's hand-off would cost more.
                    let whole = vp.clone();
                    self.storage_or_at_hand(
                        Then::Cksm,
                        move |s| s.checksum_at_hand(&whole, alg).map(Answer::Sum),
                        move |s| s.checksum(&vp, alg, offset, length).map(Answer::Sum),
                    );
                } else {
                    self.storage(Then::Cksm, move |s| {
                        s.checksum(&vp, alg, offset, length).map(Answer::Sum)
                    });
                }
            }
            other => self.reply(502, format!("{} not implemented.", other.verb())),
        }
        Ok(())
    }

    /// The driver's answer to [`Request::Storage`].
    /// The answer to [`Request::Status`]: `SITE STATUS`'s reply, one figure a line.
    pub(crate) fn status_done(&mut self, s: super::ServerStatus) {
        self.send(Reply::multi(
            200,
            vec![
                format!("ferry {} status:", crate::VERSION),
                format!(" uptime {} s", s.uptime_s),
                format!(" sessions {} of {}", s.sessions, s.sessions_max),
                format!(" transfers {} running", s.transfers_running),
                format!(" transfers {} started", s.transfers_started),
                "End.".into(),
            ],
        ));
    }

    pub(crate) fn storage_done(&mut self, result: Result<Answer, StorageError>) {
        let Some(Pending::Storage(then)) = self.pending.take() else {
            return;
        };
        let answer = match result {
            Ok(a) => a,
            Err(e) => {
                if matches!(then, Then::Appe(_)) {
                    self.settings.restart = None;
                }
                return self.storage_error(&e);
            }
        };
        match (then, answer) {
            (Then::Cwd(vp), _) => {
                self.settings.cwd = vp;
                self.reply(250, "CWD command successful.");
            }
            (Then::Size, Answer::Meta(m)) => self.reply(213, m.size.to_string()),
            (Then::Mdtm, Answer::Meta(m)) => self.reply(213, format_mdtm(m.mtime)),
            (Then::Mkd(shown), _) => self.reply(
                257,
                format!(
                    "Directory \"{}\" created successfully.",
                    shown.replace('"', "\"\"")
                ),
            ),
            (Then::Mlst { shown, read_only }, Answer::Meta(m)) => {
                let sel = FactSelection {
                    facts: self.settings.mlst_facts.clone(),
                };
                let kind = (m.kind == FileKind::Dir).then_some("dir");
                let facts = mlsx_facts(&m, kind, perm_letters(m.kind, read_only), &sel);
                self.send(Reply::multi(
                    250,
                    vec![
                        format!("status of {shown}"),
                        format!(" {facts}{shown}"),
                        "End.".into(),
                    ],
                ));
            }
            (Then::Stat(p), Answer::Lines(lines)) => {
                let mut out = vec![format!("status of {p}")];
                out.extend(lines.into_iter().map(|l| format!(" {l}")));
                out.push("End.".into());
                self.send(Reply::multi(213, out));
            }
            (Then::Rnfr(vp), _) => {
                self.rename_from = Some(vp);
                self.reply(350, "OK. Send RNTO with destination name.");
            }
            (Then::Cksm, Answer::Sum(sum)) => self.reply(213, sum),
            (Then::Appe(cmd), Answer::Size(n)) => self.start_transfer(cmd, Some(n)),
            (Then::Ok250, _) => self.reply(250, "OK."),
            (then, answer) => {
                tracing::error!(?then, ?answer, "storage answered the wrong question");
                self.reply(451, "Local error in processing.");
            }
        }
    }

    pub(super) fn cmd_site(&mut self, cmd: SiteCommand) {
        if let Err(e) = self.try_site(cmd) {
            self.storage_error(&e);
        }
    }

    fn try_site(&mut self, cmd: SiteCommand) -> Result<(), StorageError> {
        let read_only = self.read_only();
        let writable = |vp: &VirtualPath| writable(read_only, vp);
        let s = &mut self.settings;
        match cmd {
            SiteCommand::Help => self.send(super::super::text::site_help()),
            SiteCommand::Chmod { mode, path } => {
                let vp = self.resolve(&path)?;
                writable(&vp)?;
                self.storage(Then::Ok250, move |s| {
                    s.chmod(&vp, mode).map(|_| Answer::Done)
                });
            }
            SiteCommand::Utime { mtime, path } => {
                let vp = self.resolve(&path)?;
                writable(&vp)?;
                self.storage(Then::Ok250, move |s| {
                    s.set_mtime(&vp, mtime).map(|_| Answer::Done)
                });
            }
            SiteCommand::Symlink { target, link } => {
                let vp = self.resolve(&link)?;
                writable(&vp)?;
                self.storage(Then::Ok250, move |s| {
                    s.symlink(&target, &vp).map(|_| Answer::Done)
                });
            }
            SiteCommand::SymlinkFrom(target) => {
                self.symlink_from = Some(target);
                self.reply(350, "OK. Send SITE SYMLINKTO with symlink name.");
            }
            SiteCommand::SymlinkTo(link) => {
                let Some(target) = self.symlink_from.take() else {
                    self.reply(503, "Send SITE SYMLINKFROM first.");
                    return Ok(());
                };
                let vp = self.resolve(&link)?;
                writable(&vp)?;
                self.storage(Then::Ok250, move |s| {
                    s.symlink(&target, &vp).map(|_| Answer::Done)
                });
            }
            SiteCommand::Rdel(path) => {
                let vp = self.resolve(&path)?;
                writable(&vp)?;
                self.storage(Then::Ok250, move |s| {
                    s.remove_tree(&vp).map(|_| Answer::Done)
                });
            }
            SiteCommand::BufSize(n) => {
                let n = clamp_buffer(n);
                s.tuning.send_buffer = Some(n);
                s.tuning.recv_buffer = Some(n);
                self.forget_cached_channel();
                self.reply(200, "Site Command Successful.");
            }
            SiteCommand::RetrBufSize(n) => {
                s.tuning.send_buffer = Some(clamp_buffer(n));
                self.forget_cached_channel();
                self.reply(200, "Site Command Successful.");
            }
            SiteCommand::StorBufSize(n) => {
                s.tuning.recv_buffer = Some(clamp_buffer(n));
                self.forget_cached_channel();
                self.reply(200, "Site Command Successful.");
            }
            SiteCommand::BlockSize(n) => match n {
                0 => {
                    s.block_size = None;
                    self.reply(200, "Block size is the server's own again.");
                }
                MIN_CLIENT_BLOCK..=MAX_CLIENT_BLOCK => {
                    s.block_size = u32::try_from(n).ok();
                    self.reply(200, format!("Block size set to {n}."));
                }
                _ => self.reply(
                    501,
                    format!(
                        "Block size must be 0 (the server's own) or {MIN_CLIENT_BLOCK} to \
                         {MAX_CLIENT_BLOCK} bytes, not {n}."
                    ),
                ),
            },
            SiteCommand::ClientInfo(info) => {
                tracing::info!(peer = %self.peer, "client info: {info}");
                self.reply(250, "OK.");
            }
            SiteCommand::TaskId(id) => {
                tracing::info!(peer = %self.peer, "task id: {id}");
                self.task_id = Some(id);
                self.reply(250, "OK.");
            }
            SiteCommand::Whoami => {
                let name = self.user_name().to_string();
                self.reply(200, name);
            }
            SiteCommand::Version => self.reply(200, format!("ferry {}", crate::VERSION)),
            SiteCommand::Status => self.request(Request::Status),
            SiteCommand::TcpInfo => match &self.last_tcp {
                Some(t) => self.reply(200, t.to_facts()),
                None => self.reply(
                    550,
                    "No TCP figures: no MODE E transfer over TCP has finished in this session.",
                ),
            },
            SiteCommand::SetNetStack(arg) => {
                let (stack, reply) = self.choose_stack(&arg, StackKind::Net);
                self.settings.net_stack = stack;
                self.forget_cached_channel();
                self.send(reply);
            }
            SiteCommand::SetDiskStack(arg) => {
                let (stack, reply) = self.choose_stack(&arg, StackKind::Disk);
                if reply.is_success() && stack != StackSpec::default_disk() {
                    let security = ferry_dtp::ChannelSecurity {
                        dcau: self.settings.dcau.clone(),
                        prot: self.settings.prot,
                    };
                    self.request(Request::PrepareDiskStack(stack.clone(), security));
                }
                self.settings.disk_stack = stack;
                self.send(reply);
            }
            SiteCommand::Other { name, .. } => {
                self.reply(500, format!("Unknown SITE command {name}."))
            }
            _ => self.reply(500, "Unknown SITE command."),
        }
        Ok(())
    }
}

/// Refuses a change to `vp` on a read-only login.
fn writable(read_only: bool, vp: &VirtualPath) -> Result<(), StorageError> {
    if read_only {
        Err(StorageError::PermissionDenied(vp.to_string()))
    } else {
        Ok(())
    }
}
