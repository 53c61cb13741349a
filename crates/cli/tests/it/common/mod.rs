//! Harness for interoperability tests that drive the real `globus-url-copy` against a GridFTP
//! server under test (ferry, or globus-gridftp-server as the reference), and the `ferry` client
//! against the real globus-gridftp-server.
//!
//! `FERRY_INTEROP_SERVER=globus|ferry` (default `ferry`) picks the server of the
//! globus-url-copy suite; see [`ServerKind`].

// Each test module uses its own subset of the harness.
#![allow(dead_code, unused_imports, unused_macros)]

#[path = "../../../../server/tests/it/common/audit.rs"]
pub mod audit;
pub mod capture;
pub mod ferry;
pub mod files;
pub mod ftpd;
pub mod globus;
pub mod guc;
pub mod https;
pub mod netlab;
pub mod process;
pub mod pysource;
pub mod sandbox;
pub mod server;
pub mod striping;
pub mod xrootd;

pub use ferry::{
    run_ferry, run_ferry_with_cache, run_ferry_with_input, spawn_ferry, FerryOutput, FerryProcess,
};
pub use files::{
    adler32, make_dir, md5_hex, md5_of_file, random_bytes, write_file, write_marked_pattern_file,
};
pub use guc::{run_guc, spawn_guc};
pub use sandbox::{file_dir_url, file_url, Sandbox};
pub use server::{ServerKind, ServerUnderTest};

use std::path::{Path, PathBuf};

/// Printed, and the test passes, when the client is missing; CI installs it.
pub const GUC_MISSING: &str =
    "skipping: globus-url-copy not installed (apt-get install globus-gass-copy-progs)";

/// Why the interop suite cannot run on this machine, if it cannot.
pub fn missing_tools() -> Option<String> {
    if guc::globus_url_copy_path().is_none() {
        return Some(GUC_MISSING.to_owned());
    }
    ServerKind::from_env().missing()
}

/// Returns from the calling test (which then passes) when a needed tool is not installed.
macro_rules! require_interop_tools {
    () => {
        if let Some(reason) = $crate::common::missing_tools() {
            eprintln!("{reason}");
            return;
        }
    };
}

/// First executable called `name` on `PATH` or in the given fallback directories.
pub fn find_executable(name: &str, fallback_dirs: &[&str]) -> Option<PathBuf> {
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .chain(fallback_dirs.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// grid-proxy-init for `user` of a `ferry ca` directory `ca` (its `users/USER/` credential,
/// checked against its `certificates/`), written to `out`; `format` is `-rfc`, `-draft` (GT3)
/// or `-old` (GT2).
pub fn grid_proxy_init(ca: &Path, user: &str, out: &Path, format: &str) {
    let tool = find_executable("grid-proxy-init", &["/usr/bin"]).expect("grid-proxy-init");
    let u = ca.join("users").join(user);
    let status = std::process::Command::new(tool)
        .args(["-q", format, "-cert"])
        .arg(u.join("usercert.pem"))
        .arg("-key")
        .arg(u.join("userkey.pem"))
        .arg("-certdir")
        .arg(ca.join("certificates"))
        .arg("-out")
        .arg(out)
        .status()
        .unwrap();
    assert!(status.success(), "grid-proxy-init for {user}");
}
