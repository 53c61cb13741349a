"""gcp against globus-url-copy across netlab paths with Linux default TCP settings (issue 25).

Each path is two netlab hosts with the kernel's default TCP buffers (not DTN-tuned) and cubic
as their congestion control; ferry and Globus servers run in host b, the clients in host a and
copy a file from b to /dev/null in a. Subjects: gcp with no flags (first run: empty cache;
cached run: the second, with what the first learnt), `ferry copy` with no flags,
globus-url-copy with no flags, and globus-url-copy hand-tuned (the best of a sweep of -p and
-tcp-bs).
"""

import json
import os
import re
import shutil
import subprocess
import tempfile

from .. import processes
from ..options import REPO_ROOT
from ..results import ScenarioResult, Table
from ..stats import summarize
from .netlab import NETLAB, TOPOLOGIES, _exec, _lab, _netlab
from .registry import scenario
from .wan import PORT_FERRY, PORT_GLOBUS, _start_servers, _timed

MIB = 1 << 20
# (label, one-way delay, loss % each way, bytes for the fast subjects, bytes for guc with no
# flags: on a lossy path about half a minute at its rate once past slow start)
PATHS = [
    ("4 ms", "2ms", 0.0, 512 * MIB, 512 * MIB),
    ("15 ms", "7500us", 0.0, 512 * MIB, 512 * MIB),
    ("75 ms", "37500us", 0.0, 512 * MIB, 512 * MIB),
    ("60 ms, 1 % loss", "30ms", 1.0, 512 * MIB, 16 * MIB),
    ("200 ms, 0.1 % loss", "100ms", 0.1, 1024 * MIB, 64 * MIB),
]
# What the guc sweep and ferry copy move on a lossy path.
SWEEP_LOSSY_BYTES = 64 * MIB
SWEEP = [("-p 4", ["-p", "4"]), ("-p 8", ["-p", "8"]), ("-p 16", ["-p", "16"]),
         ("-p 8 -tcp-bs BDP", ["-p", "8", "-tcp-bs", "BDP"])]
LINUX_RMEM = "4096 131072 6291456"
LINUX_WMEM = "4096 16384 4194304"
SRC_DIR = "/dev/shm/ferry-bench-gcp"

METHOD = (
    "Two netlab hosts joined by one emulated 1 Gbit/s link (queue: one bandwidth-delay product) with "
    "the round trip and loss of each row, cubic as both hosts' congestion control, and the hosts' TCP "
    f"buffers set back to Linux's defaults (`net.ipv4.tcp_rmem = {LINUX_RMEM}`, `tcp_wmem = {LINUX_WMEM}`; "
    "net.core.rmem_max/wmem_max as the machine has them). `ferry serve --anonymous` and "
    "`globus-gridftp-server -aa` run in host b; the clients run in host a and copy a sparse file in "
    "/dev/shm (read from memory) from b to /dev/null. **gcp first**: `gcp ftp://b:2811/FILE /dev/null` with "
    "no flags and an empty cache (`XDG_CACHE_HOME` in a new directory): it probes the path and chooses; "
    "**gcp cached**: the same command again, with what the first run learnt; **gcp cubic** (clean paths): "
    "a first run with `--congestion system`, the sender keeping cubic. **ferry copy**: `ferry copy` "
    "with no flags. **guc**: `globus-url-copy` with no flags against the Globus server; **guc best**: the "
    "fastest of the sweep " + ", ".join(s for s, _ in SWEEP) + " (BDP = the path's bandwidth-delay "
    "product). Throughput is the file's size over the client's wall time, logins included. "
    "Sizes: the row's size, except on lossy paths for guc with no flags (16 MiB at 60 ms, 64 MiB at 200 ms: "
    f"about half a minute at its rate) and for ferry copy and the guc sweep ({SWEEP_LOSSY_BYTES >> 20} MiB)."
)


def _topology(tmp, label, delay, loss):
    text = (f'name = "gcp"\ncongestion = "cubic"\n\n[[host]]\nname = "a"\n\n[[host]]\nname = "b"\n\n'
            f'[[link]]\na = "a"\nb = "b"\nrate = "1Gbit"\ndelay = "{delay}"\n')
    if loss:
        text += f"loss = {loss}\n"
    path = os.path.join(tmp, re.sub(r"[^a-z0-9]+", "-", label) + ".toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def _linux_defaults(lab):
    for host in ("a", "b"):
        _exec(lab, host, ["sysctl", "-q", "-w", f"net.ipv4.tcp_rmem={LINUX_RMEM}",
                          f"net.ipv4.tcp_wmem={LINUX_WMEM}"])


def _source(size):
    os.makedirs(SRC_DIR, exist_ok=True)
    os.chmod(SRC_DIR, 0o755)
    path = os.path.join(SRC_DIR, f"{size >> 20}MiB")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.truncate(size)
        os.chmod(path, 0o644)
    return path


def _gbit(size, wall):
    return size * 8 / wall / 1e9


@scenario("gcp", "gcp on netlab paths with Linux default TCP settings")
def run(ctx) -> ScenarioResult:
    result = ScenarioResult("gcp", "gcp and globus-url-copy across wide-area paths (Linux default TCP)", METHOD)
    if os.geteuid() != 0 or not os.path.exists(NETLAB):
        result.notes.append("Not measured: needs root and target/release/ferry-netlab (cargo build --release --workspace).")
        return result
    _netlab("down", "--all", check=False)
    ferry = os.path.join(REPO_ROOT, "target", "release", "ferry")
    rows, rates, explained = [], {}, []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.chmod(tmp, 0o755)
            for label, delay, loss, size, guc_size in PATHS:
                one_way_ms = float(re.sub(r"[a-z]+", "", delay)) / (1000 if delay.endswith("us") else 1)
                bdp = int(1e9 / 8 * 2 * one_way_ms / 1e3)
                src, guc_src = _source(size), _source(guc_size)
                sweep_size = SWEEP_LOSSY_BYTES if loss else size
                sweep_src = _source(sweep_size)
                with _lab(_topology(tmp, label, delay, loss), "gcp") as lab:
                    _linux_defaults(lab)
                    servers = _start_servers(lab, tmp)
                    try:
                        for r in range(ctx.options.runs):
                            cache = tempfile.mkdtemp(dir=tmp)
                            env = ["env", f"XDG_CACHE_HOME={cache}", f"HOME={cache}"]
                            gcp = env + [ferry, "cp", "-q", f"ftp://10.77.0.2:{PORT_FERRY}{src}", "/dev/null"]
                            subjects = [
                                ("gcp first", gcp, size),
                                ("gcp cached", gcp, size),
                                ("ferry copy", [ferry, "copy", "-q", f"ftp://10.77.0.2:{PORT_FERRY}{sweep_src}",
                                                "/dev/null"], sweep_size),
                            ]
                            if not loss:
                                # The same first run with the sender's own congestion control.
                                cubic = tempfile.mkdtemp(dir=tmp)
                                subjects.append(("gcp cubic", ["env", f"XDG_CACHE_HOME={cubic}", ferry, "cp", "-q",
                                                               "--congestion", "system",
                                                               f"ftp://10.77.0.2:{PORT_FERRY}{src}", "/dev/null"], size))
                            subjects.append(("guc", ["globus-url-copy", f"ftp://10.77.0.2:{PORT_GLOBUS}{guc_src}",
                                                     "file:///dev/null"], guc_size))
                            for name, flags in SWEEP:
                                flags = [str(bdp) if f == "BDP" else f for f in flags]
                                subjects.append((f"guc {name}", ["globus-url-copy", *flags,
                                                                 f"ftp://10.77.0.2:{PORT_GLOBUS}{sweep_src}",
                                                                 "file:///dev/null"], sweep_size))
                            for name, cmd, n in subjects:
                                ctx.log(f"gcp: {label} run {r + 1}: {name}, {n >> 20} MiB")
                                try:
                                    wall = _timed(lab, cmd, 900)
                                except (RuntimeError, subprocess.TimeoutExpired) as e:
                                    ctx.failures += 1
                                    result.notes.append(f"{label} {name} run {r + 1} failed: {str(e).splitlines()[0]}")
                                    continue
                                g = _gbit(n, wall)
                                rates.setdefault((label, name), []).append(g)
                                result.raw.append({"path": label, "subject": name, "bytes": n, "gbit_s": g})
                            cached = os.path.join(cache, "ferry", "gcp-paths.json")
                            if r == 0 and os.path.exists(cached):
                                entry = next(iter(json.load(open(cached))["paths"].values()), {})
                                explained.append(f"{label}: after two runs gcp holds {json.dumps(entry)}")
                            shutil.rmtree(cache, ignore_errors=True)
                    finally:
                        for p in servers:
                            processes.kill_tree(p)
                s = lambda name: summarize(rates.get((label, name), []))  # noqa: E731
                best_name = max((f"guc {n}" for n, _ in SWEEP), key=lambda k: s(k).median if s(k).n else 0)
                best = s(best_name)
                ratio = lambda a, b: f"{a.median / b.median:.2f}" if a.n and b.n and b.median else "–"  # noqa: E731
                rows.append([label, s("gcp first").cell(3), s("gcp cached").cell(3), s("gcp cubic").cell(3),
                             s("ferry copy").cell(3),
                             s("guc").cell(3), f"{best.cell(3)} ({best_name[4:]})",
                             ratio(s("gcp first"), best), ratio(s("gcp cached"), best), ratio(s("gcp first"), s("guc"))])
    finally:
        shutil.rmtree(SRC_DIR, ignore_errors=True)
    result.tables.append(Table("Gbit/s, median (min–max); ratios of medians",
                               ["path", "gcp first", "gcp cached", "gcp cubic", "ferry copy", "guc", "guc best (setting)",
                                "gcp first / guc best", "gcp cached / guc best", "gcp first / guc"], rows))
    result.notes.extend(explained)
    return result
