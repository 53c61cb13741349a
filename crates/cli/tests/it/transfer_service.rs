//! `ferry service` with real copies: `ferry submit` delegates the user's proxy and the service
//! copies between `ferry serve --gsi` servers as that user; the service killed with SIGKILL
//! mid-transfer and started again resumes from the ranges it had stored, never from byte 0;
//! `gcp --queue` plans a tree and queues its files. Every test compares the bytes.

use crate::common;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::ftpd::{Ftpd, FtpdKind, FtpdOptions};
use common::{adler32, random_bytes, write_file, Sandbox};
use serde_json::Value;

/// The bearer token of an admin identity the dashboard test signs in with.
const DASHBOARD_TOKEN: &str = "dashboard-token-0123456789abcdef";

/// A CA, a user proxy, a GSI ferry server and the transfer service.
struct Site {
    dir: tempfile::TempDir,
    server: Child,
    server_port: u16,
    service: Option<Child>,
    service_port: u16,
    metrics_port: u16,
    /// A shared PostgreSQL queue instead of the SQLite file.
    database: Option<String>,
    /// More options for `ferry service`.
    service_args: Vec<String>,
    /// More environment for `ferry service`.
    service_env: Vec<(String, String)>,
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        if let Some(s) = &mut self.service {
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}

#[path = "../../../service/tests/it/pg/mod.rs"]
mod pg;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Site {
    fn start() -> Site {
        Site::start_with(None)
    }

    /// A site whose service keeps its queue in `database` (a PostgreSQL URL).
    fn start_with(database: Option<String>) -> Site {
        Site::start_with_args(database, &[])
    }

    /// A site whose service also gets `args`.
    fn start_with_args(database: Option<String>, args: &[&str]) -> Site {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let ca = p.join("ca");
        let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args([
                "ca",
                ca.to_str().unwrap(),
                "--host",
                "localhost",
                "--user",
                "Alice:nobody",
                "--days",
                "2",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let user = ca.join("users/Alice");
        let out = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["proxy", "init", "-q", "--cert"])
            .arg(user.join("usercert.pem"))
            .arg("--key")
            .arg(user.join("userkey.pem"))
            .arg("--out")
            .arg(p.join("proxy.pem"))
            .arg("--cert-dir")
            .arg(ca.join("certificates"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let root = p.join("root");
        std::fs::create_dir(&root).unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            // Run as root, the server works as the mapped account (nobody) in here.
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let server_port = free_port();
        let host = ca.join("hosts/localhost");
        let server = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args([
                "serve",
                "--gsi",
                "--listen",
                &format!("127.0.0.1:{server_port}"),
                "--root",
            ])
            .arg(&root)
            .arg("--host-cert")
            .arg(host.join("hostcert.pem"))
            .arg("--host-key")
            .arg(host.join("hostkey.pem"))
            .arg("--cert-dir")
            .arg(ca.join("certificates"))
            .arg("--gridmap")
            .arg(ca.join("grid-mapfile"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_listening(server_port, "ferry serve --gsi");
        let mut site = Site {
            dir,
            server,
            server_port,
            service: None,
            service_port: free_port(),
            metrics_port: free_port(),
            database,
            service_args: args.iter().map(|a| (*a).to_owned()).collect(),
            service_env: Vec::new(),
        };
        site.start_service();
        site
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Starts (or starts again) the service on its port and database.
    fn start_service(&mut self) {
        let host = self.path("ca/hosts/localhost");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("service.log"))
            .unwrap();
        let tokens = self.path("tokens");
        std::fs::write(&tokens, format!("{DASHBOARD_TOKEN} dashboard-robot\n")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args([
                "service",
                "--listen",
                &format!("127.0.0.1:{}", self.service_port),
            ])
            .arg("--tokens")
            .arg(&tokens)
            .args(["--admin", "dashboard-robot", "--optimizer-interval", "2"])
            .arg("--metrics")
            .arg(format!("127.0.0.1:{}", self.metrics_port))
            .arg("--database")
            .arg(
                self.database
                    .clone()
                    .unwrap_or_else(|| self.path("queue.db").to_string_lossy().into_owned()),
            )
            .args(["--host-id", "host-a", "--host-timeout", "3"])
            .arg("--host-cert")
            .arg(host.join("hostcert.pem"))
            .arg("--host-key")
            .arg(host.join("hostkey.pem"))
            .arg("--cert-dir")
            .arg(self.path("ca/certificates"))
            .args(&self.service_args)
            .envs(self.service_env.iter().map(|(k, v)| (k, v)))
            // The path cache of this host, which the clients below share.
            .env("XDG_CACHE_HOME", self.path("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.service = Some(child);
        wait_listening(self.service_port, "ferry service");
    }

    fn kill_service(&mut self) {
        if let Some(mut s) = self.service.take() {
            s.kill().unwrap(); // SIGKILL: nothing is flushed or said.
            s.wait().unwrap();
        }
    }

    fn url(&self, rel: &str) -> String {
        format!("gsiftp://localhost:{}/{rel}", self.server_port)
    }

    fn ferry(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(args)
            .env("X509_CERT_DIR", self.path("ca/certificates"))
            .env("X509_USER_PROXY", self.path("proxy.pem"))
            .env(
                "FERRY_SERVICE",
                format!("https://localhost:{}", self.service_port),
            )
            .env("XDG_CACHE_HOME", self.path("cache"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.ferry(args);
        assert!(
            out.status.success(),
            "ferry {args:?} failed ({:?}):\n{}\n{}\nservice log:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.path("service.log")).unwrap_or_default()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn job(&self, id: &str) -> Value {
        let text = self.ok(&["job", id, "--attempts", "--json"]);
        serde_json::from_str(&text).unwrap()
    }

    fn wait_job(&self, id: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let j = self.job(id);
            let state = j["job"]["job_state"].as_str().unwrap_or("").to_owned();
            if !matches!(state.as_str(), "SUBMITTED" | "ACTIVE") {
                return j;
            }
            assert!(Instant::now() < deadline, "job {id} still {state}: {j}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn same_file(expected: &Path, actual: &Path) {
    if let Err(e) = common::files::compare_files(expected, actual) {
        panic!("{e}");
    }
}

#[test]
fn ferry_submit_delegates_and_the_service_copies_and_verifies_as_the_user() {
    let site = Site::start();
    // Large enough for its streams to be chosen from the path and the copy to be measured.
    let a = random_bytes(72 << 20, 1);
    let b = random_bytes(1, 2);
    write_file(&site.path("root/a.bin"), &a);
    write_file(&site.path("root/b.bin"), &b);
    let list = site.path("list");
    std::fs::write(
        &list,
        format!(
            "# two files\n{} {}\n{} {} ADLER32:{:08x}\n",
            site.url("a.bin"),
            site.url("a-copy.bin"),
            site.url("b.bin"),
            site.url("b-copy.bin"),
            adler32(&b)
        ),
    )
    .unwrap();
    let out = site.ferry(&["submit", "--file", list.to_str().unwrap(), "--wait"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("delegated a proxy"), "{stderr}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    same_file(&site.path("root/a.bin"), &site.path("root/a-copy.bin"));
    same_file(&site.path("root/b.bin"), &site.path("root/b-copy.bin"));

    let j = site.job(&id);
    assert_eq!(j["job"]["job_state"], "FINISHED", "{j}");
    let files = j["files"].as_array().unwrap();
    assert_eq!(
        files[0]["checksum"],
        format!("ADLER32:{:08x}", adler32(&a)),
        "{j}"
    );
    assert_eq!(files[0]["transferred"], a.len() as u64);
    assert_eq!(files[1]["checksum"], format!("ADLER32:{:08x}", adler32(&b)));
    assert!(site.ok(&["jobs", "--all"]).contains(&id));
    assert!(
        !site.ok(&["jobs"]).contains(&id),
        "finished jobs are not listed by default"
    );
    // The service chose a.bin's streams from this host's path cache and kept what it measured
    // there: gcp on the same host starts from it.
    let to = site.url("a-gcp.bin");
    let out = site.ferry(&["cp", "--explain", &site.url("a.bin"), &to]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 measured copies in the cache"), "{said}");
    same_file(&site.path("root/a.bin"), &site.path("root/a-gcp.bin"));

    // A second job whose destination exists, without --overwrite: refused, file untouched.
    let out = site.ferry(&[
        "submit",
        &site.url("b.bin"),
        &site.url("a-copy.bin"),
        "--wait",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id2 = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let j = site.job(&id2);
    assert_eq!(j["job"]["job_state"], "FAILED");
    assert!(
        j["files"][0]["reason"].as_str().unwrap().contains("exists"),
        "{j}"
    );
    same_file(&site.path("root/a.bin"), &site.path("root/a-copy.bin"));
    // A wrong user checksum fails the file and says both values.
    let out = site.ferry(&[
        "submit",
        &site.url("b.bin"),
        &site.url("c.bin"),
        "--checksum",
        "ADLER32:00000001",
        "--wait",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let id3 = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let j = site.job(&id3);
    let reason = j["files"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("00000001"), "{j}");
    assert_eq!(
        j["attempts"][0].as_array().map(Vec::len),
        Some(1),
        "a mismatch is not retried: {j}"
    );
}

/// FTS3's `target` mode with a user checksum sums the destination alone, so a source that
/// has no `CKSM` (a plain FTP server: ProFTPD) is no failure; `both` still needs the source's
/// answer, and a wrong value fails the file naming both and leaves no destination.
#[test]
fn fts3s_target_mode_verifies_a_source_without_cksm_by_its_destination_alone() {
    let kind = FtpdKind::ProFtpd;
    if let Some(reason) = kind.missing() {
        eprintln!("{reason}");
        return;
    }
    let sandbox = Sandbox::new();
    let ftpd = Ftpd::start(kind, &sandbox, FtpdOptions::default());
    let site = Site::start_with_args(None, &["--allow-local"]);
    let data = random_bytes(2 << 20, 7);
    ftpd.put_file(&ftpd.home, "/v.bin", &data);
    let src = ftpd.user_url("/v.bin");
    let right = format!("ADLER32:{:08x}", adler32(&data));
    let dst = |name: &str| format!("file://{}", site.path(name).display());
    let submit = |verify: &str, checksum: &str, name: &str| {
        let out = site.ferry(&[
            "submit",
            &src,
            &dst(name),
            "--verify",
            verify,
            "--checksum",
            checksum,
            "--no-delegate",
            "--wait",
        ]);
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (out.status.code(), site.job(&id))
    };

    let (code, j) = submit("target", &right, "target.bin");
    assert_eq!(code, Some(0), "{j}");
    assert_eq!(j["files"][0]["file_state"], "FINISHED", "{j}");
    same_file(&ftpd.home.join("v.bin"), &site.path("target.bin"));
    assert_eq!(j["files"][0]["checksum"], right, "{j}");

    let (code, j) = submit("both", &right, "both.bin");
    assert_eq!(code, Some(1), "{j}");
    let reason = j["files"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("CKSM"), "both ends are asked: {j}");

    let (code, j) = submit("target", "ADLER32:00000001", "wrong.bin");
    assert_eq!(code, Some(1), "{j}");
    let reason = j["files"][0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("00000001") && reason.contains(&right[8..]),
        "the reason names the expected value and the destination's: {j}"
    );
    assert!(
        !site.path("wrong.bin").exists(),
        "a destination with the wrong checksum is removed"
    );
}

#[test]
fn the_service_killed_mid_transfer_resumes_from_its_stored_ranges() {
    let mut site = Site::start();
    common::write_marked_pattern_file(&site.path("root/big.bin"), 640, 7);
    // One stream with small TCP buffers slows loopback down (to some 80 MB/s) so that restart
    // markers come before the end and the service can be killed twice mid-file.
    let out = site.ferry(&[
        "submit",
        &site.url("big.bin"),
        &site.url("big-copy.bin"),
        "--streams",
        "1",
        "--tcp-bs",
        "4096",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let mut stored_at_kill = Vec::new();
    for round in 0..2 {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let j = site.job(&id);
            let ranges = j["files"][0]["stored_ranges"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            let total = ranges_total(&ranges);
            let before = stored_at_kill.last().copied().unwrap_or(0);
            if total > before {
                site.kill_service();
                eprintln!("round {round}: killed the service with {total} bytes stored ({ranges})");
                stored_at_kill.push(total);
                break;
            }
            if j["job"]["job_state"] == "FINISHED" {
                panic!("the copy finished before the service could be killed (round {round}): {j}");
            }
            assert!(Instant::now() < deadline, "no restart marker stored: {j}");
            std::thread::sleep(Duration::from_millis(100));
        }
        // Killed and reaped: its port is free, and its claims wait for the next start.
        site.start_service();
    }
    let j = site.wait_job(&id, Duration::from_secs(300));
    assert_eq!(j["job"]["job_state"], "FINISHED", "{j}");
    same_file(&site.path("root/big.bin"), &site.path("root/big-copy.bin"));
    let attempts = j["attempts"][0].as_array().unwrap();
    assert!(attempts.len() >= 3, "one attempt per start: {j}");
    for (i, a) in attempts.iter().enumerate().skip(1) {
        let resumed = a["resumed_bytes"].as_u64().unwrap();
        assert!(
            resumed >= stored_at_kill[(i - 1).min(stored_at_kill.len() - 1)],
            "attempt {} resumed at {resumed}, less than was stored: {j}",
            i + 1
        );
    }
    assert!(
        attempts[0]["error"]
            .as_str()
            .unwrap()
            .contains("service stopped"),
        "{j}"
    );
    assert_eq!(
        j["files"][0]["retry"], 0,
        "a service stop is not the transfer's failure"
    );
}

fn ranges_total(ranges: &str) -> u64 {
    ranges
        .split(',')
        .filter_map(|r| r.split_once('-'))
        .filter_map(|(a, b)| Some(b.parse::<u64>().ok()? - a.parse::<u64>().ok()?))
        .sum()
}

#[test]
fn gcp_queue_lists_a_tree_and_the_service_copies_every_file() {
    let site = Site::start();
    for (i, name) in ["t/a", "t/b", "t/sub/c", "t/sub/deeper/d e"]
        .iter()
        .enumerate()
    {
        write_file(
            &site.path(&format!("root/{name}")),
            &random_bytes(1000 * (i + 1), i as u64),
        );
    }
    let out = site.ferry(&["cp", "--queue", "-r", &site.url("t/"), &site.url("u/")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("queued 4 file(s)"), "{stderr}");
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let j = site.wait_job(&id, Duration::from_secs(120));
    assert_eq!(j["job"]["job_state"], "FINISHED", "{j}");
    if let Err(e) = common::files::compare_trees(&site.path("root/t"), &site.path("root/u")) {
        panic!("{e}");
    }
    // Local ends are refused before anything is queued.
    let out = site.ferry(&[
        "cp",
        "--queue",
        site.path("root/t/a").to_str().unwrap(),
        &site.url("v"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("on this host"));
}

/// Where scripts/install-deps puts FTS3's command-line client (PyPI `fts3`).
const FTS3_BIN: &str = "/opt/ferry-test/fts3/bin";

impl Site {
    fn fts(&self, tool: &str, args: &[&str]) -> Output {
        let url = format!("https://localhost:{}", self.service_port);
        Command::new(Path::new(FTS3_BIN).join(tool))
            .arg("-s")
            .arg(&url)
            .args(args)
            .env("X509_CERT_DIR", self.path("ca/certificates"))
            .env("X509_USER_PROXY", self.path("proxy.pem"))
            .output()
            .unwrap()
    }

    fn fts_ok(&self, tool: &str, args: &[&str]) -> String {
        let out = self.fts(tool, args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && !text.contains("Traceback"),
            "{tool} {args:?}: {:?}\n{text}\nservice log:\n{}",
            out.status,
            std::fs::read_to_string(self.path("service.log")).unwrap_or_default()
        );
        text
    }
}

fn job_id_of(submit_output: &str) -> String {
    submit_output
        .lines()
        .find_map(|l| l.strip_prefix("Job id: "))
        .unwrap_or_else(|| panic!("no job id in {submit_output}"))
        .trim()
        .to_owned()
}

#[test]
fn fts3s_own_client_whoami_delegate_submit_status_list_and_cancel_work_unchanged() {
    if !Path::new(FTS3_BIN).join("fts-rest-whoami").exists() {
        // CI runs as root after install-deps: there a missing client is a failure, not a skip.
        assert!(
            std::env::var_os("FERRY_REQUIRE_FTPD").is_none(),
            "FTS3's client is not in {FTS3_BIN}, though scripts/install-deps ran as root"
        );
        eprintln!("skipping: FTS3's client is not in {FTS3_BIN} (bash scripts/install-deps as root installs it)");
        return;
    }
    let site = Site::start();
    let data = random_bytes(5 << 20, 11);
    write_file(&site.path("root/in.bin"), &data);

    let me = site.fts_ok("fts-rest-whoami", &[]);
    assert!(me.contains("User DN: /O=Grid/"), "{me}");
    assert!(me.contains("CN=Alice"), "{me}");
    site.fts_ok("fts-rest-delegate", &[]);
    let out = site.fts_ok(
        "fts-rest-transfer-submit",
        &[&site.url("in.bin"), &site.url("out.bin")],
    );
    let id = job_id_of(&out);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = site.fts_ok("fts-rest-transfer-status", &[&id]);
        if status.contains("Status: FINISHED") {
            break;
        }
        assert!(
            !status.contains("Status: FAILED") && Instant::now() < deadline,
            "{status}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    same_file(&site.path("root/in.bin"), &site.path("root/out.bin"));
    let json = site.fts_ok("fts-rest-transfer-status", &["--json", &id]);
    assert!(json.contains("\"job_state\": \"FINISHED\""), "{json}");
    // FTS3's client sends fields ferry does not act on; the job says which.
    assert!(json.contains("ignored_fields"), "{json}");

    // A job that waits for a retry: listed as unfinished, then cancelled.
    let out = site.fts_ok(
        "fts-rest-transfer-submit",
        &["--retry", "5", "ftp://127.0.0.1:1/x", "ftp://127.0.0.1:1/y"],
    );
    let waiting = job_id_of(&out);
    let listed = site.fts_ok("fts-rest-transfer-list", &[]);
    assert!(listed.contains(&waiting), "{listed}");
    assert!(
        !listed.contains(&id),
        "finished jobs are not listed: {listed}"
    );
    let cancelled = site.fts_ok("fts-rest-transfer-cancel", &[&waiting]);
    assert!(cancelled.contains("CANCELED"), "{cancelled}");
    let status = site.fts_ok("fts-rest-transfer-status", &[&waiting]);
    assert!(status.contains("Status: CANCELED"), "{status}");
}

#[test]
fn bearer_tokens_of_a_trusted_issuer_call_the_api_from_fts3s_client_and_ferry() {
    if !Path::new(FTS3_BIN).join("fts-rest-whoami").exists() {
        assert!(
            std::env::var_os("FERRY_REQUIRE_FTPD").is_none(),
            "FTS3's client is not in {FTS3_BIN}, though scripts/install-deps ran as root"
        );
        eprintln!("skipping: FTS3's client is not in {FTS3_BIN}");
        return;
    }
    use crate::bearer_tokens::{Issuer, AUDIENCE};
    let mut site = Site::start();
    let issuer = Issuer::start(site.dir.path());
    // The service reads only the [[tokens.issuer]] tables of a ferry.toml.
    let config = site.path("ferry.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:1\"\n\n[[tokens.issuer]]\nurl = \"{}\"\n\
             audiences = [\"{AUDIENCE}\"]\naccount = \"nobody\"\n",
            issuer.url
        ),
    )
    .unwrap();
    site.kill_service();
    site.service_args = vec![
        "--token-issuers".into(),
        config.to_string_lossy().into_owned(),
    ];
    site.service_env = vec![(
        "SSL_CERT_FILE".into(),
        issuer.ca_cert.to_string_lossy().into_owned(),
    )];
    site.start_service();
    let token = issuer.sign("ES256", issuer.claims("storage.read:/", -10, 600));
    let who = format!("robot@{}", issuer.url);

    // FTS3's client, on the token alone (no proxy given).
    let fts = |tool: &str, args: &[&str]| {
        let url = format!("https://localhost:{}", site.service_port);
        let out = Command::new(Path::new(FTS3_BIN).join(tool))
            .args(["-s", &url])
            .args(args)
            .env("X509_CERT_DIR", site.path("ca/certificates"))
            .env("X509_USER_PROXY", site.path("no-proxy.pem"))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success() && !text.contains("Traceback"), text)
    };
    let (ok, me) = fts("fts-rest-whoami", &["--fts-access-token", &token]);
    assert!(ok && me.contains(&format!("User DN: {who}")), "{me}");
    // Per-file tokens for gsiftp:// are refused with the reason, and nothing is queued.
    let (ok, out) = fts(
        "fts-rest-transfer-submit",
        &[
            "--fts-access-token",
            &token,
            "--src-access-token",
            "source-secret",
            "--dst-access-token",
            "dest-secret",
            &site.url("in.bin"),
            &site.url("out.bin"),
        ],
    );
    assert!(
        !ok && out.contains("none of which can carry a bearer token"),
        "{out}"
    );
    assert!(!out.contains("source-secret"), "{out}");
    // A token past its expiry, or from an issuer the service does not trust: 401 and why.
    let expired = issuer.sign("ES256", issuer.claims("storage.read:/", -1200, -600));
    let (ok, out) = fts("fts-rest-whoami", &["--fts-access-token", &expired]);
    assert!(!ok && out.contains("expired"), "{out}");

    // ferry's own commands find the token where WLCG's discovery says: BEARER_TOKEN_FILE.
    let file = site.path("bt");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let ferry = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(args)
            .env("X509_CERT_DIR", site.path("ca/certificates"))
            .env("X509_USER_PROXY", site.path("no-proxy.pem"))
            .env("BEARER_TOKEN_FILE", &file)
            .env("XDG_CONFIG_HOME", site.path("config"))
            .env(
                "FERRY_SERVICE",
                format!("https://localhost:{}", site.service_port),
            )
            .output()
            .unwrap()
    };
    let out = ferry(&["submit", &site.url("in.bin"), &site.url("out.bin")]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = text.lines().last().unwrap_or_default().trim().to_owned();
    let out = ferry(&["job", &id, "--json"]);
    let job: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(job["job"]["user_dn"], who.as_str(), "{job}");
    let out = ferry(&["jobs", "--all", "--json"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&id),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where scripts/install-deps puts playwright-core (npm), which drives Debian's Chromium.
const PLAYWRIGHT: &str = "/opt/ferry-test/playwright";

#[test]
fn the_dashboard_shows_a_job_go_active_and_finish_live_in_chromium() {
    let have = Path::new(PLAYWRIGHT)
        .join("node_modules/playwright-core")
        .exists()
        && Path::new("/usr/bin/chromium").exists()
        && Command::new("node").arg("--version").output().is_ok();
    if !have {
        assert!(
            std::env::var_os("FERRY_REQUIRE_FTPD").is_none(),
            "Chromium, node or playwright-core is missing, though scripts/install-deps ran as root"
        );
        eprintln!("skipping: needs /usr/bin/chromium, node and {PLAYWRIGHT}/node_modules/playwright-core (bash scripts/install-deps as root)");
        return;
    }
    let site = Site::start();
    // Slow enough (one stream, small TCP buffers) that the page sees it ACTIVE.
    common::write_marked_pattern_file(&site.path("root/big.bin"), 512, 3);
    let out = site.ferry(&[
        "submit",
        &site.url("big.bin"),
        &site.url("big-copy.bin"),
        "--streams",
        "1",
        "--tcp-bs",
        "4096",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-artifacts");
    std::fs::create_dir_all(&shots).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/dashboard.mjs");
    let run = Command::new("node")
        .arg(&script)
        .env(
            "FERRY_URL",
            format!("https://localhost:{}", site.service_port),
        )
        .env("FERRY_TOKEN", DASHBOARD_TOKEN)
        .env("FERRY_JOB", &job)
        .env("FERRY_SHOTS", &shots)
        .env("PLAYWRIGHT", PLAYWRIGHT)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}\n{}\nservice log:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
        std::fs::read_to_string(site.path("service.log")).unwrap_or_default()
    );
    assert!(shots.join("dashboard-finished.png").exists());
    eprintln!("screenshots: {}", shots.display());
    same_file(&site.path("root/big.bin"), &site.path("root/big-copy.bin"));
    // Prometheus' view of the same: the bytes moved and the finished attempt. The
    // per-state gauges are sampled once a second, so the page may see FINISHED first.
    let deadline = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let m = http_get(site.metrics_port, "/metrics");
        if m.contains("ferry_service_files{state=\"FINISHED\"} 1") || Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let moved = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ferry_service_moved_bytes_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no moved bytes in\n{metrics}"));
    assert_eq!(moved as u64, 512 << 20, "{metrics}");
    assert!(
        metrics.contains("ferry_service_attempts_total{result=\"finished\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ferry_service_files{state=\"FINISHED\"} 1"),
        "{metrics}"
    );
}

/// A plain HTTP GET on loopback (the metrics endpoint).
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// A second service host on the site's shared queue.
fn second_host(site: &Site, port: u16) -> Child {
    let host = site.path("ca/hosts/localhost");
    let log = std::fs::File::create(site.path("service-b.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(["service", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--database")
        .arg(site.database.as_deref().unwrap())
        .args([
            "--host-id",
            "host-b",
            "--host-timeout",
            "3",
            "--optimizer-interval",
            "2",
        ])
        .arg("--host-cert")
        .arg(host.join("hostcert.pem"))
        .arg("--host-key")
        .arg(host.join("hostkey.pem"))
        .arg("--cert-dir")
        .arg(site.path("ca/certificates"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_listening(port, "the second ferry service");
    child
}

#[test]
fn two_service_hosts_share_a_postgres_queue_and_one_finishes_what_a_killed_one_was_moving() {
    let Some(pg) = pg::or_skip() else { return };
    let url = pg.database("ferry_two_hosts");
    let mut site = Site::start_with(Some(url));
    const FILES: usize = 10;
    for i in 0..FILES {
        common::write_marked_pattern_file(&site.path(&format!("root/f{i}")), 32, i as u64);
    }
    let list = site.path("list");
    let lines: String = (0..FILES)
        .map(|i| {
            format!(
                "{} {}\n",
                site.url(&format!("f{i}")),
                site.url(&format!("g{i}"))
            )
        })
        .collect();
    std::fs::write(&list, lines).unwrap();
    // Slow (one stream, small buffers) so that host A is moving files when it dies.
    let out = site.ferry(&[
        "submit",
        "--file",
        list.to_str().unwrap(),
        "--streams",
        "1",
        "--tcp-bs",
        "4096",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    // A has claimed its first files; B joins, then A dies.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let j = site.job(&id);
        let active = j["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["file_state"] == "ACTIVE")
            .count();
        if active > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "host A started nothing: {j}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let b_port = free_port();
    let mut b = second_host(&site, b_port);
    site.kill_service();
    // From now on host B answers: the client follows it.
    let b_url = format!("https://localhost:{b_port}");
    let ask_b = |args: &[&str]| {
        let mut full = args.to_vec();
        full.extend(["--service", &b_url]);
        site.ok(&full)
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    let j: serde_json::Value = loop {
        let j: serde_json::Value =
            serde_json::from_str(&ask_b(&["job", &id, "--attempts", "--json"])).unwrap();
        let state = j["job"]["job_state"].as_str().unwrap_or("").to_owned();
        if !matches!(state.as_str(), "SUBMITTED" | "ACTIVE") {
            break j;
        }
        assert!(Instant::now() < deadline, "still {state}: {j}");
        std::thread::sleep(Duration::from_millis(300));
    };
    let _ = b.kill();
    let _ = b.wait();
    assert_eq!(j["job"]["job_state"], "FINISHED", "{j}");
    for i in 0..FILES {
        same_file(
            &site.path(&format!("root/f{i}")),
            &site.path(&format!("root/g{i}")),
        );
    }
    // The files A was moving were taken back (after A's heartbeat stopped) and finished by B;
    // no other file ran twice.
    let attempts = j["attempts"].as_array().unwrap();
    let taken_back = attempts
        .iter()
        .filter(|a| {
            a[0]["error"]
                .as_str()
                .is_some_and(|e| e.contains("service stopped"))
        })
        .count();
    assert!(
        taken_back >= 1,
        "no file of the dead host was taken back: {j}"
    );
    for a in attempts {
        let n = a.as_array().unwrap().len();
        let first_died = a[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("service stopped"));
        assert!(
            n == 1 || (n == 2 && first_died),
            "a file ran twice without cause: {j}"
        );
        if first_died {
            assert_eq!(
                a[1]["host"], "host-b",
                "the file taken back ran on the host that lived: {j}"
            );
        }
    }
    let log_b = std::fs::read_to_string(site.path("service-b.log")).unwrap_or_default();
    assert!(
        log_b.contains("took back the files of a service host that stopped"),
        "{log_b}"
    );
}

#[test]
fn the_service_copies_between_globus_servers_and_ferry_both_ways() {
    if let Some(why) = common::ServerKind::Globus.missing() {
        assert!(
            std::env::var_os("FERRY_REQUIRE_FTPD").is_none(),
            "globus-gridftp-server is missing, though scripts/install-deps ran as root"
        );
        eprintln!("{why}");
        return;
    }
    let site = Site::start();
    let sandbox = common::Sandbox::new();
    let (groot, froot) = (sandbox.served_dir("globus"), sandbox.served_dir("ferry"));
    let globus = common::ServerUnderTest::start_kind(common::ServerKind::Globus, &groot);
    let ferry = common::ServerUnderTest::start_kind(common::ServerKind::Ferry, &froot);
    let big = random_bytes(24 << 20, 21);
    write_file(&groot.join("big.bin"), &big);
    let small: Vec<Vec<u8>> = (0..5)
        .map(|i| random_bytes(3000 + i, 30 + i as u64))
        .collect();
    for (i, b) in small.iter().enumerate() {
        write_file(&groot.join(format!("s{i}")), b);
    }
    // Globus → ferry: one large file and a pipeline of small ones (sizes from Globus' MLSD).
    let list = site.path("globus-to-ferry");
    let mut lines = format!(
        "{} {}\n",
        globus.url_for("big.bin"),
        ferry.url_for("big.bin")
    );
    for i in 0..small.len() {
        lines += &format!(
            "{} {}\n",
            globus.url_for(&format!("s{i}")),
            ferry.url_for(&format!("s{i}"))
        );
    }
    std::fs::write(&list, lines).unwrap();
    site.ok(&["submit", "--file", list.to_str().unwrap(), "--wait"]);
    same_file(&groot.join("big.bin"), &froot.join("big.bin"));
    for i in 0..small.len() {
        same_file(&groot.join(format!("s{i}")), &froot.join(format!("s{i}")));
    }
    // ferry → Globus, verified (both ends answer CKSM).
    let out = site.ok(&[
        "submit",
        &ferry.url_for("big.bin"),
        &globus.url_for("back.bin"),
        "--checksum",
        "ADLER32",
        "--wait",
    ]);
    let id = out.lines().next().unwrap_or_default().trim().to_owned();
    same_file(&groot.join("big.bin"), &groot.join("back.bin"));
    let j = site.job(&id);
    assert_eq!(
        j["files"][0]["checksum"],
        format!("ADLER32:{:08x}", adler32(&big)),
        "{j}"
    );
}
