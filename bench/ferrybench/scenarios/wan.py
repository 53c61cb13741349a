"""Wide-area memory-to-memory runs through netlab: ferry and Globus across an emulated WAN."""

import json
import os
import re
import subprocess
import tempfile
import time

from .. import processes
from ..results import Panel, ScenarioResult, Table
from ..servers import anonymous_user
from ..stats import ratio, summarize
from ..units import fmt
from .netlab import NETLAB, TOPOLOGIES, _exec, _lab, _netlab
from .registry import scenario

SIZE = 512 << 20
STREAMS = [1, 4, 8, 16]
PORT_FERRY, PORT_GLOBUS, PORT_IPERF = 2811, 2812, 5201
PATHS = [("wan-60ms", "bbr"), ("wan-60ms", "cubic")]

METHOD = (
    "Two netlab hosts (`bench/topologies/wan-60ms.toml`: 1 Gbit/s, 60 ms round trip, a queue of "
    "one bandwidth-delay product, hosts tuned as DTNs with autotuning to 64 MiB), once with bbr and "
    "once with cubic as both hosts' congestion control. The servers run in host b "
    "(`ferry serve --listen 10.77.0.2:2811` and `globus-gridftp-server -aa -hostname 10.77.0.2 -p "
    "2812`), the clients in host a. Memory to memory, 512 MiB from /dev/zero to /dev/null per run: "
    "**guc→ferry** and **guc→globus** are `globus-url-copy -p N -len SIZE` against each server, "
    "**ferry pair** is `ferry copy -p N --length SIZE`; iperf3 `-P N -t 10` is the limit. Default TCP "
    "buffers (no -tcp-bs). Throughput is SIZE over the client's wall time, login and slow start "
    "included: on a 60 ms path that start-up is part of what a user waits for. Subjects alternate run "
    "by run; `--runs` runs each."
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


@scenario("wan", "Wide-area memory to memory (netlab)")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    result = ScenarioResult("wan", "Wide area (netlab wan-60ms): memory to memory, 512 MiB", METHOD)
    if os.geteuid() != 0 or not os.path.exists(NETLAB):
        result.notes.append("Not measured: needs root and target/release/ferry-netlab (cargo build --release --workspace).")
        return result
    _netlab("down", "--all", check=False)
    subjects = ["guc→ferry", "guc→globus", "ferry pair", "iperf3"]
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        for topo, cc in PATHS:
            src = open(os.path.join(TOPOLOGIES, f"{topo}.toml")).read()
            text = re.sub(r'^name = ".*"$', 'name = "wan"', src, count=1, flags=re.M)
            path = os.path.join(tmp, f"{topo}-{cc}.toml")
            with open(path, "w") as f:
                f.write(text.replace('name = "wan"', f'name = "wan"\ncongestion = "{cc}"', 1))
            ctx.log(f"wan: {topo} with {cc}")
            with _lab(path, "wan") as lab:
                conf = os.path.join(tmp, "empty.conf")
                open(conf, "w").close()
                logs = [open(os.path.join(tmp, n), "wb") for n in ("ferry.out", "globus.out")]
                ferry = _spawn_in(lab, "b", [o.ferry, "serve", "--listen", f"10.77.0.2:{PORT_FERRY}", "--root", "/",
                                             "--anonymous"], logs[0])
                gcmd = ["globus-gridftp-server", "-c", conf, "-aa"]
                user = anonymous_user()
                if user:
                    gcmd += ["-anonymous-user", user]
                gcmd += ["-hostname", "10.77.0.2", "-p", str(PORT_GLOBUS), "-no-chdir",
                         "-l", os.path.join(tmp, "globus.log")]
                globus = _spawn_in(lab, "b", gcmd, logs[1])
                try:
                    _wait_port(lab, "b", PORT_FERRY, ferry, "ferry serve")
                    _wait_port(lab, "b", PORT_GLOBUS, globus, "globus-gridftp-server")
                    for r in range(o.runs):
                        order = subjects if r % 2 == 0 else list(reversed(subjects))
                        for n in STREAMS:
                            for subject in order:
                                ctx.log(f"wan: {cc} run {r + 1}/{o.runs} -p {n} {subject}")
                                try:
                                    gbit = _measure(lab, subject, n)
                                except (RuntimeError, subprocess.TimeoutExpired) as e:
                                    ctx.failures += 1
                                    result.notes.append(f"{cc} {subject} -p {n} run {r + 1} failed: {str(e).splitlines()[0]}")
                                    continue
                                rates.setdefault((cc, n, subject), []).append(gbit)
                                result.raw.append({"cc": cc, "streams": n, "subject": subject, "gbit_s": gbit})
                finally:
                    for p in (ferry, globus):
                        processes.kill_tree(p)
                    for f in logs:
                        f.close()
    for cc in dict.fromkeys(cc for _, cc in PATHS):
        rows = []
        for n in STREAMS:
            s = {sub: summarize(rates.get((cc, n, sub), [])) for sub in subjects}
            rows.append([str(n)] + [s[sub].cell(3) for sub in subjects]
                        + [fmt(ratio(s["guc→ferry"], s["guc→globus"])), fmt(ratio(s["ferry pair"], s["guc→globus"]))])
            for sub in subjects:
                result.summaries[(f"{cc} {sub}", str(n))] = s[sub]
        result.tables.append(Table(f"wan-60ms, {cc}: Gbit/s, median (min–max)",
                                   ["streams"] + subjects + ["guc→ferry / guc→globus", "ferry pair / globus pair"], rows))
    result.panel = Panel("wan-60ms (1 Gbit/s, 60 ms RTT), memory to memory", "Gbit/s",
                         [f"{cc}\n{n}" for cc in ("bbr", "cubic") for n in STREAMS],
                         {sub: [summarize(rates.get((cc, n, sub), [])) for cc in ("bbr", "cubic") for n in STREAMS]
                          for sub in subjects}, xlabel="congestion control, streams")
    return result


def _measure(lab, subject, n):
    gbit = lambda wall: SIZE * 8 / wall / 1e9  # noqa: E731
    if subject == "guc→ferry":
        return gbit(_timed(lab, ["globus-url-copy", "-p", str(n), "-len", str(SIZE),
                                 f"ftp://10.77.0.2:{PORT_FERRY}/dev/zero", "file:///dev/null"], 300))
    if subject == "guc→globus":
        return gbit(_timed(lab, ["globus-url-copy", "-p", str(n), "-len", str(SIZE),
                                 f"ftp://10.77.0.2:{PORT_GLOBUS}/dev/zero", "file:///dev/null"], 300))
    if subject == "ferry pair":
        from ..options import REPO_ROOT
        ferry = os.path.join(REPO_ROOT, "target", "release", "ferry")
        return gbit(_timed(lab, [ferry, "copy", "-q", "-p", str(n), "--length", str(SIZE),
                                 f"ftp://10.77.0.2:{PORT_FERRY}/dev/zero", "/dev/null"], 300))
    _exec(lab, "b", ["iperf3", "-s", "-D", "-1", "-p", str(PORT_IPERF)])
    time.sleep(0.3)
    r = _exec(lab, "a", ["iperf3", "-c", "10.77.0.2", "-p", str(PORT_IPERF), "-P", str(n), "-t", "10", "-J"],
              timeout=60, check=False)
    _exec(lab, "b", ["pkill", "-x", "iperf3"], check=False)
    report = json.loads(r.stdout)
    if "error" in report:
        raise RuntimeError(report["error"])
    return report["end"]["sum_received"]["bits_per_second"] / 1e9
