//! Running the real `globus-url-copy` with `-dbg`, a timeout, and captured output, so a failing
//! test can show the control-channel dialogue it had with the server.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use super::capture::indent;
use super::files::{compare_bytes, compare_files, compare_trees};
use super::find_executable;
use super::process::Running;

/// Set (with `--nocapture`) to print every run's control channel dialogue, passing or not.
pub const SHOW_DIALOGUE_ENV: &str = "FERRY_INTEROP_DIALOGUE";

/// How long one globus-url-copy run may take unless a test says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);

/// The installed globus-url-copy, if any.
pub fn globus_url_copy_path() -> Option<PathBuf> {
    find_executable("globus-url-copy", &["/usr/bin", "/usr/local/bin"])
}

/// Runs `globus-url-copy -dbg ARGS` to completion (or [`DEFAULT_TIMEOUT`]).
pub fn run_guc(args: &[&str]) -> GucOutput {
    spawn_guc(args).wait(DEFAULT_TIMEOUT)
}

/// Starts `globus-url-copy -dbg ARGS` without waiting for it.
pub fn spawn_guc(args: &[&str]) -> GucProcess {
    let program = globus_url_copy_path().expect("globus-url-copy not installed");
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let mut cmd = Command::new(program);
    cmd.arg("-dbg").args(&args);
    GucProcess(Running::spawn(cmd, args, None, "globus-url-copy"))
}

/// A globus-url-copy run in progress.
pub struct GucProcess(Running);

impl GucProcess {
    /// The `-dbg` output (stderr) produced so far.
    pub fn stderr_so_far(&self) -> String {
        self.0.stderr_so_far()
    }

    /// Whether the process has exited.
    pub fn has_exited(&mut self) -> bool {
        self.0.has_exited()
    }

    /// Waits for the process to exit, killing it after `timeout`.
    pub fn wait(self, timeout: Duration) -> GucOutput {
        let f = self.0.finish(timeout);
        let output = GucOutput {
            args: f.args,
            status: f.status,
            timeout,
            elapsed: f.elapsed,
            stdout: f.stdout,
            stderr: f.stderr,
        };
        if std::env::var_os(SHOW_DIALOGUE_ENV).is_some() {
            eprintln!(
                "globus-url-copy -dbg {} ({:?} after {:.1?}):\n{}",
                output.args.join(" "),
                output.status,
                output.elapsed,
                indent(&output.dialogue(), "    ")
            );
        }
        output
    }
}

/// What a finished globus-url-copy run printed and how it ended.
pub struct GucOutput {
    /// Arguments after `-dbg`.
    pub args: Vec<String>,
    /// Exit status; `None` when it was killed at the timeout.
    pub status: Option<ExitStatus>,
    /// The timeout the run had.
    pub timeout: Duration,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Standard output (listings, `-list` output).
    pub stdout: String,
    /// Standard error: the `-dbg` trace and any error message.
    pub stderr: String,
}

impl GucOutput {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Panics, showing the dialogue, unless the run exited with status 0.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        if !self.success() {
            self.fail("globus-url-copy failed");
        }
        self
    }

    /// Panics with `what`, the command line, how it ended, its errors and its control dialogue.
    #[track_caller]
    pub fn fail(&self, what: &str) -> ! {
        let ended = match self.status {
            Some(status) => format!("{status}"),
            None => format!("killed after the {:?} timeout", self.timeout),
        };
        // globus-url-copy ends with `error: ...` and its continuation lines.
        let errors: Vec<&str> = self
            .stderr
            .lines()
            .skip_while(|l| !l.starts_with("error:"))
            .filter(|l| !l.starts_with("debug:") && !l.trim().is_empty())
            .collect();
        panic!(
            "{what}\n  command: globus-url-copy -dbg {}\n  ended: {ended} after {:.1?}\n  \
             client messages:\n    {}\n  control channel dialogue:\n{}",
            self.args.join(" "),
            self.elapsed,
            if errors.is_empty() {
                "(none)".to_owned()
            } else {
                errors.join("\n    ")
            },
            indent(&self.dialogue(), "    "),
        );
    }

    /// Asserts that the file at `actual` has the same bytes as the file at `expected`.
    #[track_caller]
    pub fn assert_same_file(&self, expected: &Path, actual: &Path) {
        self.assert_success();
        if let Err(e) = compare_files(expected, actual) {
            self.fail(&e);
        }
    }

    /// Asserts that the file at `actual` holds exactly `expected`.
    #[track_caller]
    pub fn assert_bytes(&self, expected: &[u8], actual: &Path) {
        self.assert_success();
        if let Err(e) = compare_bytes(expected, actual) {
            self.fail(&e);
        }
    }

    /// Asserts that the tree at `actual` has the same names and file bytes as `expected`.
    #[track_caller]
    pub fn assert_same_tree(&self, expected: &Path, actual: &Path) {
        self.assert_success();
        if let Err(e) = compare_trees(expected, actual) {
            self.fail(&e);
        }
    }

    /// The control channel exchange from the `-dbg` trace, one line per command or reply.
    pub fn dialogue(&self) -> String {
        control_dialogue(&self.stderr)
    }

    /// Commands the client sent, in order, with a server tag (`A`, `B`) in third-party runs.
    pub fn commands(&self) -> Vec<String> {
        self.dialogue()
            .lines()
            .filter_map(|l| l.strip_prefix("> "))
            .map(str::to_owned)
            .collect()
    }

    /// Replies the client received, in order (multi-line replies joined with ` | `).
    pub fn replies(&self) -> Vec<String> {
        self.dialogue()
            .lines()
            .filter_map(|l| l.strip_prefix("< "))
            .map(str::to_owned)
            .collect()
    }
}

const FAULT_PREFIX: &str = "debug: fault on connection to ";

/// Extracts `> command`, `< reply` and `! fault` lines from a `-dbg` trace. When more than one server
/// took part, each line carries `A` (the first server seen) or `B` after the arrow.
pub fn control_dialogue(trace: &str) -> String {
    let lines: Vec<&str> = trace.lines().collect();
    let mut events: Vec<(&str, &str, String)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(url) = debug_target(lines[i], "debug: sending command to ") {
            let command = lines.get(i + 1).copied().unwrap_or_default().to_owned();
            events.push((">", url, command));
            i += 2;
        } else if let Some(url) = debug_target(lines[i], "debug: response from ") {
            let mut reply = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].starts_with("debug:") {
                let line = lines[i].trim_end();
                if !line.is_empty() {
                    reply.push(line.trim_start());
                }
                i += 1;
            }
            events.push(("<", url, reply.join(" | ")));
        } else if let Some(url) = debug_target(lines[i], FAULT_PREFIX) {
            let message = lines[i][FAULT_PREFIX.len()..]
                .split_once(": ")
                .map_or("", |(_, m)| m);
            events.push(("!", url, format!("fault: {message}")));
            i += 1;
        } else {
            i += 1;
        }
    }
    let mut hosts: Vec<&str> = Vec::new();
    for (_, url, _) in &events {
        if !hosts.contains(url) {
            hosts.push(url);
        }
    }
    events
        .iter()
        .map(|(arrow, url, text)| {
            let tag = match hosts.iter().position(|h| h == url) {
                _ if hosts.len() < 2 => String::new(),
                Some(0) => "A ".to_owned(),
                _ => "B ".to_owned(),
            };
            format!("{arrow} {tag}{}", shorten(text))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `host:port` of the URL in a `-dbg` line such as `debug: sending command to ftp://h:p/x:`.
fn debug_target<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    let url = line.strip_prefix(prefix)?;
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    Some(
        after_scheme
            .split('/')
            .next()
            .unwrap_or(after_scheme)
            .trim_end_matches(':'),
    )
}

fn shorten(text: &str) -> String {
    // SITE HELP and FEAT replies are long and rarely what a failure is about.
    if (text.starts_with("214-") || text.starts_with("211-")) && text.len() > 120 {
        let end = text.char_indices().nth(100).map_or(text.len(), |(i, _)| i);
        format!("{} ...", &text[..end])
    } else {
        text.to_owned()
    }
}
