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
    # Faster than the 1 Gbit/s gcp's first copy assumes: 8 GiB, so the first seconds leave more
    # than the 20 s a restart on more streams needs.
    ("20 ms, 4 Gbit/s", "10ms", 0.0, 8 << 30, 8 << 30),
]
# Links other than 1 Gbit/s at MTU 1500: (bits/s, MTU). Jumbo frames, as data transfer nodes use
# them: at 1500 the userspace emulator's packet rate, not the link, would set the rate.
LINKS = {"20 ms, 4 Gbit/s": (4e9, 9000)}
# --gcp-paths names the rows by these keys.
PATH_KEYS = {"4 ms": "4ms", "15 ms": "15ms", "75 ms": "75ms", "60 ms, 1 % loss": "60ms-1pct",
             "200 ms, 0.1 % loss": "200ms-0.1pct", "20 ms, 4 Gbit/s": "20ms-4g"}
# The sizes part: 1 KiB up to --gcp-largest on clean paths; lossy paths stop at LOSSY_LARGEST, and
# globus-url-copy with no flags there at the row's guc size (beyond, it would take hours).
SIZES = [1 << 10, 1 << 20, 64 * MIB, 1 << 30, 10 << 30]
LOSSY_LARGEST = 1 << 30
# The tree part: N files of 4 KiB, copied recursively from b into a tmpfs directory in a.
TREE_FILES = 10000
TREE_DIR = "/dev/shm/ferry-bench-gcp-tree"
GUC_TREE = ["-r", "-pp", "-cc", "4"]
# guc's best setting per path from the sweep of results/20261126T053609Z (the paths part), for the
# sizes part when the paths part does not run.
BEST_KNOWN = {"4 ms": ["-p", "4"], "15 ms": ["-p", "4"], "75 ms": ["-p", "16"],
              "60 ms, 1 % loss": ["-p", "16"], "200 ms, 0.1 % loss": ["-p", "16"], "20 ms, 4 Gbit/s": ["-p", "8"]}
# What the guc sweep and ferry copy move on a lossy path.
SWEEP_LOSSY_BYTES = 64 * MIB
SWEEP = [("-p 4", ["-p", "4"]), ("-p 8", ["-p", "8"]), ("-p 16", ["-p", "16"]),
         ("-p 8 -tcp-bs BDP", ["-p", "8", "-tcp-bs", "BDP"])]
LINUX_RMEM = "4096 131072 6291456"
LINUX_WMEM = "4096 16384 4194304"
SRC_DIR = "/dev/shm/ferry-bench-gcp"

METHOD = (
    "Two netlab hosts joined by one emulated 1 Gbit/s link (queue: one bandwidth-delay product) with "
    "the round trip and loss of each row (the `20ms-4g` row, asked for by name: 4 Gbit/s with MTU 9000, "
    "8 GiB files), cubic as both hosts' congestion control, and the hosts' TCP "
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
    f"about half a minute at its rate) and for ferry copy and the guc sweep ({SWEEP_LOSSY_BYTES >> 20} MiB). "
    "**Sizes** (`--gcp-parts sizes`): files of 1 KiB, 1 MiB, 64 MiB, 1 GiB and 10 GiB (`--gcp-largest`; lossy "
    "paths stop at 1 GiB, and guc with no flags there at the row's guc size), each copied by gcp first (empty "
    "cache), gcp cached, guc with no flags and guc with the best setting the paths part found on that path "
    "(when it did not run, the best of results/20261126T053609Z's sweep: -p 4 at 4 and 15 ms, -p 16 elsewhere; "
    f"on lossy paths up to {SWEEP_LOSSY_BYTES >> 20} MiB); seconds are the client's wall time, logins included. **Tree** "
    f"(`--gcp-parts tree`): {TREE_FILES} files of 4 KiB in one directory, `gcp -r` (empty cache) against "
    f"`globus-url-copy {' '.join(GUC_TREE)}`, into a tmpfs directory in host a; every run's files counted and "
    "sized, the first compared with `diff -r`. `--gcp-congestion bbr` puts both hosts on bbr instead."
)


def _topology(tmp, label, delay, loss, cc="cubic"):
    bps, mtu = LINKS.get(label, (1e9, None))
    text = (f'name = "gcp"\ncongestion = "{cc}"\n\n[[host]]\nname = "a"\n\n[[host]]\nname = "b"\n\n'
            f'[[link]]\na = "a"\nb = "b"\nrate = "{bps / 1e9:g}Gbit"\ndelay = "{delay}"\n')
    if mtu:
        text += f"mtu = {mtu}\n"
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


def _attempt(ctx, lab, cmd, what, result):
    """The wall time of `cmd` in host a, or None with the failure noted."""
    ctx.log(f"gcp: {what}")
    try:
        return _timed(lab, cmd, 900)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        ctx.failures += 1
        result.notes.append(f"{what} failed: {str(e).splitlines()[0]}")
        return None


def _size_name(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _tree_source():
    """TREE_FILES files of 4 KiB of random data in one directory, made once."""
    src = os.path.join(TREE_DIR, "src")
    if os.path.isdir(src) and len(os.listdir(src)) == TREE_FILES:
        return src
    shutil.rmtree(TREE_DIR, ignore_errors=True)
    os.makedirs(src)
    for d in (TREE_DIR, src):
        os.chmod(d, 0o755)
    for i in range(TREE_FILES):
        p = os.path.join(src, f"f{i:05d}")
        with open(p, "wb") as f:
            f.write(os.urandom(4096))
        os.chmod(p, 0o644)
    return src


def _sizes(ctx, lab, tmp, label, loss, guc_size, best_flags, rates, result):
    """gcp first and cached, guc with no flags and guc with the path's best setting, per size."""
    largest = min(LOSSY_LARGEST, ctx.options.gcp_largest) if loss else ctx.options.gcp_largest
    for size in [n for n in SIZES if n <= largest]:
        src = _source(size)
        cache = tempfile.mkdtemp(dir=tmp)
        gcp = ["env", f"XDG_CACHE_HOME={cache}", f"HOME={cache}", os.path.join(REPO_ROOT, "target", "release", "ferry"),
               "cp", "-q", f"ftp://10.77.0.2:{PORT_FERRY}{src}", "/dev/null"]
        guc = lambda flags: ["globus-url-copy", *flags, f"ftp://10.77.0.2:{PORT_GLOBUS}{src}", "file:///dev/null"]  # noqa: E731
        subjects = [("gcp first", gcp), ("gcp cached", gcp)]
        if not loss or size <= SWEEP_LOSSY_BYTES:
            subjects.append((f"guc {' '.join(best_flags)}", guc(best_flags)))
        if not loss or size <= guc_size:
            subjects.append(("guc", guc([])))
        for r in range(ctx.options.runs):
            for name, cmd in subjects:
                if name == "gcp first":
                    shutil.rmtree(cache, ignore_errors=True)
                    os.makedirs(cache)
                wall = _attempt(ctx, lab, cmd, f"{label} {_size_name(size)} run {r + 1}: {name}", result)
                if wall is None:
                    continue
                key = "guc best" if name.startswith("guc -") else name
                rates.setdefault((label, size, key), []).append(wall)
                result.raw.append({"part": "sizes", "path": label, "bytes": size, "subject": name, "seconds": wall})
        shutil.rmtree(cache, ignore_errors=True)
        if size >= 1 << 30:
            os.remove(src)


def _tree(ctx, lab, tmp, label, rates, result):
    """gcp -r (first run, empty cache) against globus-url-copy -r -pp -cc 4, files per second."""
    src = _tree_source()
    ferry = os.path.join(REPO_ROOT, "target", "release", "ferry")
    for r in range(ctx.options.runs):
        for name in ("gcp -r", "guc -r -pp -cc 4"):
            out = tempfile.mkdtemp(dir=TREE_DIR)
            os.chmod(out, 0o777)
            if name == "gcp -r":
                cache = tempfile.mkdtemp(dir=tmp)
                cmd = ["env", f"XDG_CACHE_HOME={cache}", ferry, "cp", "-r", "-q",
                       f"ftp://10.77.0.2:{PORT_FERRY}{src}/", out + "/"]
            else:
                cmd = ["globus-url-copy", *GUC_TREE, f"ftp://10.77.0.2:{PORT_GLOBUS}{src}/", f"file://{out}/"]
            ctx.log(f"gcp tree: {label} run {r + 1}: {name}")
            try:
                wall = _timed(lab, cmd, 900)
                got = os.listdir(out)
                if len(got) != TREE_FILES or any(os.path.getsize(os.path.join(out, f)) != 4096 for f in got):
                    raise RuntimeError(f"{len(got)} files arrived, not {TREE_FILES} of 4 KiB")
                if r == 0:
                    d = subprocess.run(["diff", "-rq", src, out], capture_output=True, text=True)
                    if d.returncode != 0:
                        raise RuntimeError(f"differs from the source: {d.stdout[:200]}")
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                ctx.failures += 1
                result.notes.append(f"tree {label} {name} run {r + 1} failed: {str(e).splitlines()[0]}")
                continue
            finally:
                shutil.rmtree(out, ignore_errors=True)
            rates.setdefault((label, name), []).append(TREE_FILES / wall)
            result.raw.append({"part": "tree", "path": label, "subject": name, "files_s": TREE_FILES / wall})


@scenario("gcp", "gcp on netlab paths with Linux default TCP settings")
def run(ctx) -> ScenarioResult:
    result = ScenarioResult("gcp", "gcp and globus-url-copy across wide-area paths (Linux default TCP)", METHOD)
    if os.geteuid() != 0 or not os.path.exists(NETLAB):
        result.notes.append("Not measured: needs root and target/release/ferry-netlab (cargo build --release --workspace).")
        return result
    _netlab("down", "--all", check=False)
    o = ctx.options
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.chmod(tmp, 0o755)
            for cc in o.gcp_congestion:
                _all_paths(ctx, tmp, cc, result)
    finally:
        shutil.rmtree(SRC_DIR, ignore_errors=True)
        shutil.rmtree(TREE_DIR, ignore_errors=True)
    return result


def _all_paths(ctx, tmp, cc, result):
    """Every part asked for, on every path asked for, with the hosts on `cc`."""
    o = ctx.options
    ferry = os.path.join(REPO_ROOT, "target", "release", "ferry")
    rows, rates, explained = [], {}, []
    size_rows, size_rates, tree_rows, tree_rates = [], {}, [], {}
    for label, delay, loss, size, guc_size in PATHS:
        if PATH_KEYS[label] not in o.gcp_paths:
            continue
        one_way_ms = float(re.sub(r"[a-z]+", "", delay)) / (1000 if delay.endswith("us") else 1)
        bdp = int(LINKS.get(label, (1e9, None))[0] / 8 * 2 * one_way_ms / 1e3)
        sweep_size = SWEEP_LOSSY_BYTES if loss else size
        best_flags = BEST_KNOWN[label]
        with _lab(_topology(tmp, label, delay, loss, cc), "gcp") as lab:
            _linux_defaults(lab)
            servers = _start_servers(lab, tmp)
            try:
                if "paths" in o.gcp_parts:
                    src, guc_src, sweep_src = _source(size), _source(guc_size), _source(sweep_size)
                    for r in range(o.runs):
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
                            wall = _attempt(ctx, lab, cmd, f"{label} ({cc}) run {r + 1}: {name}, {n >> 20} MiB",
                                            result)
                            if wall is None:
                                continue
                            g = _gbit(n, wall)
                            rates.setdefault((label, name), []).append(g)
                            result.raw.append({"path": label, "hosts": cc, "subject": name, "bytes": n, "gbit_s": g})
                        cached = os.path.join(cache, "ferry", "gcp-paths.json")
                        if r == 0 and os.path.exists(cached):
                            entry = next(iter(json.load(open(cached))["paths"].values()), {})
                            explained.append(f"{label} ({cc}): after two runs gcp holds {json.dumps(entry)}")
                        shutil.rmtree(cache, ignore_errors=True)
                    s = lambda name: summarize(rates.get((label, name), []))  # noqa: E731
                    best_name = max((f"guc {n}" for n, _ in SWEEP), key=lambda k: s(k).median if s(k).n else 0)
                    best_flags = [str(bdp) if f == "BDP" else f for f in dict(SWEEP)[best_name[4:]]]
                    best = s(best_name)
                    ratio = lambda a, b: f"{a.median / b.median:.2f}" if a.n and b.n and b.median else "–"  # noqa: E731
                    rows.append([label, s("gcp first").cell(3), s("gcp cached").cell(3), s("gcp cubic").cell(3),
                                 s("ferry copy").cell(3),
                                 s("guc").cell(3), f"{best.cell(3)} ({best_name[4:]})",
                                 ratio(s("gcp first"), best), ratio(s("gcp cached"), best), ratio(s("gcp first"), s("guc"))])
                if "sizes" in o.gcp_parts:
                    _sizes(ctx, lab, tmp, label, loss, guc_size, best_flags, size_rates, result)
                    for n in [n for n in SIZES if n <= (min(LOSSY_LARGEST, o.gcp_largest) if loss else o.gcp_largest)]:
                        t = lambda k: summarize(size_rates.get((label, n, k), []))  # noqa: E731
                        mbit = lambda x: f"{n * 8 / x.median / 1e6:.1f}" if x.n else "–"  # noqa: E731
                        rel = lambda a, b: f"{b.median / a.median:.2f}" if a.n and b.n else "–"  # noqa: E731
                        size_rows.append([label, _size_name(n),
                                          f"{t('gcp first').cell(2)} s ({mbit(t('gcp first'))})",
                                          f"{t('gcp cached').cell(2)} s ({mbit(t('gcp cached'))})",
                                          f"{t('guc').cell(2)} s ({mbit(t('guc'))})" if t("guc").n else "not run",
                                          f"{t('guc best').cell(2)} s ({mbit(t('guc best'))}; {' '.join(best_flags)})" if t("guc best").n
                                          else "not run",
                                          rel(t("gcp first"), t("guc best")), rel(t("gcp cached"), t("guc best")),
                                          rel(t("gcp first"), t("guc"))])
                if "tree" in o.gcp_parts:
                    _tree(ctx, lab, tmp, label, tree_rates, result)
                    u = lambda k: summarize(tree_rates.get((label, k), []))  # noqa: E731
                    g, b = u("gcp -r"), u("guc -r -pp -cc 4")
                    tree_rows.append([label, g.cell(0), b.cell(0),
                                      f"{g.median / b.median:.2f}" if g.n and b.n and b.median else "–"])
            finally:
                for p in servers:
                    processes.kill_tree(p)
    hosts = f"{cc} hosts"
    if rows:
        result.tables.append(Table(f"Gbit/s, median (min–max); ratios of medians ({hosts})",
                                   ["path", "gcp first", "gcp cached", "gcp cubic", "ferry copy", "guc", "guc best (setting)",
                                    "gcp first / guc best", "gcp cached / guc best", "gcp first / guc"], rows))
    if size_rows:
        result.tables.append(Table(f"File sizes: seconds, median (min–max), and Mbit/s of the median; ratios are "
                                   f"the guc time over gcp's ({hosts})",
                                   ["path", "size", "gcp first", "gcp cached", "guc", "guc best (the paths part's "
                                    "setting, else 20261126T053609Z's)", "gcp first vs guc best", "gcp cached vs guc best",
                                    "gcp first vs guc"], size_rows))
    if tree_rows:
        result.tables.append(Table(f"{TREE_FILES} × 4 KiB, recursive get: files/s, median (min–max) ({hosts})",
                                   ["path", "gcp -r (first run)", "guc -r -pp -cc 4", "gcp / guc"], tree_rows))
    result.notes.extend(explained)
