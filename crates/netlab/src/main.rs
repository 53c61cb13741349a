//! `ferry-netlab`: brings emulated networks up and down and runs commands in their hosts.
#![deny(unsafe_code)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use ferry_netlab::topology::{Lab, Topology};
use ferry_netlab::{emulate, lab, NetlabError};

/// Emulated wide-area and cluster networks: hosts in network namespaces, links (rate, delay,
/// jitter, loss, queue, MTU) through a userspace emulator. Needs root.
#[derive(Parser)]
#[command(name = "ferry-netlab", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Brings the lab in FILE up and leaves it running; prints each host's address.
    Up {
        /// Topology file (TOML; examples in bench/topologies/).
        file: PathBuf,
    },
    /// Tears a lab down: its emulator, namespaces and state.
    Down {
        /// Topology file of the lab.
        #[arg(required_unless_present = "all")]
        file: Option<PathBuf>,
        /// Every lab, including what a killed run left behind.
        #[arg(long, conflicts_with = "file")]
        all: bool,
    },
    /// Runs CMD in HOST's namespace of the running lab.
    Exec {
        /// Which lab, when more than one is up.
        #[arg(long)]
        lab: Option<String>,
        /// Host name.
        host: String,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
    /// Brings FILE's lab up, runs CMD (outside the hosts, with NETLAB_* variables naming them),
    /// and tears the lab down whatever CMD does; exits with CMD's status.
    Run {
        /// Topology file.
        file: PathBuf,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
    /// Prints HOST's address in the running lab.
    Addr {
        /// Which lab, when more than one is up.
        #[arg(long)]
        lab: Option<String>,
        /// Host name.
        host: String,
    },
    /// Prints the running lab's emulator counters as JSON: packets delivered, lost (random
    /// loss), dropped at a full queue, and unroutable.
    Stats {
        /// Which lab, when more than one is up.
        #[arg(long)]
        lab: Option<String>,
    },
    /// The emulator process of a lab (started by `up` and `run`).
    #[command(hide = true)]
    Emulate {
        /// Topology file.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ferry-netlab: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cmd: Cmd) -> Result<ExitCode> {
    if !lab::have_root() {
        return Err(NetlabError::NotRoot.into());
    }
    match cmd {
        Cmd::Up { file } => {
            let lab = load(&file)?;
            let child = start_emulator(&file, &lab, false)?;
            // The emulator lives on after us, in its own process group.
            drop(child);
            for h in &lab.hosts {
                println!("{} {} {}", h.name, h.addr, h.netns);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Down { file, all } => {
            if all {
                down_all();
            } else if let Some(file) = file {
                let lab = load(&file)?;
                down(&lab);
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Exec {
            lab: name,
            host,
            command,
        } => {
            let lab = running(name.as_deref())?;
            let h = lab.host(&host).ok_or_else(|| {
                NetlabError::NotUp(format!("lab '{}' has no host '{host}'", lab.name))
            })?;
            let err = Command::new("ip")
                .args(["netns", "exec", &h.netns])
                .args(&command)
                .envs(lab_env(&lab))
                .exec();
            bail!("cannot run ip netns exec: {err}")
        }
        Cmd::Run { file, command } => run(&file, &command),
        Cmd::Addr { lab: name, host } => {
            let lab = running(name.as_deref())?;
            let h = lab.host(&host).ok_or_else(|| {
                NetlabError::NotUp(format!("lab '{}' has no host '{host}'", lab.name))
            })?;
            println!("{}", h.addr);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Stats { lab: name } => {
            let lab = running(name.as_deref())?;
            let stats = std::fs::read_to_string(lab::stats_file(&lab.name))
                .with_context(|| format!("lab '{}' has no counters yet", lab.name))?;
            println!("{}", stats.trim());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Emulate { file } => emulate_main(&file),
    }
}

fn load(file: &Path) -> Result<Lab> {
    Ok(Topology::load(file)?.check()?)
}

/// The running lab named `name`, or the only one.
fn running(name: Option<&str>) -> Result<Lab> {
    let labs = lab::running_labs();
    let name = match (name, labs.as_slice()) {
        (Some(n), _) => n.to_string(),
        (None, [one]) => one.clone(),
        (None, []) => {
            return Err(NetlabError::NotUp("no lab is up (`ferry-netlab up FILE`)".into()).into())
        }
        (None, many) => bail!("several labs are up ({}): pass --lab NAME", many.join(", ")),
    };
    let (_, toml) = lab::state_files(&name);
    load(&toml).with_context(|| format!("lab '{name}' is not up"))
}

/// NETLAB_NAME, NETLAB_HOSTS and, per host, NETLAB_ADDR_<HOST> and NETLAB_NS_<HOST>.
fn lab_env(lab: &Lab) -> Vec<(String, String)> {
    let mut env = vec![
        ("NETLAB_NAME".to_string(), lab.name.clone()),
        (
            "NETLAB_HOSTS".to_string(),
            lab.hosts
                .iter()
                .map(|h| h.name.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        ),
    ];
    for h in &lab.hosts {
        let key = h.name.to_ascii_uppercase().replace('-', "_");
        env.push((format!("NETLAB_ADDR_{key}"), h.addr.to_string()));
        env.push((format!("NETLAB_NS_{key}"), h.netns.clone()));
    }
    env
}

/// Makes the child get SIGKILL when this process dies, however it dies: what `run` starts
/// must not outlive it (`down --all` then clears the namespaces).
fn die_with_parent(cmd: &mut Command) -> &mut Command {
    #[allow(unsafe_code)]
    // SAFETY: the closure runs in the forked child before exec and calls only prctl(2), which
    // is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// Starts `ferry-netlab emulate FILE` and waits until its lab is up; with `tied`, the emulator
/// dies with this process.
fn start_emulator(file: &Path, lab: &Lab, tied: bool) -> Result<Child> {
    std::fs::create_dir_all(lab::STATE_DIR)
        .with_context(|| format!("cannot create {}", lab::STATE_DIR))?;
    let (pid_file, _) = lab::state_files(&lab.name);
    if pid_file.exists() {
        bail!(
            "lab '{}' is already up (`ferry-netlab down {}` or `down --all`)",
            lab.name,
            file.display()
        );
    }
    let log = Path::new(lab::STATE_DIR).join(format!("fnl-{}.log", lab.name));
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("emulate")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?)
        .process_group(0);
    if tied {
        die_with_parent(&mut cmd);
    }
    let mut child = cmd.spawn().context("cannot start the emulator")?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    if line.trim() != "ready" {
        let _ = child.wait();
        let why = std::fs::read_to_string(&log).unwrap_or_default();
        bail!("the lab did not come up: {}", why.trim());
    }
    Ok(child)
}

fn emulate_main(file: &Path) -> Result<ExitCode> {
    let lab = load(file)?;
    let tuns = lab::create(&lab)?;
    let (pid_file, toml) = lab::state_files(&lab.name);
    std::fs::copy(file, &toml)?;
    std::fs::write(&pid_file, std::process::id().to_string())?;
    let counters = Arc::new(emulate::Counters::default());
    let (c, stats) = (Arc::clone(&counters), lab::stats_file(&lab.name));
    std::thread::spawn(move || loop {
        let tmp = stats.with_extension("stats.tmp");
        if std::fs::write(&tmp, c.to_json()).is_ok() {
            let _ = std::fs::rename(&tmp, &stats);
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    });
    {
        let mut out = std::io::stdout();
        writeln!(out, "ready")?;
        out.flush()?;
    }
    // After "ready" nothing more goes to stdout: whoever started us may have gone.
    let e = emulate::run(&lab, tuns, counters);
    lab::remove_namespaces(&lab);
    bail!("emulator stopped: {e}")
}

fn down(lab: &Lab) {
    let (pid_file, toml) = lab::state_files(&lab.name);
    if let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        lab::stop_emulator(pid);
    }
    lab::remove_namespaces(lab);
    let _ = std::fs::remove_file(pid_file);
    let _ = std::fs::remove_file(toml);
    let _ = std::fs::remove_file(Path::new(lab::STATE_DIR).join(format!("fnl-{}.log", lab.name)));
    let _ = std::fs::remove_file(lab::stats_file(&lab.name));
}

/// Every lab with state, then any emulator process and `fnl-` namespace left without it.
fn down_all() {
    for name in lab::running_labs() {
        let (_, toml) = lab::state_files(&name);
        if let Ok(l) = load(&toml) {
            down(&l);
        }
    }
    for pid in stray_emulators() {
        lab::stop_emulator(pid);
    }
    for ns in lab::stale_namespaces() {
        lab::remove_namespace(&ns);
    }
    if let Ok(dir) = std::fs::read_dir(lab::STATE_DIR) {
        for e in dir.flatten() {
            if e.file_name().to_string_lossy().starts_with("fnl-") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Pids of `ferry-netlab emulate` processes.
fn stray_emulators() -> Vec<i32> {
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc.flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| *pid != std::process::id() as i32)
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
            args.len() > 1 && args[0].ends_with(b"ferry-netlab") && args[1] == b"emulate"
        })
        .collect()
}

fn run(file: &Path, command: &[OsString]) -> Result<ExitCode> {
    let lab = load(file)?;
    let mut emulator = start_emulator(file, &lab, true)?;
    let status = die_with_parent(
        Command::new(&command[0])
            .args(&command[1..])
            .envs(lab_env(&lab)),
    )
    .status();
    let _ = emulator.kill();
    let _ = emulator.wait();
    down(&lab);
    let status = status.with_context(|| format!("cannot run {}", command[0].to_string_lossy()))?;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
        (None, Some(s)) => ExitCode::from((128 + s).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    })
}
