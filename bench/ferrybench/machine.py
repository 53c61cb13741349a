"""What the report says about the machine and the software, so a reader can rerun it."""

import os
import platform
import shutil
import subprocess
import time

from .options import REPO_ROOT


def _first_line(cmd: list[str]) -> str:
    if shutil.which(cmd[0]) is None and not os.path.isabs(cmd[0]):
        return "not installed"
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> str:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return "unknown"


def _git_commit() -> str:
    try:
        rev = subprocess.run(["git", "-C", REPO_ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO_ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"
    return f"{rev}{' (with uncommitted changes)' if dirty else ''}" if rev else "unknown"


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _cpu_ticks() -> dict[int, tuple[str, int]]:
    ticks = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                data = f.read()
        except OSError:
            continue
        comm = data[data.index("(") + 1 : data.rindex(")")]
        fields = data[data.rindex(")") + 2 :].split()
        ticks[int(entry)] = (comm, int(fields[11]) + int(fields[12]))
    return ticks


def busy_processes(interval: float = 1.0, threshold_pct: float = 10.0) -> list[str]:
    """Other processes using more than threshold_pct of a core over `interval`: a fair run has none."""
    before = _cpu_ticks()
    time.sleep(interval)
    after = _cpu_ticks()
    hz = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    busy = []
    for pid, (comm, t1) in after.items():
        if pid == me or pid not in before:
            continue
        pct = 100.0 * (t1 - before[pid][1]) / hz / interval
        if pct >= threshold_pct:
            busy.append((pct, f"{comm} (pid {pid}, {pct:.0f}% of a core)"))
    return [text for _, text in sorted(busy, reverse=True)]


def describe(ferry_binary: str) -> dict[str, str]:
    """Machine and software facts for the report's first table."""
    ferry = _first_line([ferry_binary, "--version"]) if os.access(ferry_binary, os.X_OK) else "not built"
    return {
        "date (UTC)": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "nproc": str(len(os.sched_getaffinity(0))),
        "CPU": _cpu_model(),
        "memory": _mem_total(),
        "kernel": platform.release(),
        "ferry": f"{ferry}, commit {_git_commit()}",
        "globus-gridftp-server": _first_line(["globus-gridftp-server", "-version"]),
        "globus-url-copy": _first_line(["globus-url-copy", "-version"]),
        "iperf3": _first_line(["iperf3", "--version"]),
        "python": platform.python_version(),
        "running as": "root" if os.geteuid() == 0 else f"uid {os.geteuid()} (not root: page cache not dropped)",
    }
