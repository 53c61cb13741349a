//! Documentation generated from the command definitions themselves, so it never drifts from
//! the flags: man pages (`ferry man DIR`, used by the Debian package) and shell completions
//! (`ferry completions SHELL`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, CommandFactory};

/// `ferry completions` flags.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to write completions for (to standard output).
    shell: clap_complete::Shell,
}

/// `ferry man` flags.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Directory to write ferry.1, ferry-serve.8 and a page per subcommand into.
    dir: PathBuf,
}

pub(crate) fn completions(args: CompletionsArgs) -> anyhow::Result<()> {
    let mut cmd = crate::Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "ferry", &mut std::io::stdout());
    Ok(())
}

pub(crate) fn man(args: ManArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let mut cmd = crate::Cli::command();
    cmd.build();
    let mut written = Vec::new();
    write_pages(&cmd, "ferry", "ferry", &args.dir, &mut written)?;
    for page in written {
        println!("{}", page.display());
    }
    Ok(())
}

/// Writes the page of `cmd` as `name` (typed as `invocation`), then one per visible
/// subcommand (`name-sub`, typed `invocation sub`). The server is an administrator's command:
/// section 8; the rest are section 1.
fn write_pages(
    cmd: &clap::Command,
    name: &str,
    invocation: &str,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> anyhow::Result<()> {
    let section = if name == "ferry-serve" { "8" } else { "1" };
    let page = cmd
        .clone()
        .name(name.to_string())
        .bin_name(invocation.to_string());
    let path = dir.join(format!("{name}.{section}"));
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .section(section)
        .manual("ferry manual")
        .render(&mut out)
        .context("cannot render a man page")?;
    std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
    written.push(path);
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let sub_name = sub.get_name();
        write_pages(
            sub,
            &format!("{name}-{sub_name}"),
            &format!("{invocation} {sub_name}"),
            dir,
            written,
        )?;
    }
    Ok(())
}
