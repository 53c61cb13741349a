//! Bringing a lab up and down: namespaces and interfaces through iproute2's `ip` (the tool every
//! admin reads; netlink by hand would add nothing), and the state that lets `down`, `exec` and
//! `addr` find a running lab.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::topology::{Lab, PREFIX, PREFIX_NAME};
use crate::{tun, NetlabError};

/// Where running labs leave their pid and topology.
pub const STATE_DIR: &str = "/run/ferry-netlab";

/// Name of a host's interface inside its namespace.
pub const IFACE: &str = "eth0";

/// Whether this process may create namespaces.
pub fn have_root() -> bool {
    // SAFETY-free: geteuid has no preconditions; libc marks it unsafe only as an FFI call.
    #[allow(unsafe_code)]
    let uid = unsafe { libc::geteuid() };
    uid == 0
}

/// Runs `ip ARGS`, failing with its message.
pub fn ip(args: &[&str]) -> Result<(), NetlabError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| NetlabError::Setup(format!("cannot run ip: {e} (install iproute2)")))?;
    if !out.status.success() {
        return Err(NetlabError::Setup(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn sysctl_in(netns: &str, key: &str, value: &str) -> Result<(), NetlabError> {
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "sysctl", "-q", "-w"])
        .arg(format!("{key}={value}"))
        .output()
        .map_err(|e| NetlabError::Setup(format!("cannot run sysctl: {e}")))?;
    if !out.status.success() {
        return Err(NetlabError::Setup(format!(
            "sysctl {key} in {netns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Creates every host's namespace and TUN interface, configured and up; returns the TUN
/// descriptors in host order. On failure, removes what it made.
pub fn create(lab: &Lab) -> Result<Vec<File>, NetlabError> {
    let made = create_inner(lab);
    if made.is_err() {
        remove_namespaces(lab);
    }
    made
}

/// A namespace may only make a congestion control its default when the machine allows it to
/// unprivileged sockets; widen that list (the one machine-wide change a lab makes, and one that
/// only adds a choice).
fn allow_congestion_control(name: &str) -> Result<(), NetlabError> {
    const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
    let allowed = std::fs::read_to_string(ALLOWED)
        .map_err(|e| NetlabError::Setup(format!("cannot read {ALLOWED}: {e}")))?;
    if allowed.split_whitespace().any(|c| c == name) {
        return Ok(());
    }
    std::fs::write(ALLOWED, format!("{} {name}", allowed.trim())).map_err(|e| {
        NetlabError::Setup(format!(
            "congestion control '{name}' is not available here ({e}); see \
             net.ipv4.tcp_available_congestion_control"
        ))
    })
}

fn create_inner(lab: &Lab) -> Result<Vec<File>, NetlabError> {
    if let Some(cc) = &lab.congestion {
        allow_congestion_control(cc)?;
    }
    let mut tuns = Vec::new();
    for (i, h) in lab.hosts.iter().enumerate() {
        if Path::new("/run/netns").join(&h.netns).exists() {
            return Err(NetlabError::Setup(format!(
                "namespace {} exists: is lab '{}' already up? (`ferry-netlab down --all` cleans)",
                h.netns, lab.name
            )));
        }
        ip(&["netns", "add", &h.netns])?;
        ip(&["-n", &h.netns, "link", "set", "lo", "up"])?;
        // Router solicitations and other IPv6 chatter would only cross the emulator as noise.
        sysctl_in(&h.netns, "net.ipv6.conf.all.disable_ipv6", "1")?;
        // Hosts are tuned as data transfer nodes are (ESnet's fasterdata advice): autotuning
        // may grow a connection's buffers to 64 MiB, enough for 1 Gbit/s at 500 ms or
        // 10 Gbit/s at 50 ms. Explicit SO_RCVBUF stays capped by the machine-wide rmem_max,
        // which a namespace cannot raise.
        sysctl_in(&h.netns, "net.ipv4.tcp_rmem", "4096 131072 67108864")?;
        sysctl_in(&h.netns, "net.ipv4.tcp_wmem", "4096 16384 67108864")?;
        if let Some(cc) = &lab.congestion {
            sysctl_in(&h.netns, "net.ipv4.tcp_congestion_control", cc)?;
        }
        let temp = format!("fnlt{}x{i}", std::process::id() % 100_000);
        let fd = tun::create(&temp)
            .map_err(|e| NetlabError::Setup(format!("cannot create TUN device {temp}: {e}")))?;
        ip(&["link", "set", &temp, "netns", &h.netns])?;
        ip(&["-n", &h.netns, "link", "set", &temp, "name", IFACE])?;
        let mtu = h.mtu.to_string();
        ip(&["-n", &h.netns, "link", "set", IFACE, "mtu", &mtu])?;
        // A NIC-sized transmit queue: the emulator's own queues are the ones that should drop.
        ip(&["-n", &h.netns, "link", "set", IFACE, "txqueuelen", "10000"])?;
        let addr = format!("{}/{PREFIX}", h.addr);
        ip(&["-n", &h.netns, "addr", "add", &addr, "dev", IFACE])?;
        ip(&["-n", &h.netns, "link", "set", IFACE, "up"])?;
        write_hosts_file(lab, h)?;
        tuns.push(fd);
    }
    Ok(tuns)
}

/// `ip netns exec` mounts `/etc/netns/NS/hosts` over `/etc/hosts`: every host of the lab is
/// known by name (`b`, `b.LAB`), each address resolves back to a name (globus-gridftp-server
/// needs that before it will listen), and the machine's hostname, which the namespaces share,
/// resolves to this host's lab address (globus-url-copy looks its own name up).
fn write_hosts_file(lab: &Lab, me: &crate::topology::Host) -> Result<(), NetlabError> {
    let dir = Path::new("/etc/netns").join(&me.netns);
    let mut text = String::from("127.0.0.1 localhost\n");
    for h in &lab.hosts {
        text.push_str(&format!("{} {}.{} {}", h.addr, h.name, lab.name, h.name));
        if h == me {
            if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
                text.push(' ');
                text.push_str(name.trim());
            }
        }
        text.push('\n');
    }
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(dir.join("hosts"), text))
        .map_err(|e| NetlabError::Setup(format!("cannot write {}/hosts: {e}", dir.display())))
}

/// Deletes the lab's namespaces (the TUN devices went with the emulator's descriptors) and
/// their `/etc/netns` files.
pub fn remove_namespaces(lab: &Lab) {
    for h in &lab.hosts {
        remove_namespace(&h.netns);
    }
}

/// Deletes one namespace and its `/etc/netns` directory.
pub fn remove_namespace(netns: &str) {
    let _ = ip(&["netns", "del", netns]);
    let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(netns));
}

/// The file where a running lab's emulator keeps its counters (JSON, rewritten every 250 ms).
pub fn stats_file(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("{PREFIX_NAME}{name}.stats"))
}

/// The pid and topology files of a running lab.
pub fn state_files(name: &str) -> (PathBuf, PathBuf) {
    let dir = Path::new(STATE_DIR);
    (
        dir.join(format!("{PREFIX_NAME}{name}.pid")),
        dir.join(format!("{PREFIX_NAME}{name}.toml")),
    )
}

/// Names of the labs with state files.
pub fn running_labs() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(STATE_DIR) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix(PREFIX_NAME)
                .and_then(|n| n.strip_suffix(".toml"))
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    names
}

/// Every namespace (or `/etc/netns` directory) whose name starts with the lab prefix.
pub fn stale_namespaces() -> Vec<String> {
    let mut names: Vec<String> = ["/run/netns", "/etc/netns"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|d| d.flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(PREFIX_NAME))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Stops the emulator with `pid` (SIGTERM, then SIGKILL after 2 s) if it is one of ours.
pub fn stop_emulator(pid: i32) {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if !String::from_utf8_lossy(&cmdline).contains("ferry-netlab") {
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: kill(2) with a pid we read from our own state file and checked is ours.
    let signal = |s| unsafe { libc::kill(pid, s) };
    signal(libc::SIGTERM);
    for _ in 0..40 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    signal(libc::SIGKILL);
}
