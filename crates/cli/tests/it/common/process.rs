//! A client process under test: started with piped output drained on threads, waited for with a
//! timeout (killed after it), and killed if a test panics first. `ferry.rs` and `guc.rs` wrap it.

use std::io::Write;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::capture::drain;

/// A process in progress.
pub struct Running {
    child: Child,
    args: Vec<String>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    started: Instant,
}

/// How a finished process ended and what it printed.
pub struct Finished {
    /// The arguments it was given (for messages).
    pub args: Vec<String>,
    /// Exit status; `None` when it was killed at the timeout.
    pub status: Option<ExitStatus>,
    /// Wall time.
    pub elapsed: Duration,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Running {
    /// Starts `cmd` (which already holds `args`), writing `input` to its standard input.
    pub fn spawn(mut cmd: Command, args: Vec<String>, input: Option<&[u8]>, what: &str) -> Running {
        let mut child = cmd
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
        if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(bytes)
                .unwrap_or_else(|e| panic!("writing to {what}'s standard input: {e}"));
        }
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            drain(
                child.stdout.take().expect("stdout is piped"),
                Arc::clone(&stdout),
            ),
            drain(
                child.stderr.take().expect("stderr is piped"),
                Arc::clone(&stderr),
            ),
        ];
        Running {
            child,
            args,
            stdout,
            stderr,
            readers,
            started: Instant::now(),
        }
    }

    /// What the process has written to stdout so far.
    pub fn stdout_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().expect("output buffer")).into_owned()
    }

    /// What the process has written to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().expect("output buffer")).into_owned()
    }

    /// Whether the process has exited.
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Waits for the process to exit, killing it once `timeout` has passed since it started.
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let deadline = self.started + timeout;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        let text = |buf: &Mutex<Vec<u8>>| {
            String::from_utf8_lossy(&buf.lock().expect("output buffer")).into_owned()
        };
        Finished {
            args: std::mem::take(&mut self.args),
            status,
            elapsed: self.started.elapsed(),
            stdout: text(&self.stdout),
            stderr: text(&self.stderr),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A test that panics before waiting must not leave the process running.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
