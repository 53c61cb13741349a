"""Wide-area runs through netlab: ferry and Globus across emulated WAN paths.

Three scenarios, one per path (`wan`: 60 ms; `wan-long-haul`: 200 ms with 0.1 % loss;
`wan-lossy`: 60 ms with 1 % loss), each with bbr and cubic, default and tuned (BDP) TCP
buffers, memory to memory and disk to disk, and iperf3 as the limit.
"""

import contextlib
import json
import os
import re
import subprocess
import tempfile
import time

from .. import processes
from ..options import REPO_ROOT
from ..results import Panel, ScenarioResult, Table
from ..servers import anonymous_user
from ..stats import ratio, summarize
from ..units import fmt
from .netlab import NETLAB, TOPOLOGIES, _exec, _lab, _netlab
from .registry import scenario

MIB = 1 << 20
STREAMS = [1, 4, 8, 16]
PORT_FERRY, PORT_GLOBUS, PORT_IPERF = 2811, 2812, 5201
CCS = ["bbr", "cubic"]
BUFFERS = ["default", "tuned"]
# Each transfer is sized to last about this long at the rate iperf3 reached on the same path,
# streams and buffers (so a 2 Mbit/s lossy stream is not asked for 512 MiB), within these bounds.
SECONDS = 4
SMALLEST, LARGEST = 4 * MIB, 512 * MIB
DISK_DIR = "/var/tmp/ferry-bench-wan"
MEM = ["guc→ferry", "guc→globus", "ferry pair"]
DISK = ["ferry pair disk", "globus pair disk"]
SUBJECTS = MEM + DISK + ["iperf3"]

PATHS = {
    "wan": ("wan-60ms", "1 Gbit/s, 60 ms round trip, no loss", 60e-3),
    "wan-long-haul": ("long-haul", "1 Gbit/s, 200 ms round trip, 0.1 % loss each way", 200e-3),
    "wan-lossy": ("lossy-wan", "1 Gbit/s, 60 ms round trip, 1 % loss each way", 60e-3),
}
RATE_BIT_S = 1e9

METHOD = (
    "Two netlab hosts joined by one emulated link (`bench/topologies/{topo}.toml`: {desc}; a queue of "
    "one bandwidth-delay product; hosts tuned as DTNs, autotuning to 64 MiB), once with bbr and once "
    "with cubic as both hosts' congestion control. The servers run in host b (`ferry serve --listen "
    "10.77.0.2:2811` and `globus-gridftp-server -aa -hostname 10.77.0.2 -p 2812`), the clients in host "
    "a. **default** buffers: no -tcp-bs (kernel autotuning); **tuned**: `-tcp-bs`/`--tcp-bs` = the "
    "path's bandwidth-delay product ({bdp}) for globus-url-copy and ferry (each sends SBUF to the "
    "server), `iperf3 -w` the same, with the machine's net.core.rmem_max/wmem_max raised to 64 MiB "
    "for the run as on a DTN (explicit buffers are capped by them, 4 MiB by default here). For each streams × buffers cell iperf3 `-P N -t 8` runs first; it is "
    "the limit and sizes the transfers to about {secs} s at its rate ({lo}–{hi}, shown as *size*). "
    "Memory to memory (/dev/zero → /dev/null with a length): **guc→ferry** and **guc→globus** are "
    "`globus-url-copy -p N -len SIZE` against each server, **ferry pair** is `ferry copy -p N --length "
    "SIZE`. Disk to disk: the first SIZE bytes of a random file on disk in host b to a new file on "
    "disk in host a (`-len`/`--length`), page cache dropped before each run: **ferry pair disk** and "
    "**globus pair disk** (globus-url-copy + globus-gridftp-server). Throughput is SIZE over the "
    "client's wall time, login and slow start included: on a long path that start-up is part of what "
    "a user waits for. Subjects alternate run by run; `--runs` runs each (loss makes single runs noisy)."
)


def _spawn_in(lab, host, cmd, out):
    return processes.spawn([NETLAB, "exec", "--lab", lab, host, "--", *cmd], stdout=out, stderr=subprocess.STDOUT)


def _wait_port(lab, host, port, proc, what):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = _exec(lab, host, ["ss", "-Hltn", f"sport = :{port}"], check=False)
        if r.stdout.strip():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}")
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not listen on {port}")


def _timed(lab, cmd, timeout):
    t0 = time.monotonic()
    r = _exec(lab, "a", cmd, timeout=timeout, check=False)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {(r.stderr or r.stdout)[-400:]}")
    return wall


def _topology_file(tmp, topo, cc):
    src = open(os.path.join(TOPOLOGIES, f"{topo}.toml")).read()
    text = re.sub(r'^name = ".*"$', f'name = "wan"\ncongestion = "{cc}"', src, count=1, flags=re.M)
    path = os.path.join(tmp, f"{topo}-{cc}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def _disk_source(ctx):
    """A random file of LARGEST bytes, kept between runs, readable by Globus' anonymous user."""
    os.makedirs(DISK_DIR, exist_ok=True)
    os.chmod(DISK_DIR, 0o755)
    src = os.path.join(DISK_DIR, "source")
    if not os.path.exists(src) or os.path.getsize(src) != LARGEST:
        ctx.log(f"wan: writing {LARGEST >> 20} MiB of random data to {src}")
        with open(src + ".part", "wb") as f:
            for _ in range(LARGEST // MIB):
                f.write(os.urandom(MIB))
        os.rename(src + ".part", src)
    os.chmod(src, 0o644)
    return src


def _register(name):
    topo, desc, rtt = PATHS[name]
    bdp = int(RATE_BIT_S * rtt / 8)

    @scenario(name, f"Wide area, {topo} (netlab)")
    def run(ctx) -> ScenarioResult:
        return _run(ctx, name, topo, desc, bdp)

    return run


def _run(ctx, name, topo, desc, bdp):
    method = METHOD.format(topo=topo, desc=desc, bdp=fmt_size(bdp), secs=SECONDS, lo=fmt_size(SMALLEST),
                           hi=fmt_size(LARGEST))
    result = ScenarioResult(name, f"Wide area ({topo}: {desc}): memory and disk", method)
    if os.geteuid() != 0 or not os.path.exists(NETLAB):
        result.notes.append("Not measured: needs root and target/release/ferry-netlab (cargo build --release --workspace).")
        return result
    _netlab("down", "--all", check=False)
    src = _disk_source(ctx)
    with _socket_buffer_max(64 * MIB):
        return _measure_path(ctx, result, name, topo, desc, bdp, src)


@contextlib.contextmanager
def _socket_buffer_max(limit):
    """Raises net.core.rmem_max/wmem_max (machine-wide; a namespace cannot) for the run, as a DTN
    is tuned: an explicit -tcp-bs is capped by them (4 MiB here by default, which made the
    200 ms path's BDP-sized buffers fail), then puts the old values back."""
    keys = ["/proc/sys/net/core/rmem_max", "/proc/sys/net/core/wmem_max"]
    old = [open(k).read().strip() for k in keys]
    try:
        for k, v in zip(keys, old):
            if int(v) < limit:
                with open(k, "w") as f:
                    f.write(str(limit))
        yield
    finally:
        for k, v in zip(keys, old):
            with open(k, "w") as f:
                f.write(v)


def _measure_path(ctx, result, name, topo, desc, bdp, src):
    o = ctx.options
    rates, sizes = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        for cc in CCS:
            ctx.log(f"{name}: {topo} with {cc}")
            with _lab(_topology_file(tmp, topo, cc), "wan") as lab:
                servers = _start_servers(lab, tmp)
                try:
                    for buffers in BUFFERS:
                        tcp_bs = bdp if buffers == "tuned" else None
                        for n in STREAMS:
                            key = (cc, buffers, n)
                            try:
                                limit = _iperf(lab, n, tcp_bs)
                                rates.setdefault(key + ("iperf3",), []).append(limit)
                                size = int(limit * 1e9 / 8 * SECONDS) // MIB * MIB
                            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                                ctx.failures += 1
                                result.notes.append(f"{cc} {buffers} iperf3 -P {n} failed: {str(e).splitlines()[0]}")
                                # The transfers still run, sized as with default buffers.
                                limit = None
                                size = sizes.get((cc, "default", n), 64 * MIB)
                            size = max(SMALLEST, min(LARGEST, size))
                            sizes[key] = size
                            for r in range(o.runs):
                                order = MEM + DISK if r % 2 == 0 else list(reversed(MEM + DISK))
                                for subject in order:
                                    ctx.log(f"{name}: {cc} {buffers} -p {n} run {r + 1}/{o.runs} {subject} {size >> 20} MiB")
                                    try:
                                        gbit = _measure(lab, subject, n, size, tcp_bs, src)
                                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                                        ctx.failures += 1
                                        result.notes.append(
                                            f"{cc} {buffers} {subject} -p {n} run {r + 1} failed: {str(e).splitlines()[0]}")
                                        continue
                                    rates.setdefault(key + (subject,), []).append(gbit)
                                    result.raw.append({"cc": cc, "buffers": buffers, "streams": n, "subject": subject,
                                                       "bytes": size, "gbit_s": gbit})
                            if limit is not None:
                                result.raw.append({"cc": cc, "buffers": buffers, "streams": n, "subject": "iperf3",
                                                   "gbit_s": limit})
                finally:
                    for p in servers:
                        processes.kill_tree(p)
    ratio_cols = ["guc→ferry / guc→globus", "ferry pair / globus pair", "disk: ferry / globus",
                  "ferry pair / iperf3"]
    groups = []
    for cc in CCS:
        for buffers in BUFFERS:
            rows = []
            for n in STREAMS:
                key = (cc, buffers, n)
                s = {sub: summarize(rates.get(key + (sub,), [])) for sub in SUBJECTS}
                rows.append([str(n), f"{sizes.get(key, 0) >> 20} MiB"] + [s[sub].cell(3) for sub in SUBJECTS] + [
                    fmt(ratio(s["guc→ferry"], s["guc→globus"])),
                    fmt(ratio(s["ferry pair"], s["guc→globus"])),
                    fmt(ratio(s["ferry pair disk"], s["globus pair disk"])),
                    fmt(ratio(s["ferry pair"], s["iperf3"])),
                ])
                for sub in SUBJECTS:
                    result.summaries[(f"{cc} {buffers} {sub}", str(n))] = s[sub]
                groups.append(key)
            result.tables.append(Table(f"{topo}, {cc}, {buffers} buffers: Gbit/s, median (min–max)",
                                       ["streams", "size"] + SUBJECTS + ratio_cols, rows))
    lossy = name != "wan"
    result.panel = Panel(f"{topo} ({desc})", "Gbit/s",
                         [f"{cc} {'tuned' if b == 'tuned' else 'def'}\n{n}" for cc, b, n in groups],
                         {sub: [summarize(rates.get(g + (sub,), [])) for g in groups]
                          for sub in ["guc→ferry", "guc→globus", "ferry pair", "globus pair disk", "ferry pair disk",
                                      "iperf3"]},
                         log_scale=lossy, xlabel="congestion control, buffers, streams")
    return result


def fmt_size(n):
    return f"{n / MIB:.1f} MiB" if n % MIB else f"{n // MIB} MiB"


def _start_servers(lab, tmp):
    o_ferry = os.path.join(REPO_ROOT, "target", "release", "ferry")
    conf = os.path.join(tmp, "empty.conf")
    open(conf, "w").close()
    logs = [open(os.path.join(tmp, n), "ab") for n in ("ferry.out", "globus.out")]
    ferry = _spawn_in(lab, "b", [o_ferry, "serve", "--listen", f"10.77.0.2:{PORT_FERRY}", "--root", "/", "--anonymous-whole-fs",
                                 "--anonymous"], logs[0])
    gcmd = ["globus-gridftp-server", "-c", conf, "-aa"]
    user = anonymous_user()
    if user:
        gcmd += ["-anonymous-user", user]
    gcmd += ["-hostname", "10.77.0.2", "-p", str(PORT_GLOBUS), "-no-chdir", "-l", os.path.join(tmp, "globus.log")]
    globus = _spawn_in(lab, "b", gcmd, logs[1])
    for f in logs:
        f.close()
    try:
        _wait_port(lab, "b", PORT_FERRY, ferry, "ferry serve")
        _wait_port(lab, "b", PORT_GLOBUS, globus, "globus-gridftp-server")
    except RuntimeError:
        for p in (ferry, globus):
            processes.kill_tree(p)
        raise
    return [ferry, globus]


def _drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def _measure(lab, subject, n, size, tcp_bs, src):
    gbit = lambda wall: size * 8 / wall / 1e9  # noqa: E731
    ferry = os.path.join(REPO_ROOT, "target", "release", "ferry")
    guc_bs = ["-tcp-bs", str(tcp_bs)] if tcp_bs else []
    ferry_bs = ["--tcp-bs", str(tcp_bs)] if tcp_bs else []
    if subject in MEM:
        port = PORT_GLOBUS if subject == "guc→globus" else PORT_FERRY
        if subject == "ferry pair":
            cmd = [ferry, "copy", "-q", "-p", str(n), *ferry_bs, "--length", str(size),
                   f"ftp://10.77.0.2:{port}/dev/zero", "/dev/null"]
        else:
            cmd = ["globus-url-copy", "-p", str(n), *guc_bs, "-len", str(size),
                   f"ftp://10.77.0.2:{port}/dev/zero", "file:///dev/null"]
        return gbit(_timed(lab, cmd, 300))
    dst = os.path.join(DISK_DIR, f"dest-{n}")
    if os.path.exists(dst):
        os.unlink(dst)
    _drop_caches()
    try:
        if subject == "ferry pair disk":
            cmd = [ferry, "copy", "-q", "-p", str(n), *ferry_bs, "--length", str(size),
                   f"ftp://10.77.0.2:{PORT_FERRY}{src}", dst]
        else:
            cmd = ["globus-url-copy", "-p", str(n), *guc_bs, "-len", str(size),
                   f"ftp://10.77.0.2:{PORT_GLOBUS}{src}", f"file://{dst}"]
        wall = _timed(lab, cmd, 300)
        got = os.path.getsize(dst)
        if got != size:
            raise RuntimeError(f"{subject} wrote {got} bytes, not {size}")
        return gbit(wall)
    finally:
        if os.path.exists(dst):
            os.unlink(dst)


def _iperf(lab, n, tcp_bs):
    _exec(lab, "b", ["iperf3", "-s", "-D", "-1", "-p", str(PORT_IPERF)])
    time.sleep(0.3)
    window = ["-w", str(tcp_bs)] if tcp_bs else []
    r = _exec(lab, "a", ["iperf3", "-c", "10.77.0.2", "-p", str(PORT_IPERF), "-P", str(n), "-t", "8", *window, "-J"],
              timeout=60, check=False)
    _exec(lab, "b", ["pkill", "-x", "iperf3"], check=False)
    report = json.loads(r.stdout)
    if "error" in report:
        raise RuntimeError(report["error"])
    return report["end"]["sum_received"]["bits_per_second"] / 1e9


for _name in PATHS:
    _register(_name)
