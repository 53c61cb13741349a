//! Where a client finds its token, as WLCG's Bearer Token Discovery says (the order gfal2,
//! davix, HTCondor and the xrootd client follow):
//!
//! 1. the `BEARER_TOKEN` environment variable;
//! 2. the file `BEARER_TOKEN_FILE` names;
//! 3. `$XDG_RUNTIME_DIR/bt_u$UID`;
//! 4. `/tmp/bt_u$UID`.
//!
//! The first that holds anything but white space wins; the token is what it holds, trimmed.
//! Sans-IO: the caller passes how to read the environment and files.

use std::path::{Path, PathBuf};

/// Where a token was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// `BEARER_TOKEN`.
    Variable,
    /// The file `BEARER_TOKEN_FILE` names.
    NamedFile(PathBuf),
    /// `$XDG_RUNTIME_DIR/bt_u$UID` or `/tmp/bt_u$UID`: a file left by a token agent, not
    /// something the user named for this command.
    AgentFile(PathBuf),
}

impl Found {
    /// Whether the user named this token for the command (an environment variable), rather
    /// than a token agent leaving it where any command would find it.
    pub fn is_named(&self) -> bool {
        !matches!(self, Found::AgentFile(_))
    }
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Found::Variable => write!(f, "BEARER_TOKEN"),
            Found::NamedFile(p) => write!(f, "BEARER_TOKEN_FILE ({})", p.display()),
            Found::AgentFile(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The token of user `uid`, and where it was found; `None` where every place is empty.
pub fn discover(
    env: impl Fn(&str) -> Option<String>,
    read: impl Fn(&Path) -> Option<String>,
    uid: u32,
) -> Option<(String, Found)> {
    let usable = |s: String| {
        let t = s.trim();
        (!t.is_empty()).then(|| t.to_owned())
    };
    if let Some(t) = env("BEARER_TOKEN").and_then(usable) {
        return Some((t, Found::Variable));
    }
    if let Some(file) = env("BEARER_TOKEN_FILE").filter(|f| !f.is_empty()) {
        let file = PathBuf::from(file);
        if let Some(t) = read(&file).and_then(usable) {
            return Some((t, Found::NamedFile(file)));
        }
    }
    let name = format!("bt_u{uid}");
    let runtime = env("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(&d).join(&name));
    for file in runtime.into_iter().chain([Path::new("/tmp").join(&name)]) {
        if let Some(t) = read(&file).and_then(usable) {
            return Some((t, Found::AgentFile(file)));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn run(env: &[(&str, &str)], files: &[(&str, &str)]) -> Option<(String, Found)> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let files: HashMap<PathBuf, String> = files
            .iter()
            .map(|(k, v)| (PathBuf::from(k), v.to_string()))
            .collect();
        discover(|k| env.get(k).cloned(), |p| files.get(p).cloned(), 1000)
    }

    #[test]
    fn the_first_place_holding_a_token_wins_in_wlcgs_order() {
        let files = [
            ("/named", " named\n"),
            ("/run/user/1000/bt_u1000", "runtime\n"),
            ("/tmp/bt_u1000", "tmp"),
        ];
        let all = [
            ("BEARER_TOKEN", " variable \n"),
            ("BEARER_TOKEN_FILE", "/named"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ];
        assert_eq!(
            run(&all, &files),
            Some(("variable".into(), Found::Variable))
        );
        assert_eq!(
            run(&all[1..], &files),
            Some(("named".into(), Found::NamedFile("/named".into())))
        );
        let runtime = Found::AgentFile("/run/user/1000/bt_u1000".into());
        assert_eq!(run(&all[2..], &files), Some(("runtime".into(), runtime)));
        let tmp = Found::AgentFile("/tmp/bt_u1000".into());
        assert_eq!(run(&[], &files), Some(("tmp".into(), tmp.clone())));
        // Empty or blank places are passed over, a missing named file too.
        let blank = [
            ("BEARER_TOKEN", "  "),
            ("BEARER_TOKEN_FILE", "/missing"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ];
        let files_blank = [("/run/user/1000/bt_u1000", "\n"), ("/tmp/bt_u1000", "tmp")];
        assert_eq!(run(&blank, &files_blank), Some(("tmp".into(), tmp)));
        assert_eq!(run(&blank, &[]), None);
        assert!(Found::Variable.is_named() && !Found::AgentFile("/x".into()).is_named());
    }
}
