//! Remote file management on a session: listings (MLSD/MLST), MKD, DELE/RMD/RDEL, RNFR/RNTO,
//! CKSM, SIZE.

use ferry_dtp::{ChannelSetup, Direction, TransferDescription};
use ferry_proto::site::SiteCommand;
use ferry_proto::Command;
use ferry_storage::VirtualPath;
use tokio::sync::mpsc;

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

impl RemoteSession {
    /// Lists a directory (MLSD over a MODE E data channel, reused like a transfer's).
    pub async fn list(&mut self, path: &str) -> Result<Vec<RemoteEntry>, ClientError> {
        self.binary_extended().await?;
        self.listen_for_server(Default::default()).await?;
        let desc = TransferDescription {
            security: self.channel_security.clone(),
            ..TransferDescription::new(
                Direction::Receive,
                VirtualPath::root(),
                ChannelSetup::Passive,
            )
        };
        let cmd = Command::Mlsd(Some(path.into()));
        let first = self.command(&cmd).await?;
        if !first.is_preliminary() {
            return Err(ClientError::Refused {
                command: cmd.to_string(),
                reply: first,
            });
        }
        let (tx, _rx) = mpsc::channel(4);
        let listing = {
            let run = self.dtp.receive_to_memory(&desc, &tx, MAX_LISTING);
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
                        if r.code != 226 && result.is_none() {
                            return Err(ClientError::Refused { command: cmd.to_string(), reply: r });
                        }
                        reply = Some(r);
                    }
                }
            }
            let reply = reply.ok_or(ClientError::Closed)?;
            if reply.code != 226 {
                return Err(ClientError::Refused {
                    command: cmd.to_string(),
                    reply,
                });
            }
            result.ok_or(ClientError::Closed)??.1
        };
        let text = String::from_utf8_lossy(&listing);
        let mut entries: Vec<RemoteEntry> = text.lines().filter_map(parse_mlsx_line).collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// One entry's facts (MLST).
    pub async fn stat(&mut self, path: &str) -> Result<RemoteEntry, ClientError> {
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
        let entry = self.stat(path).await?;
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
        let r = self
            .expect_ok(&Command::Cksm {
                algorithm: algorithm.to_ascii_uppercase(),
                offset,
                length,
                path: path.into(),
            })
            .await?;
        Ok(r.text().trim().to_ascii_lowercase())
    }

    /// The size of a file (SIZE).
    pub async fn size(&mut self, path: &str) -> Result<u64, ClientError> {
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
