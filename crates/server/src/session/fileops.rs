//! File management on the control channel: SIZE, MDTM, MLST, STAT, CWD, MKD, DELE, RNFR/RNTO,
//! CKSM and the SITE commands. Each runs the blocking storage call off the async workers.

use std::sync::Arc;

use ferry_dtp::perm_letters;
use ferry_proto::command::Command;
use ferry_proto::site::SiteCommand;
use ferry_proto::Reply;
use ferry_storage::listing::{format_mdtm, list_line, mlsx_facts, FactSelection};
use ferry_storage::{ChecksumAlgorithm, DirEntry, FileKind, Storage, StorageError, VirtualPath};

use super::stacks::StackKind;
use super::Session;

type Io = std::io::Result<()>;

impl Session {
    pub(crate) async fn cmd_file(&mut self, cmd: Command) -> Io {
        let reply = match self.file_reply(cmd).await {
            Ok(r) => r,
            Err(e) => Reply::new(e.reply_code(), e.to_string()),
        };
        self.send(&reply).await
    }

    async fn file_reply(&mut self, cmd: Command) -> Result<Reply, StorageError> {
        let Some(login) = self.login.as_ref() else {
            return Ok(Reply::new(530, "Please login with USER and PASS."));
        };
        let storage = Arc::clone(&login.storage);
        let read_only = login.read_only;
        let denied = |p: &VirtualPath| Err(StorageError::PermissionDenied(p.to_string()));
        Ok(match cmd {
            Command::Pwd => Reply::new(
                257,
                format!(
                    "\"{}\" is current directory.",
                    self.cwd.as_str().replace('"', "\"\"")
                ),
            ),
            Command::Cwd(p) => {
                let vp = self.resolve(&p)?;
                self.cwd = blocking(&storage, move |s| {
                    let m = s.stat(&vp)?;
                    if m.kind != FileKind::Dir {
                        return Err(StorageError::NotADirectory(vp.to_string()));
                    }
                    Ok(vp)
                })
                .await?;
                Reply::new(250, "CWD command successful.")
            }
            Command::Cdup => {
                self.cwd = self.cwd.parent().unwrap_or_else(VirtualPath::root);
                Reply::new(250, "CDUP command successful.")
            }
            Command::Size(p) => {
                let vp = self.resolve(&p)?;
                let m = blocking(&storage, move |s| s.stat(&vp)).await?;
                Reply::new(213, m.size.to_string())
            }
            Command::Mdtm(p) => {
                let vp = self.resolve(&p)?;
                let m = blocking(&storage, move |s| s.stat(&vp)).await?;
                Reply::new(213, format_mdtm(m.mtime))
            }
            Command::Mfmt { mtime, path } => {
                let vp = self.resolve(&path)?;
                if read_only {
                    return denied(&vp);
                }
                blocking(&storage, move |s| s.set_mtime(&vp, mtime)).await?;
                Reply::new(250, "OK.")
            }
            Command::Mlst(p) => {
                let shown = p.clone().unwrap_or_else(|| self.cwd.to_string());
                let vp = self.resolve(p.as_deref().unwrap_or("."))?;
                let sel = FactSelection {
                    facts: self.mlst_facts.clone(),
                };
                let m = blocking(&storage, move |s| s.stat(&vp)).await?;
                let kind = (m.kind == FileKind::Dir).then_some("dir");
                let facts = mlsx_facts(&m, kind, perm_letters(m.kind, read_only), &sel);
                Reply::multi(
                    250,
                    vec![
                        format!("status of {shown}"),
                        format!(" {facts}{shown}"),
                        "End.".into(),
                    ],
                )
            }
            Command::Stat(Some(p)) => {
                let vp = self.resolve(&p)?;
                let lines = blocking(&storage, move |s| {
                    let m = s.stat(&vp)?;
                    let now = unix_now();
                    if m.kind == FileKind::Dir {
                        Ok(s.list(&vp)?
                            .iter()
                            .map(|e| list_line(e, now))
                            .collect::<Vec<_>>())
                    } else {
                        let name = vp.file_name().unwrap_or("/").to_string();
                        Ok(vec![list_line(&DirEntry { name, metadata: m }, now)])
                    }
                })
                .await?;
                let mut out = vec![format!("status of {p}")];
                out.extend(lines.into_iter().map(|l| format!(" {l}")));
                out.push("End.".into());
                Reply::multi(213, out)
            }
            Command::Mkd(p) => {
                let vp = self.resolve(&p)?;
                if read_only {
                    return denied(&vp);
                }
                let shown = vp.to_string();
                blocking(&storage, move |s| s.mkdir(&vp)).await?;
                Reply::new(
                    257,
                    format!(
                        "Directory \"{}\" created successfully.",
                        shown.replace('"', "\"\"")
                    ),
                )
            }
            Command::Rmd(p) => {
                let vp = self.resolve(&p)?;
                if read_only {
                    return denied(&vp);
                }
                blocking(&storage, move |s| s.rmdir(&vp)).await?;
                Reply::new(250, "OK.")
            }
            Command::Dele(p) => {
                let vp = self.resolve(&p)?;
                if read_only {
                    return denied(&vp);
                }
                blocking(&storage, move |s| {
                    if s.symlink_metadata(&vp)?.kind == FileKind::Dir {
                        return Err(StorageError::IsADirectory(vp.to_string()));
                    }
                    s.remove_file(&vp)
                })
                .await?;
                Reply::new(250, "OK.")
            }
            Command::Rnfr(p) => {
                let vp = self.resolve(&p)?;
                if read_only {
                    return denied(&vp);
                }
                let check = vp.clone();
                blocking(&storage, move |s| s.symlink_metadata(&check)).await?;
                self.rename_from = Some(vp);
                Reply::new(350, "OK. Send RNTO with destination name.")
            }
            Command::Rnto(p) => {
                let Some(from) = self.rename_from.take() else {
                    return Ok(Reply::new(503, "Send RNFR first."));
                };
                let to = self.resolve(&p)?;
                blocking(&storage, move |s| s.rename(&from, &to)).await?;
                Reply::new(250, "OK.")
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
                let sum = blocking(&storage, move |s| s.checksum(&vp, alg, offset, length)).await?;
                Reply::new(213, sum)
            }
            Command::Site(site) => return self.site(site, storage, read_only).await,
            other => Reply::new(502, format!("{} not implemented.", other.verb())),
        })
    }

    async fn site(
        &mut self,
        cmd: SiteCommand,
        storage: Arc<dyn Storage>,
        read_only: bool,
    ) -> Result<Reply, StorageError> {
        let write_guard = |p: &VirtualPath| -> Result<(), StorageError> {
            if read_only {
                Err(StorageError::PermissionDenied(p.to_string()))
            } else {
                Ok(())
            }
        };
        Ok(match cmd {
            SiteCommand::Help => super::text::site_help(),
            SiteCommand::Chmod { mode, path } => {
                let vp = self.resolve(&path)?;
                write_guard(&vp)?;
                blocking(&storage, move |s| s.chmod(&vp, mode)).await?;
                Reply::new(250, "OK.")
            }
            SiteCommand::Utime { mtime, path } => {
                let vp = self.resolve(&path)?;
                write_guard(&vp)?;
                blocking(&storage, move |s| s.set_mtime(&vp, mtime)).await?;
                Reply::new(250, "OK.")
            }
            SiteCommand::Symlink { target, link } => {
                let vp = self.resolve(&link)?;
                write_guard(&vp)?;
                blocking(&storage, move |s| s.symlink(&target, &vp)).await?;
                Reply::new(250, "OK.")
            }
            SiteCommand::SymlinkFrom(target) => {
                self.symlink_from = Some(target);
                Reply::new(350, "OK. Send SITE SYMLINKTO with symlink name.")
            }
            SiteCommand::SymlinkTo(link) => {
                let Some(target) = self.symlink_from.take() else {
                    return Ok(Reply::new(503, "Send SITE SYMLINKFROM first."));
                };
                let vp = self.resolve(&link)?;
                write_guard(&vp)?;
                blocking(&storage, move |s| s.symlink(&target, &vp)).await?;
                Reply::new(250, "OK.")
            }
            SiteCommand::Rdel(path) => {
                let vp = self.resolve(&path)?;
                write_guard(&vp)?;
                blocking(&storage, move |s| s.remove_tree(&vp)).await?;
                Reply::new(250, "OK.")
            }
            SiteCommand::BufSize(n) => {
                let n = n.clamp(4096, 1 << 30) as u32;
                self.tuning.send_buffer = Some(n);
                self.tuning.recv_buffer = Some(n);
                self.forget_cached_channel();
                Reply::new(200, "Site Command Successful.")
            }
            SiteCommand::RetrBufSize(n) => {
                self.tuning.send_buffer = Some(n.clamp(4096, 1 << 30) as u32);
                self.forget_cached_channel();
                Reply::new(200, "Site Command Successful.")
            }
            SiteCommand::StorBufSize(n) => {
                self.tuning.recv_buffer = Some(n.clamp(4096, 1 << 30) as u32);
                self.forget_cached_channel();
                Reply::new(200, "Site Command Successful.")
            }
            SiteCommand::BlockSize(n) => match n {
                0 => {
                    self.block_size = None;
                    Reply::new(200, "Block size is the server's own again.")
                }
                MIN_CLIENT_BLOCK..=MAX_CLIENT_BLOCK => {
                    self.block_size = u32::try_from(n).ok();
                    Reply::new(200, format!("Block size set to {n}."))
                }
                _ => Reply::new(
                    501,
                    format!(
                        "Block size must be 0 (the server's own) or {MIN_CLIENT_BLOCK} to \
                         {MAX_CLIENT_BLOCK} bytes, not {n}."
                    ),
                ),
            },
            SiteCommand::ClientInfo(info) => {
                tracing::info!(peer = %self.peer, "client info: {info}");
                Reply::new(250, "OK.")
            }
            SiteCommand::TaskId(id) => {
                tracing::info!(peer = %self.peer, "task id: {id}");
                Reply::new(250, "OK.")
            }
            SiteCommand::Whoami => Reply::new(200, self.user_name().to_string()),
            SiteCommand::Version => Reply::new(200, format!("ferry {}", crate::VERSION)),
            SiteCommand::SetNetStack(arg) => {
                let (stack, reply) = self.choose_stack(&arg, StackKind::Net);
                self.net_stack = stack;
                self.forget_cached_channel();
                reply
            }
            SiteCommand::SetDiskStack(arg) => {
                let (stack, reply) = self.choose_stack(&arg, StackKind::Disk);
                self.disk_stack = stack;
                reply
            }
            SiteCommand::Other { name, .. } => {
                Reply::new(500, format!("Unknown SITE command {name}."))
            }
            _ => Reply::new(500, "Unknown SITE command."),
        })
    }
}

/// The block sizes a client may ask for with `SITE BLOCKSIZE`: the smallest the configuration
/// accepts, and 64 MiB (a block costs no memory: it is sent in buffer-sized pieces).
const MIN_CLIENT_BLOCK: u64 = 4096;
const MAX_CLIENT_BLOCK: u64 = 64 << 20;

/// Runs a storage call on the blocking pool.
async fn blocking<T: Send + 'static>(
    storage: &Arc<dyn Storage>,
    f: impl FnOnce(&dyn Storage) -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    let s = Arc::clone(storage);
    match tokio::task::spawn_blocking(move || f(&*s)).await {
        Ok(r) => r,
        Err(e) => Err(StorageError::Io {
            path: String::new(),
            source: std::io::Error::other(e.to_string()),
        }),
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
