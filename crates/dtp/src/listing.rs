//! Directory listings sent over the data channel (LIST, NLST, MLSD).

use ferry_storage::listing::{list_line, mlsx_facts, FactSelection};
use ferry_storage::{DirEntry, FileKind, Storage, StorageError, VirtualPath};

use crate::ListKind;

/// Builds the listing bytes (CRLF line ends). A file path lists that one entry; `now` (Unix
/// seconds) decides which LIST times show a year.
pub(crate) fn render(
    storage: &dyn Storage,
    path: &VirtualPath,
    kind: ListKind,
    facts: &[String],
    read_only: bool,
    now: i64,
) -> Result<Vec<u8>, StorageError> {
    let meta = storage.stat(path)?;
    let entries = if meta.kind == FileKind::Dir {
        storage.list(path)?
    } else {
        let name = path.file_name().unwrap_or("/").to_string();
        vec![DirEntry {
            name,
            metadata: storage.symlink_metadata(path)?,
        }]
    };
    let sel = FactSelection {
        facts: facts.to_vec(),
    };
    let mut out = Vec::with_capacity(entries.len() * 96);
    if kind == ListKind::Mlsd && meta.kind == FileKind::Dir {
        let perm = perm_letters(FileKind::Dir, read_only);
        out.extend_from_slice(mlsx_facts(&meta, Some("cdir"), perm, &sel).as_bytes());
        out.extend_from_slice(b".\r\n");
    }
    for e in &entries {
        match kind {
            ListKind::Nlst => out.extend_from_slice(e.name.as_bytes()),
            ListKind::List => out.extend_from_slice(list_line(e, now).as_bytes()),
            ListKind::Mlsd => {
                let shown = if e.metadata.kind == FileKind::Symlink {
                    storage
                        .stat(&path.join(&e.name)?)
                        .unwrap_or_else(|_| e.metadata.clone())
                } else {
                    e.metadata.clone()
                };
                let mut m = shown;
                if e.metadata.kind == FileKind::Symlink {
                    m.link_target = e.metadata.link_target.clone();
                }
                let perm = perm_letters(m.kind, read_only);
                out.extend_from_slice(mlsx_facts(&m, None, perm, &sel).as_bytes());
                out.extend_from_slice(e.name.as_bytes());
            }
        }
        out.extend_from_slice(b"\r\n");
    }
    Ok(out)
}

/// The `Perm=` letters for an entry in a session that may or may not write.
pub fn perm_letters(kind: FileKind, read_only: bool) -> &'static str {
    match (kind, read_only) {
        (FileKind::Dir, true) => "el",
        (FileKind::Dir, false) => "cdeflmp",
        (_, true) => "r",
        (_, false) => "adfrw",
    }
}
