//! Running the `ferry` client (`ferry copy`, `ferry url-copy`, `ferry ls` ...) with a timeout and
//! captured output. The client logs its control-channel dialogue (`ferry_client::control=debug`)
//! so that a failing test can show what was said to the servers.

use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use super::capture::indent;
use super::files::{compare_bytes, compare_files, compare_trees};
use super::guc::SHOW_DIALOGUE_ENV;
use super::process::Running;

/// How long one ferry run may take unless a test says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);

/// Log filter for every run: warnings, and each command and reply on the control channel.
const LOG_FILTER: &str = "warn,ferry_client::control=debug";

/// The tracing target whose lines carry the control dialogue.
const DIALOGUE_TARGET: &str = "ferry_client::control: ";

/// Runs `ferry ARGS` to completion (or [`DEFAULT_TIMEOUT`]).
pub fn run_ferry(args: &[&str]) -> FerryOutput {
    spawn_ferry(args).wait(DEFAULT_TIMEOUT)
}

/// Runs `ferry ARGS` with `cache` as its cache directory (`XDG_CACHE_HOME`: gcp's per-path
/// tuning), so that runs of one test share what they learn.
pub fn run_ferry_with_cache(args: &[&str], cache: &Path) -> FerryOutput {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
    cmd.args(&args)
        .env("RUST_LOG", LOG_FILTER)
        .env("XDG_CACHE_HOME", cache);
    FerryProcess(Running::spawn(cmd, args, None, "the ferry binary")).wait(DEFAULT_TIMEOUT)
}

/// Runs `ferry ARGS` with `input` on its standard input.
pub fn run_ferry_with_input(args: &[&str], input: &[u8]) -> FerryOutput {
    spawn(args, Some(input)).wait(DEFAULT_TIMEOUT)
}

/// Starts `ferry ARGS` without waiting for it.
pub fn spawn_ferry(args: &[&str]) -> FerryProcess {
    spawn(args, None)
}

fn spawn(args: &[&str], input: Option<&[u8]>) -> FerryProcess {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferry"));
    cmd.args(&args)
        .env("RUST_LOG", LOG_FILTER)
        .env("XDG_CACHE_HOME", fresh_cache());
    FerryProcess(Running::spawn(cmd, args, input, "the ferry binary"))
}

/// An empty cache directory of its own for each run (gcp learns per path; no run sees another's,
/// and none writes to the user's ~/.cache).
fn fresh_cache() -> std::path::PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cache-{}-{n}", std::process::id()))
}

/// A ferry run in progress.
pub struct FerryProcess(Running);

impl FerryProcess {
    /// What the process has written to stderr so far (log lines, messages).
    pub fn stderr_so_far(&self) -> String {
        self.0.stderr_so_far()
    }

    /// What the process has written to stdout so far (`--json` events).
    pub fn stdout_so_far(&self) -> String {
        self.0.stdout_so_far()
    }

    /// Whether the process has exited.
    pub fn has_exited(&mut self) -> bool {
        self.0.has_exited()
    }

    /// Waits for the process to exit, killing it once `timeout` has passed since it started.
    pub fn wait(self, timeout: Duration) -> FerryOutput {
        let f = self.0.finish(timeout);
        let output = FerryOutput {
            args: f.args,
            status: f.status,
            timeout,
            elapsed: f.elapsed,
            stdout: f.stdout,
            stderr: f.stderr,
        };
        if std::env::var_os(SHOW_DIALOGUE_ENV).is_some() {
            eprintln!(
                "ferry {} ({:?} after {:.1?}):\n{}",
                output.args.join(" "),
                output.status,
                output.elapsed,
                indent(&output.dialogue(), "    ")
            );
        }
        output
    }
}

/// What a finished ferry run printed and how it ended.
pub struct FerryOutput {
    /// Arguments after `ferry`.
    pub args: Vec<String>,
    /// Exit status; `None` when it was killed at the timeout.
    pub status: Option<ExitStatus>,
    /// The timeout the run had.
    pub timeout: Duration,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Standard output (`--json` events, listings, checksums).
    pub stdout: String,
    /// Standard error: messages, hints and the control dialogue.
    pub stderr: String,
}

impl FerryOutput {
    /// The exit code; `None` when killed (by the timeout or a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// Panics, showing the run, unless it exited with status 0.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        self.assert_exit(0)
    }

    /// Panics, showing the run, unless it exited with `code`.
    #[track_caller]
    pub fn assert_exit(&self, code: i32) -> &Self {
        if self.code() != Some(code) {
            self.fail(&format!("expected exit code {code}"));
        }
        self
    }

    /// Panics with `what`, the command line, how it ended, its output and control dialogue.
    #[track_caller]
    pub fn fail(&self, what: &str) -> ! {
        let ended = match self.status {
            Some(status) => format!("{status}"),
            None => format!("killed after the {:?} timeout", self.timeout),
        };
        let messages: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| !l.contains(DIALOGUE_TARGET) && !l.starts_with("     "))
            .collect();
        let stdout: Vec<&str> = self.stdout.lines().collect();
        let stdout_tail = &stdout[stdout.len().saturating_sub(30)..];
        panic!(
            "{what}\n  command: ferry {}\n  ended: {ended} after {:.1?}\n  messages:\n{}\n  \
             stdout (last lines):\n{}\n  control channel dialogue:\n{}",
            self.args.join(" "),
            self.elapsed,
            indent(&messages.join("\n"), "    "),
            indent(&stdout_tail.join("\n"), "    "),
            indent(&self.dialogue(), "    "),
        );
    }

    /// Asserts success and that the file at `actual` has the same bytes as the file at `expected`.
    #[track_caller]
    pub fn assert_same_file(&self, expected: &Path, actual: &Path) {
        self.assert_success();
        if let Err(e) = compare_files(expected, actual) {
            self.fail(&e);
        }
    }

    /// Asserts success and that the file at `actual` holds exactly `expected`.
    #[track_caller]
    pub fn assert_bytes(&self, expected: &[u8], actual: &Path) {
        self.assert_success();
        if let Err(e) = compare_bytes(expected, actual) {
            self.fail(&e);
        }
    }

    /// Asserts success and that the tree at `actual` has the same names and bytes as `expected`.
    #[track_caller]
    pub fn assert_same_tree(&self, expected: &Path, actual: &Path) {
        self.assert_success();
        if let Err(e) = compare_trees(expected, actual) {
            self.fail(&e);
        }
    }

    /// Standard output as one JSON document (`ls`, `stat`, `cksum` with `--json`).
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| self.fail(&format!("stdout is not one JSON document: {e}")))
    }

    /// Standard output as JSON lines (`copy --json`): every event, in order.
    #[track_caller]
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| self.fail(&format!("stdout line {l:?} is not JSON: {e}")))
            })
            .collect()
    }

    /// The `--json` events of one kind (`done`, `retry`, `failed` ...).
    #[track_caller]
    pub fn events_named(&self, name: &str) -> Vec<serde_json::Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == name)
            .collect()
    }

    /// The control channel exchange: `> command` and `< reply` lines, each after the server's
    /// address (`127.0.0.1:PORT > RETR /x`).
    pub fn dialogue(&self) -> String {
        // Continuation lines of multi-line replies (FEAT) are left out: long and rarely the point.
        self.stderr
            .lines()
            .filter_map(|l| l.split_once(DIALOGUE_TARGET).map(|(_, said)| said))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The commands sent to the server on `port`, in order.
    pub fn commands_to(&self, port: u16) -> Vec<String> {
        let prefix = format!("127.0.0.1:{port} > ");
        self.dialogue()
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(str::to_owned)
            .collect()
    }
}
