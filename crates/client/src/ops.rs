//! Remote file management on a session: listings (MLSD/MLST, or LIST, SIZE, MDTM and CWD on
//! servers without them), MKD, DELE/RMD/RDEL, RNFR/RNTO, CKSM, SIZE.

use ferry_dtp::{ChannelSetup, Direction, TransferDescription};
use ferry_proto::command::TransferMode;
use ferry_proto::dirlist::{listed_name, parse_list_line, ListedKind, ListedName};
use ferry_proto::site::SiteCommand;
use ferry_proto::Command;
use ferry_storage::VirtualPath;
use tokio::sync::mpsc;

use crate::session::DataSetup;
use crate::session::RemoteSession;
use crate::ClientError;

/// Most bytes a listing may have.
const MAX_LISTING: usize = 256 << 20;

/// What a remote entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Link,
    /// Anything else (devices, pipes).
    Other,
}

/// One entry of a remote listing, from MLSx facts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RemoteEntry {
    /// Name (MLSD) or path (MLST).
    pub name: String,
    /// Kind.
    pub kind: EntryKind,
    /// Size in bytes, if given.
    pub size: Option<u64>,
    /// Modification time `YYYYMMDDHHMMSS` (UTC), if given.
    pub modify: Option<String>,
    /// Permission letters, if given.
    pub perm: Option<String>,
    /// UNIX mode, if given.
    pub mode: Option<String>,
}

/// Parses one MLSx line (`fact=v;fact=v; name`); `None` for `.`/`..` entries or garbage.
pub fn parse_mlsx_line(line: &str) -> Option<RemoteEntry> {
    let line = line.trim_end_matches(['\r', '\n']).trim_start_matches(' ');
    let (facts, name) = line.split_once("; ").or_else(|| line.split_once(' '))?;
    let mut e = RemoteEntry {
        name: name.to_string(),
        kind: EntryKind::Other,
        size: None,
        modify: None,
        perm: None,
        mode: None,
    };
    for fact in facts.split(';') {
        let Some((k, v)) = fact.split_once('=') else {
            continue;
        };
        match k.to_ascii_lowercase().as_str() {
            "type" => {
                e.kind = match v.to_ascii_lowercase().as_str() {
                    "file" => EntryKind::File,
                    "dir" => EntryKind::Dir,
                    "cdir" | "pdir" => return None,
                    "slink" | "os.unix=slink" => EntryKind::Link,
                    t if t.starts_with("os.unix=slink") => EntryKind::Link,
                    _ => EntryKind::Other,
                }
            }
            "size" => e.size = v.parse().ok(),
            "modify" => e.modify = Some(v.to_string()),
            "perm" => e.perm = Some(v.to_string()),
            "unix.mode" => e.mode = Some(v.to_string()),
            _ => {}
        }
    }
    Some(e)
}

/// A `LIST` line as a listing entry (no times: LIST's are local and may lack the year).
fn listed_entry(line: &str) -> Option<RemoteEntry> {
    let e = parse_list_line(line)?;
    Some(RemoteEntry {
        name: e.name,
        kind: match e.kind {
            ListedKind::File => EntryKind::File,
            ListedKind::Dir => EntryKind::Dir,
            ListedKind::Link => EntryKind::Link,
            ListedKind::Other => EntryKind::Other,
        },
        size: e.size,
        modify: None,
        perm: None,
        mode: None,
    })
}

impl RemoteSession {
    /// What `ls` shows of `path`: a directory's entries, or the one entry of a file.
    pub async fn list_or_stat(&mut self, path: &str) -> Result<Vec<RemoteEntry>, ClientError> {
        let entry = self.stat(path).await?;
        match entry.kind {
            EntryKind::Dir => self.list(path).await,
            _ => Ok(vec![entry]),
        }
    }

    /// Lists a directory: `MLSD` where the server has it (RFC 3659, which FEAT shows as
    /// `MLST`; every GridFTP server has it), else `LIST` in the Unix or DOS form. Over the
    /// session's MODE E data channel, reused like a transfer's, or a stream-mode connection.
    pub async fn list(&mut self, path: &str) -> Result<Vec<RemoteEntry>, ClientError> {
        let mode = self.binary().await?;
        let machine = self.has_feature("MLST") || mode == TransferMode::Extended;
        let cmd = if machine {
            Command::Mlsd(Some(path.into()))
        } else {
            Command::List(Some(path.into()))
        };
        let listing = self.receive_listing(&cmd, mode).await?;
        let text = String::from_utf8_lossy(&listing);
        let mut entries: Vec<RemoteEntry> = if machine {
            text.lines().filter_map(parse_mlsx_line).collect()
        } else {
            text.lines().filter_map(listed_entry).collect()
        };
        // Every caller joins these names to `path` (a recursive copy to a local or remote
        // destination, a recursive remove, the service's sizing): a hostile server's `..` or
        // `../../x` must never become a path outside it.
        entries.retain(|e| listed_name(&e.name) != ListedName::SelfOrParent);
        if let Some(bad) = entries
            .iter()
            .find(|e| listed_name(&e.name) == ListedName::Unsafe)
        {
            return Err(ClientError::UnsafeName {
                dir: path.to_string(),
                name: bad.name.clone(),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Runs a listing command and returns the bytes it sent.
    async fn receive_listing(
        &mut self,
        cmd: &Command,
        mode: TransferMode,
    ) -> Result<Vec<u8>, ClientError> {
        let channel = match mode {
            TransferMode::Extended => {
                self.listen_for_server(Default::default()).await?;
                ChannelSetup::Passive
            }
            TransferMode::Stream => {
                let addr = self.passive().await?;
                self.data = DataSetup::None;
                ChannelSetup::Active(vec![addr])
            }
        };
        let desc = TransferDescription {
            security: self.channel_security.clone(),
            mode,
            stack: self.data_stack.clone(),
            ..TransferDescription::new(Direction::Receive, VirtualPath::root(), channel)
        };
        // The DTP runs before the 150 is read: a server in passive mode (ProFTPD, Globus)
        // sends it only once the data connection is up.
        self.ctl.send(cmd).await?;
        let result = self.finish_listing(cmd, &desc).await;
        if result.is_err() {
            self.reset_data();
        }
        result
    }

    /// Receives a listing command's data while reading its replies, until both are done.
    async fn finish_listing(
        &mut self,
        cmd: &Command,
        desc: &TransferDescription,
    ) -> Result<Vec<u8>, ClientError> {
        let (tx, _rx) = mpsc::channel(4);
        let run = self.dtp.receive_to_memory(desc, &tx, MAX_LISTING);
        tokio::pin!(run);
        let mut result = None;
        let mut reply = None;
        while result.is_none() || reply.is_none() {
            tokio::select! {
                r = &mut run, if result.is_none() => result = Some(r),
                r = self.ctl.read_reply(), if reply.is_none() => {
                    let r = r?;
                    if r.is_preliminary() {
                        continue;
                    }
                    if r.code != 226 && r.code != 250 && result.is_none() {
                        return Err(ClientError::Refused { command: cmd.to_string(), reply: r });
                    }
                    reply = Some(r);
                }
            }
        }
        let reply = reply.ok_or(ClientError::Closed)?;
        if reply.code != 226 && reply.code != 250 {
            return Err(ClientError::Refused {
                command: cmd.to_string(),
                reply,
            });
        }
        Ok(result.ok_or(ClientError::Closed)??.1)
    }

    /// One entry's facts: `MLST` where the server has it; else `SIZE` and `MDTM` for a file,
    /// `CWD` for a directory, and the parent's listing for what neither answers.
    pub async fn stat(&mut self, path: &str) -> Result<RemoteEntry, ClientError> {
        if !self.has_feature("MLST") {
            return self.stat_plain(path).await;
        }
        let cmd = Command::Mlst(Some(path.into()));
        let r = self.expect_ok(&cmd).await?;
        r.lines
            .iter()
            .skip(1)
            .find_map(|l| l.starts_with(' ').then(|| parse_mlsx_line(l)).flatten())
            .ok_or_else(|| ClientError::Refused {
                command: cmd.to_string(),
                reply: r.clone(),
            })
    }

    async fn stat_plain(&mut self, path: &str) -> Result<RemoteEntry, ClientError> {
        // SIZE is refused in ASCII mode by some servers (ProFTPD).
        self.binary_type().await?;
        let size_cmd = Command::Size(path.into());
        let size = self.command(&size_cmd).await?;
        let name = path.to_string();
        if size.code == 213 {
            let modify = self.command(&Command::Mdtm(path.into())).await?;
            let modify = (modify.code == 213)
                .then(|| modify.text().trim().get(..14).map(str::to_string))
                .flatten();
            return Ok(RemoteEntry {
                name,
                kind: EntryKind::File,
                size: size.text().trim().parse().ok(),
                modify,
                perm: None,
                mode: None,
            });
        }
        if self.command(&Command::Cwd(path.into())).await?.code == 250 {
            return Ok(RemoteEntry {
                name,
                kind: EntryKind::Dir,
                size: None,
                modify: None,
                perm: None,
                mode: None,
            });
        }
        if let Some(e) = self.listed_in_parent(path).await {
            return Ok(RemoteEntry { name, ..e });
        }
        Err(ClientError::Refused {
            command: size_cmd.to_string(),
            reply: if size.code == 550 {
                size
            } else {
                ferry_proto::Reply::new(550, format!("{path}: No such file or directory."))
            },
        })
    }

    /// `path`'s entry in its parent's listing, if the listing works and has it.
    async fn listed_in_parent(&mut self, path: &str) -> Option<RemoteEntry> {
        let (parent, base) = path.trim_end_matches('/').rsplit_once('/')?;
        let parent = if parent.is_empty() { "/" } else { parent };
        let entries = self.list(parent).await.ok()?;
        entries.into_iter().find(|e| e.name == base)
    }

    /// Creates a directory.
    pub async fn mkdir(&mut self, path: &str) -> Result<(), ClientError> {
        self.expect_ok(&Command::Mkd(path.into())).await.map(|_| ())
    }

    /// Creates a directory and any missing parents; existing ones are fine.
    pub async fn mkdir_all(&mut self, path: &str) -> Result<(), ClientError> {
        let mut prefix = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            prefix.push('/');
            prefix.push_str(part);
            let mkd = Command::Mkd(prefix.clone());
            let r = self.command(&mkd).await?;
            if r.is_error() {
                match self.stat(&prefix).await {
                    Ok(e) if e.kind == EntryKind::Dir => {}
                    _ => {
                        return Err(ClientError::Refused {
                            command: mkd.to_string(),
                            reply: r,
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Removes a file, or a directory (with `recursive`, its whole tree).
    pub async fn remove(&mut self, path: &str, recursive: bool) -> Result<(), ClientError> {
        let mut entry = self.stat(path).await?;
        if entry.kind == EntryKind::Dir && recursive && !self.has_feature("MLST") {
            // CWD also enters a link to a directory: a recursive walk must not empty the
            // link's target, so the parent's listing says what the entry is.
            if let Some(listed) = self.listed_in_parent(path).await {
                entry.kind = listed.kind;
            }
        }
        if entry.kind != EntryKind::Dir {
            return self
                .expect_ok(&Command::Dele(path.into()))
                .await
                .map(|_| ());
        }
        if !recursive {
            return self.expect_ok(&Command::Rmd(path.into())).await.map(|_| ());
        }
        let r = self
            .command(&Command::Site(SiteCommand::Rdel(path.into())))
            .await?;
        if r.is_success() {
            return Ok(());
        }
        // No RDEL: walk the tree ourselves, children first.
        let mut stack = vec![(path.trim_end_matches('/').to_string(), false)];
        while let Some((dir, visited)) = stack.pop() {
            if visited {
                self.expect_ok(&Command::Rmd(dir)).await?;
                continue;
            }
            stack.push((dir.clone(), true));
            for e in self.list(&dir).await? {
                let child = format!("{dir}/{}", e.name);
                if e.kind == EntryKind::Dir {
                    stack.push((child, false));
                } else {
                    self.expect_ok(&Command::Dele(child)).await?;
                }
            }
        }
        Ok(())
    }

    /// Renames within the server.
    pub async fn rename(&mut self, from: &str, to: &str) -> Result<(), ClientError> {
        self.expect_ok(&Command::Rnfr(from.into())).await?;
        self.expect_ok(&Command::Rnto(to.into())).await.map(|_| ())
    }

    /// The server's checksum of `[offset, offset+length)` (`None`: to the end).
    pub async fn checksum(
        &mut self,
        path: &str,
        algorithm: &str,
        offset: u64,
        length: Option<u64>,
    ) -> Result<String, ClientError> {
        let mut one = self.checksums(&[path], algorithm, offset, length).await?;
        one.pop()
            .unwrap_or_else(|| Err(ClientError::Network("CKSM: no reply".into())))
    }

    /// `CKSM` of several files in one pipelined exchange: the commands go in one write and the
    /// replies are read in order, so a batch costs one round trip rather than one per file. The
    /// outer error is the session's (nothing more is known); an inner one is that file's refusal.
    pub async fn checksums(
        &mut self,
        paths: &[&str],
        algorithm: &str,
        offset: u64,
        length: Option<u64>,
    ) -> Result<Vec<Result<String, ClientError>>, ClientError> {
        let commands: Vec<Command> = paths
            .iter()
            .map(|p| Command::Cksm {
                algorithm: algorithm.to_ascii_uppercase(),
                offset,
                length,
                path: (*p).into(),
            })
            .collect();
        // A session that fails part way has replies still unread: it is dropped, so no later
        // command reads another's reply.
        let broken = |s: &mut Self, e: ClientError| {
            s.broken = true;
            e
        };
        self.ctl
            .send_all(&commands)
            .await
            .map_err(|e| broken(self, e))?;
        let mut out = Vec::with_capacity(commands.len());
        for cmd in &commands {
            let reply = self.ctl.read_reply().await.map_err(|e| broken(self, e))?;
            out.push(if reply.code >= 400 {
                Err(ClientError::Refused {
                    command: crate::control::shown(cmd),
                    reply,
                })
            } else {
                Ok(reply.text().trim().to_ascii_lowercase())
            });
        }
        Ok(out)
    }

    /// The size of a file (SIZE, in TYPE I: servers refuse it in ASCII mode or count the
    /// line ends ASCII would send).
    pub async fn size(&mut self, path: &str) -> Result<u64, ClientError> {
        self.binary_type().await?;
        self.ctl.size(path).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlsx_lines_parse_and_dot_entries_are_skipped() {
        let e = parse_mlsx_line(
            "Type=file;Modify=20261122153000;Size=5;Perm=adfrw;UNIX.mode=0644; a b.txt\r\n",
        )
        .unwrap();
        assert_eq!(
            (e.name.as_str(), e.kind, e.size),
            ("a b.txt", EntryKind::File, Some(5))
        );
        assert_eq!(
            parse_mlsx_line("Type=dir;Modify=20261122153000; sub")
                .unwrap()
                .kind,
            EntryKind::Dir
        );
        assert_eq!(
            parse_mlsx_line("Type=OS.unix=slink:/x;Size=1; l")
                .unwrap()
                .kind,
            EntryKind::Link
        );
        assert!(parse_mlsx_line("Type=cdir;Modify=1; .").is_none());
        assert!(parse_mlsx_line(" Type=file;Size=3; /abs/path").is_some());
    }
}
