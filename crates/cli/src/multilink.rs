//! `ferry copy --to-many` and `--via`: the copy is `ferry_client::multilink`'s; this shows it.

use std::time::Duration;

use ferry_client::multilink::{copy_to_many, Tree, Watch};
use ferry_client::{ClientError, CopyOptions, CopySummary, EventSink, Location};

use crate::exit;
use crate::present::{self, report, runtime, summary, Output};

/// Shows a one-to-many copy as `ferry copy` shows one copy.
struct Shown {
    output: Output,
}

impl Watch for Shown {
    fn say(&self, line: &str, detail: bool) {
        let verbose = matches!(self.output, Output::Human { verbose: true });
        if !detail || verbose || self.output == Output::Json {
            eprintln!("ferry: {line}");
        }
    }

    fn events(&self) -> EventSink {
        present::sink(self.output)
    }

    fn copied(&self, result: &Result<CopySummary, ClientError>, elapsed: Duration) {
        match result {
            Ok(s) if self.output != Output::Json && self.output != Output::Quiet => {
                summary(s.done, s.failed, s.bytes, elapsed)
            }
            Ok(_) => {}
            Err(e) => {
                report(e);
            }
        }
    }
}

/// Copies `sources` (one file) with `options` to every destination of `tree`.
pub(crate) fn run(sources: &[Location], options: &CopyOptions, output: Output, tree: Tree) -> u8 {
    let [source] = sources else {
        eprintln!("ferry copy: --to-many and --via copy one source file");
        return exit::USAGE;
    };
    let Some(rt) = runtime() else {
        return 1;
    };
    let shown = Shown { output };
    match rt.block_on(copy_to_many(source, &tree, options, &shown)) {
        Ok(()) => exit::OK,
        Err(class) => exit::code(class),
    }
}
