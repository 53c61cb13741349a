//! Presentation of copy events: a progress bar on a terminal, JSON lines with `--json`, quiet
//! otherwise.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

use std::time::Duration;

use ferry_client::{CopyEvent, EventSink};

use crate::exit;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How to show progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// Progress bar when stderr is a terminal, a summary line at the end.
    Human { verbose: bool },
    /// One JSON object per event on stdout.
    Json,
    /// Nothing but errors.
    Quiet,
}

/// `--json`, `-v` and `-q`, shared by the copy commands.
#[derive(Debug, clap::Args)]
pub(crate) struct OutputArgs {
    /// Print one JSON object per event on stdout.
    #[arg(long)]
    json: bool,
    /// Print each file and its figures.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Print nothing but errors.
    #[arg(short = 'q', long)]
    quiet: bool,
}

impl OutputArgs {
    /// The output mode (JSON wins over quiet, quiet over verbose).
    pub(crate) fn output(&self) -> Output {
        if self.json {
            Output::Json
        } else if self.quiet {
            Output::Quiet
        } else {
            Output::Human {
                verbose: self.verbose,
            }
        }
    }
}

struct State {
    bar: Option<ProgressBar>,
    files: usize,
    done: usize,
    base: u64,
    current: std::collections::HashMap<usize, u64>,
    /// Forwarding hops already said to have failed.
    named: std::collections::HashSet<String>,
}

/// An event sink for `output`.
pub(crate) fn sink(output: Output) -> EventSink {
    match output {
        Output::Json => Arc::new(|ev: CopyEvent| {
            if let Ok(line) = serde_json::to_string(&ev) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
            }
        }),
        Output::Quiet => Arc::new(|ev: CopyEvent| {
            if let CopyEvent::Failed { error, .. } = ev {
                eprintln!("ferry: {error}");
            }
        }),
        Output::Human { verbose } => {
            let state = Arc::new(Mutex::new(State {
                bar: None,
                files: 0,
                done: 0,
                base: 0,
                current: Default::default(),
                named: Default::default(),
            }));
            Arc::new(move |ev: CopyEvent| {
                let Ok(mut s) = state.lock() else { return };
                human(&mut s, ev, verbose);
            })
        }
    }
}

fn human(s: &mut State, ev: CopyEvent, verbose: bool) {
    match ev {
        CopyEvent::Planned { files, bytes } => {
            s.files = files;
            if std::io::stderr().is_terminal() {
                let bar =
                    ProgressBar::with_draw_target(Some(bytes.max(1)), ProgressDrawTarget::stderr());
                bar.set_style(
                    ProgressStyle::with_template(
                        "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta} {msg}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                s.bar = Some(bar);
            }
        }
        CopyEvent::Started { file, src, dst, .. } => {
            s.current.insert(file, 0);
            if let Some(b) = &s.bar {
                b.set_message(format!("[{}/{}] {src}", s.done + 1, s.files));
            }
            if verbose {
                line(s, format!("{src} -> {dst}"));
            }
        }
        CopyEvent::Bytes { file, bytes } => {
            s.current.insert(file, bytes);
            let total = s.base + s.current.values().sum::<u64>();
            if let Some(b) = &s.bar {
                b.set_position(total);
            }
        }
        // Checkpoints matter to programs reading `--json`, not to a person watching.
        CopyEvent::Stored { .. } => {}
        CopyEvent::Retry {
            attempt,
            resumed_bytes,
            error,
            ..
        } => {
            line(
                s,
                format!(
                    "retrying (attempt {attempt}, resuming after {resumed_bytes} bytes): {error}"
                ),
            );
        }
        CopyEvent::Done {
            file,
            bytes,
            seconds,
            streams,
            skipped,
            checksum,
            ..
        } => {
            s.current.remove(&file);
            s.base += bytes;
            s.done += 1;
            if let Some(b) = &s.bar {
                b.set_position(s.base + s.current.values().sum::<u64>());
            }
            if verbose {
                let what = if skipped {
                    "skipped (up to date)".to_string()
                } else {
                    format!(
                        "{bytes} bytes in {seconds:.2} s ({:.1} MB/s, {streams} streams)",
                        bytes as f64 / seconds.max(1e-9) / 1e6
                    )
                };
                let sum = checksum
                    .map(|c| format!(", checksum {c}"))
                    .unwrap_or_default();
                line(s, format!("  {what}{sum}"));
            }
        }
        CopyEvent::Warning { message } => line(s, format!("ferry: warning: {message}")),
        CopyEvent::Note { message } => {
            if verbose {
                line(s, format!("ferry: {message}"));
            }
        }
        CopyEvent::ForwardFailed {
            url, held, error, ..
        } => {
            // Said as the tree reports it, and again in its final reply: once here.
            if s.named.insert(url.clone()) {
                let held = ferry_proto::RangeSet::parse(&held).map_or(0, |r| r.total());
                line(
                    s,
                    format!(
                        "ferry: {url} failed ({} there and below); the other destinations go on: {error}",
                        if held == 0 { "nothing stored".to_string() } else { format!("{} stored", human_bytes(held)) }
                    ),
                );
            }
        }
        CopyEvent::Failed { error, .. } => {
            s.done += 1;
            line(s, format!("ferry: {error}"));
        }
    }
}

fn line(s: &State, text: String) {
    match &s.bar {
        Some(b) => b.println(text),
        None => eprintln!("{text}"),
    }
}

pub(crate) use ferry_client::human_bytes;

/// The runtime copies run on; `None` (and a message) when it cannot start.
pub(crate) fn runtime() -> Option<tokio::runtime::Runtime> {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    crate::serve::init_logging(Some(&filter));
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("ferry: cannot start runtime: {e}");
            None
        }
    }
}

/// Prints a copy's failure with its hint; returns its exit code.
pub(crate) fn report(e: &ferry_client::ClientError) -> u8 {
    eprintln!("ferry: {e}");
    if let Some(h) = exit::hint(e) {
        eprintln!("  hint: {h}");
    }
    exit::code(e.class())
}

/// The closing line of a copy: files, bytes, time and rate.
pub(crate) fn summary(done: usize, failed: usize, bytes: u64, elapsed: Duration) {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let failed = if failed > 0 {
        format!(", {failed} failed")
    } else {
        String::new()
    };
    eprintln!(
        "{done} file{} copied{failed}: {bytes} bytes in {secs:.2} s ({:.1} MB/s)",
        if done == 1 { "" } else { "s" },
        bytes as f64 / secs / 1e6
    );
}
