//! The suites' audit of kept checksums, shared by the server's and the CLI's test harnesses
//! (the CLI's includes this file by path).

use std::path::Path;

/// Checks every checksum a ferry server kept under `dir` (and still valid for its file) against
/// Python's zlib and hashlib (`scripts/audit-checksums`), so each transfer of the suite that kept
/// a value is compared with an independent computation. Skipped without /usr/bin/python3.
pub fn audit_kept_checksums(dir: &Path) {
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/audit-checksums");
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(dir)
        .output()
        .expect("run scripts/audit-checksums");
    assert!(
        out.status.success(),
        "kept checksums under {} disagree with Python's:\n{}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
