//! Documentation generated from the command definitions themselves, so it never drifts from
//! the flags: man pages (`ferry man DIR`, used by the Debian package), the book's command
//! reference (`ferry man --markdown FILE`, used by `scripts/book`) and shell completions
//! (`ferry completions SHELL [--for gcp]`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, CommandFactory};

/// `ferry completions` flags.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to write completions for (to standard output).
    shell: clap_complete::Shell,
    /// The command they complete: ferry, or gcp (ferry under its other name).
    #[arg(long = "for", value_name = "COMMAND", default_value = "ferry", value_parser = ["ferry", "gcp"])]
    program: String,
}

/// `ferry man` flags.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Directory to write ferry.1, ferry-serve.8, gcp.1 and a page per subcommand into; with
    /// --markdown, the Markdown file to write.
    dir: PathBuf,
    /// Write every command's reference as one Markdown file (the book's) instead.
    #[arg(long)]
    markdown: bool,
}

/// The command `program` stands for.
fn command(program: &str) -> clap::Command {
    let mut cmd = match program {
        "gcp" => crate::GcpCli::command(),
        _ => crate::Cli::command(),
    };
    cmd.build();
    cmd
}

pub(crate) fn completions(args: CompletionsArgs) -> anyhow::Result<()> {
    let mut cmd = command(&args.program);
    clap_complete::generate(args.shell, &mut cmd, &args.program, &mut std::io::stdout());
    Ok(())
}

pub(crate) fn man(args: ManArgs) -> anyhow::Result<()> {
    if args.markdown {
        let mut out = String::from(
            "# Commands\n\nEvery command and flag, generated from the command definitions by \
             `ferry man --markdown` (the man pages come from the same definitions).\n\n",
        );
        markdown(&command("ferry"), "ferry", &mut out);
        markdown(&command("gcp"), "gcp", &mut out);
        if let Some(parent) = args.dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&args.dir, out)
            .with_context(|| format!("cannot write {}", args.dir.display()))?;
        println!("{}", args.dir.display());
        return Ok(());
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let mut written = Vec::new();
    write_pages(&command("ferry"), "ferry", "ferry", &args.dir, &mut written)?;
    write_pages(&command("gcp"), "gcp", "gcp", &args.dir, &mut written)?;
    for page in written {
        println!("{}", page.display());
    }
    Ok(())
}

/// Appends the reference of `cmd` (typed as `invocation`) and of each visible subcommand: its
/// description, usage and a table of its arguments.
fn markdown(cmd: &clap::Command, invocation: &str, out: &mut String) {
    use std::fmt::Write as _;
    let _ = write!(out, "## `{invocation}`\n\n");
    // Help text is prose: a `<uid>` in it is not an HTML tag.
    let prose = |s: &str| s.replace('<', "&lt;").replace('>', "&gt;");
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = write!(out, "{}\n\n", prose(&about.to_string()));
    }
    let usage = cmd.clone().bin_name(invocation).render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ");
    let _ = write!(out, "```text\n{usage}\n```\n\n");
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !["help", "version"].contains(&a.get_id().as_str()))
        .collect();
    if !args.is_empty() {
        out.push_str("| argument | default | meaning |\n|---|---|---|\n");
        for a in args {
            let values = a
                .get_value_names()
                .map(|v| {
                    v.iter()
                        .map(|n| format!("<{n}>"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()));
            let takes = a.get_action().takes_values();
            let name = match (a.get_short(), a.get_long()) {
                (_, None) => values,
                (Some(s), Some(l)) if takes => format!("-{s}, --{l} {values}"),
                (Some(s), Some(l)) => format!("-{s}, --{l}"),
                (None, Some(l)) if takes => format!("--{l} {values}"),
                (None, Some(l)) => format!("--{l}"),
            };
            // A flag's `false` says nothing.
            let default = a
                .get_default_values()
                .iter()
                .filter(|_| takes)
                .map(|v| v.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(", ");
            let mut help = a
                .get_long_help()
                .or(a.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            let choices: Vec<String> = a
                .get_possible_values()
                .iter()
                .filter(|p| !p.is_hide_set())
                .map(|p| p.get_name().to_string())
                .collect();
            if !choices.is_empty() && !matches!(a.get_action(), clap::ArgAction::SetTrue) {
                let _ = write!(help, " (one of: {})", choices.join(", "));
            }
            let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
            let _ = writeln!(
                out,
                "| `{}` | {} | {} |",
                cell(&name),
                if default.is_empty() {
                    String::new()
                } else {
                    format!("`{}`", cell(&default))
                },
                prose(&cell(&help))
            );
        }
        out.push('\n');
    }
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        markdown(sub, &format!("{invocation} {}", sub.get_name()), out);
    }
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
