"""QUIC data channels against TCP: on loopback (throughput and CPU per GB, anonymous and with
GSI at DCAU N and PROT P) and across netlab paths (clean 60 ms, 200 ms / 0.1 %, 60 ms / 1 %),
hosts on cubic and on bbr."""

import os
import subprocess
import tempfile
import time

from .. import processes, proctree
from ..options import REPO_ROOT
from ..results import Panel, ScenarioResult, Table
from ..servers import start_ferry
from ..stats import ratio, summarize
from ..timed_command import run_timed
from ..units import fmt
from .netlab import NETLAB, _exec, _lab, _netlab
from .registry import scenario
from .wan import PATHS, _iperf, _socket_buffer_max, _spawn_in, _timed, _topology_file, _wait_port

MIB = 1 << 20
FERRY = os.path.join(REPO_ROOT, "target", "release", "ferry")
WHITELIST = ("--dc-whitelist", "tcp,quic,gsi")
# `quic -p 4`: four QUIC connections; `quic:parallel=streams -p 4`: four streams of one.
# `quic:mtu=1452`: quinn's own datagram bound (Ethernet's), the anchor for ferry's 8952.
LOOP_SUBJECTS = [("tcp", 1), ("quic", 1), ("quic:mtu=1452", 1), ("tcp", 4), ("quic", 4),
                 ("quic:parallel=streams", 4)]
WAN_SUBJECTS = [("tcp", 1), ("tcp", 8), ("quic", 1), ("quic", 4), ("quic:parallel=streams", 4)]
WAN_PATHS = ["wan", "wan-long-haul", "wan-lossy"]
# GSI on loopback: (transport, level) with ferry copy's flags per level.
GSI_SUBJECTS = [("tcp", "nodcau"), ("tcp", "dcpriv"), ("quic", "nodcau"), ("quic", "dcpriv")]
CCS = ["cubic", "bbr"]
# Netlab transfers: before its timed runs each subject is sized, untimed, by doubling from FIRST
# until one transfer lasts SECONDS or reaches LARGEST: on a 200 ms path a few-second transfer is
# mostly start-up, which is not what moving a large file costs.
# (SECONDS is --quic-seconds: at 10 s, start-up on the 200 ms path still weighed half of QUIC's
# figure, 386 Mbit/s at 512 MiB where 2 GiB averaged 707 and ran at ~930 after the first 512 MiB.)
FIRST, LARGEST = 16 * MIB, 4096 * MIB
# What Globus' UDT reached on the same netlab paths (issue "UDT", measured with Debian's
# globus-url-copy -udt against globus-gridftp-server -dc-whitelist udt,gsi,tcp, cubic hosts):
# not measured in this run, shown for the bars of the QUIC issue.
GLOBUS_UDT_MBIT = {"wan": "not measured", "wan-long-haul": "91–102", "wan-lossy": "22"}

METHOD = (
    "**Loopback**: one `ferry serve --anonymous --dc-whitelist tcp,quic,gsi` on 127.0.0.1 and "
    "`ferry copy -q -p N --transport T --length SIZE ftp://127.0.0.1:PORT/dev/zero /dev/null` (MODE E, "
    "memory to memory), T = tcp, quic (N QUIC connections) or quic:parallel=streams (N streams of "
    "one QUIC connection), subjects alternating run by run. Throughput is SIZE over the "
    "client's wall time; CPU is the client's rusage plus the server's process tree (/proc), per "
    "decimal GB. QUIC encrypts (TLS 1.3, AES-GCM) where the TCP runs carry clear data, so the CPU "
    "column includes QUIC's encryption. **Loopback with GSI**: `ferry serve --gsi` (host credential "
    "from `ferry ca`, the user's proxy from grid-proxy-init, as scenario `security`) and `ferry copy "
    "-p 1 --transport T [--no-dcau | --dcpriv] gsiftp://localhost:PORT/dev/zero /dev/null`: under "
    "DCAU A/PROT P a TCP connection runs GSI TLS records, a QUIC connection authenticates with the "
    "GSI credentials in its own TLS 1.3 handshake and runs no second TLS inside. **Netlab**: the "
    "`wan-60ms` (1 Gbit/s, 60 ms, no loss), `long-haul` (1 Gbit/s, 200 ms, 0.1 % loss "
    "each way) and `lossy-wan` (1 Gbit/s, 60 ms, 1 % loss each way) topologies, both hosts on cubic, "
    "then on bbr (their TCP; QUIC's controller is quinn's BBR, ferry's default, in both), rmem/wmem_max "
    "64 MiB, the server in host b, the client in host a, default buffers (no --tcp-bs). iperf3 -P 1 "
    "(8 s) is TCP's one-stream figure on the same hosts. Each subject is first sized, untimed: "
    f"from {FIRST >> 20} MiB, doubled until one transfer lasts SECONDS s (--quic-seconds) or reaches {LARGEST >> 20} MiB; "
    "the timed runs then move that size (shown in the table), so start-up weighs as in a large file's "
    "copy. Globus UDT's figures come from the UDT issue's measurement on the same topologies, not "
    "from this run."
)


@scenario("quic", "QUIC data channels: loopback and lossy long paths")
def run(ctx) -> ScenarioResult:
    result = ScenarioResult("quic", "QUIC data channels against TCP", METHOD)
    parts = ctx.options.quic_paths
    if "loopback" in parts:
        _loopback(ctx, result)
    if "loopback-gsi" in parts:
        _loopback_gsi(ctx, result)
    wan = [p for p in WAN_PATHS if p in parts]
    if not wan and "fairness" not in parts:
        return result
    if os.geteuid() != 0 or not os.path.exists(NETLAB):
        result.notes.append("Netlab paths not measured: need root and target/release/ferry-netlab.")
        return result
    result.notes.append(f"Netlab transfers sized to last at least {ctx.options.quic_seconds} s (--quic-seconds).")
    _netlab("down", "--all", check=False)
    with _socket_buffer_max(64 * MIB):
        for name in wan:
            _wan(ctx, result, name)
        if "fairness" in parts:
            _fairness(ctx, result)
    return result


def _fairness(ctx, result):
    """One QUIC transfer and one cubic TCP flow (iperf3) through the clean 60 ms bottleneck."""
    beside_tcp(ctx, result, "quic", "QUIC", WHITELIST, "one QUIC transfer (BBR)")


def beside_tcp(ctx, result, transport, label, whitelist, subject):
    """`subject`, one `ferry copy --transport TRANSPORT`, and one cubic TCP flow (iperf3)
    through the clean 60 ms bottleneck, `runs` times: each one's rate while both ran."""
    o = ctx.options
    key = transport.split(":")[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        with _lab(_topology_file(tmp, "wan-60ms", "cubic"), "wan") as lab:
            out = open(os.path.join(tmp, "ferry.out"), "ab")
            server = _spawn_in(lab, "b", [FERRY, "serve", "--listen", "10.77.0.2:2811", "--root", "/", "--anonymous-whole-fs",
                                          "--anonymous", *whitelist], out)
            out.close()
            try:
                _wait_port(lab, "b", 2811, server, "ferry serve")
                for r in range(o.runs):
                    ctx.log(f"{key} fairness: run {r + 1}/{o.runs}")
                    try:
                        rows.append(_share(lab, tmp, transport))
                    except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
                        ctx.failures += 1
                        result.notes.append(f"fairness run {r + 1} failed: {str(e).splitlines()[0]}")
            finally:
                processes.kill_tree(server)
                time.sleep(0.2)
    ours = summarize([u for u, _ in rows])
    tcp = summarize([t for _, t in rows])
    result.summaries[(f"fairness {key}", "Mbit/s")] = ours
    result.summaries[("fairness tcp", "Mbit/s")] = tcp
    total = max(ours.median + tcp.median, 1e-9) if rows else 1
    result.tables.append(Table(
        f"Sharing wan-60ms (1 Gbit/s, 60 ms, no loss, cubic hosts): {subject} and one iperf3 TCP flow "
        "(cubic) at once, Mbit/s while both ran, median (min–max); bar: neither under a third",
        [label, "TCP cubic", f"{label} share", "TCP share"],
        [[ours.cell(0), tcp.cell(0), fmt(ours.median / total), fmt(tcp.median / total)]] if rows else []))
    result.raw.extend({"where": "fairness", f"{key}_mbit_s": u, "tcp_mbit_s": t} for u, t in rows)


def _share(lab, tmp, transport="quic"):
    """iperf3 (cubic, 40 s) from b to a; after 10 s, `ferry copy --transport T` of 1 GiB from b
    to a; returns both rates over the ferry transfer's span."""
    import json
    _exec(lab, "b", ["iperf3", "-s", "-D", "-1", "-p", "5201"])
    time.sleep(0.3)
    report = os.path.join(tmp, "iperf.json")
    if os.path.exists(report):
        os.remove(report)  # iperf3 --logfile appends
    iperf = subprocess.Popen([NETLAB, "exec", "--lab", lab, "a", "--", "iperf3", "-c", "10.77.0.2", "-p", "5201",
                              "-R", "-t", "40", "-i", "1", "-J", "--logfile", report],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    try:
        time.sleep(10)
        start = time.monotonic() - t0
        size = 1024 * MIB
        wall = _timed(lab, [FERRY, "copy", "-q", "--transport", transport, "--length", str(size),
                            "ftp://10.77.0.2:2811/dev/zero", "/dev/null"], 120)
        end = start + wall
        iperf.wait(timeout=60)
    finally:
        if iperf.poll() is None:
            iperf.kill()
        _exec(lab, "b", ["pkill", "-x", "iperf3"], check=False)
    with open(report) as f:
        data = json.load(f)
    if end > 39:
        raise RuntimeError(f"the {transport} transfer outlasted the TCP flow ({wall:.1f} s)")
    bits = [i["sum"]["bits_per_second"] for i in data["intervals"]
            if i["sum"]["start"] >= start and i["sum"]["end"] <= end]
    if not bits:
        raise RuntimeError(f"no iperf3 interval fell within the {transport} transfer")
    return size * 8 / wall / 1e6, sum(bits) / len(bits) / 1e6


def _loopback_gsi(ctx, result):
    from .security import FERRY_FLAGS, _client_env, _setup_pki
    o = ctx.options
    size = o.size
    samples = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        pki = _setup_pki(ctx, tmp)
        server = start_ferry(FERRY, tmp, out_name="ferry-gsi.out",
                             logins=("--gsi", "--host-cert", pki["hostcert"], "--host-key", pki["hostkey"],
                                     "--cert-dir", pki["certs"], "--gridmap", pki["gridmap"]),
                             extra=WHITELIST)
        try:
            url = f"gsiftp://localhost:{server.port}/dev/zero"
            with _client_env(pki):
                for r in range(o.runs):
                    order = GSI_SUBJECTS if r % 2 == 0 else list(reversed(GSI_SUBJECTS))
                    for transport, level in order:
                        ctx.log(f"quic loopback GSI: {transport} {level} run {r + 1}/{o.runs}")
                        cmd = [FERRY, "copy", "-q", "-p", "1", "--transport", transport, *FERRY_FLAGS[level],
                               "--length", str(size), url, "/dev/null"]
                        before = proctree.tree_cpu_seconds(server.pid)
                        out = run_timed(cmd, 600, os.path.join(tmp, "client.out"))
                        server_cpu = proctree.tree_cpu_seconds(server.pid) - before
                        if out.returncode != 0:
                            ctx.failures += 1
                            result.notes.append(f"loopback GSI {transport} {level} run {r + 1} failed: "
                                                f"{out.output[-300:].strip()}")
                            continue
                        gb = size / 1e9
                        samples.setdefault((transport, level), []).append(
                            (gb / out.wall_s, (out.cpu_s + server_cpu) / gb))
        finally:
            processes.kill_tree(server.proc)
    rows = []
    for transport, level in GSI_SUBJECTS:
        rate = summarize([g for g, _ in samples.get((transport, level), [])])
        cpu = summarize([c for _, c in samples.get((transport, level), [])])
        result.summaries[(f"loopback GSI {transport}", level)] = rate
        rows.append([transport, level, rate.cell(2), cpu.cell(2)])
    result.tables.append(Table(f"Loopback with GSI, one stream, {size >> 20} MiB: GB/s and CPU s per GB, "
                               "median (min–max)", ["transport", "level", "GB/s", "CPU s/GB"], rows))
    result.raw.extend({"where": "loopback-gsi", "transport": t, "level": lv, "gb_s": g, "cpu_s_per_gb": c}
                      for (t, lv), v in samples.items() for g, c in v)


def _loopback(ctx, result):
    o = ctx.options
    size = o.size
    with tempfile.TemporaryDirectory() as tmp:
        server = start_ferry(FERRY, tmp, extra=WHITELIST)
        try:
            url = f"ftp://127.0.0.1:{server.port}/dev/zero"
            samples = {}

            def measure(subject):
                transport, n = subject
                cmd = [FERRY, "copy", "-q", "-p", str(n), "--transport", transport, "--length", str(size), url,
                       "/dev/null"]
                before = proctree.tree_cpu_seconds(server.pid)
                r = run_timed(cmd, 600, os.path.join(tmp, "client.out"))
                server_cpu = proctree.tree_cpu_seconds(server.pid) - before
                if r.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.output[-400:]}")
                gb = size / 1e9
                samples.setdefault(subject, []).append((gb / r.wall_s, (r.cpu_s + server_cpu) / gb))

            for r in range(o.runs):
                order = LOOP_SUBJECTS if r % 2 == 0 else list(reversed(LOOP_SUBJECTS))
                for subject in order:
                    ctx.log(f"quic loopback: {subject[0]} -p {subject[1]} run {r + 1}/{o.runs}")
                    try:
                        measure(subject)
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        ctx.failures += 1
                        result.notes.append(f"loopback {subject} run {r + 1} failed: {str(e).splitlines()[0]}")
        finally:
            processes.kill_tree(server.proc)
    rows = []
    rates = {s: summarize([g for g, _ in samples.get(s, [])]) for s in LOOP_SUBJECTS}
    cpus = {s: summarize([c for _, c in samples.get(s, [])]) for s in LOOP_SUBJECTS}
    for sub in LOOP_SUBJECTS:
        tcp = rates[("tcp", sub[1])]
        rows.append([sub[0], str(sub[1]), rates[sub].cell(2), cpus[sub].cell(2), fmt(ratio(rates[sub], tcp))])
        result.summaries[(f"loopback {sub[0]}", str(sub[1]))] = rates[sub]
    result.tables.append(Table(f"Loopback, {size >> 20} MiB /dev/zero → /dev/null: GB/s and CPU s per GB, "
                               "median (min–max)",
                               ["transport", "streams", "GB/s", "CPU s/GB", "/ tcp, same streams"], rows))
    result.raw.extend({"where": "loopback", "transport": s[0], "streams": s[1], "gb_s": g, "cpu_s_per_gb": c}
                      for s, v in samples.items() for g, c in v)


def _wan(ctx, result, name):
    o = ctx.options
    topo, desc, _rtt = PATHS[name]
    rates, sizes = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        for cc in CCS:
            ctx.log(f"quic: {topo} with {cc} hosts")
            with _lab(_topology_file(tmp, topo, cc), "wan") as lab:
                out = open(os.path.join(tmp, "ferry.out"), "ab")
                server = _spawn_in(lab, "b", [FERRY, "serve", "--listen", "10.77.0.2:2811", "--root", "/", "--anonymous-whole-fs",
                                              "--anonymous", *WHITELIST], out)
                out.close()
                try:
                    _wait_port(lab, "b", 2811, server, "ferry serve")
                    try:
                        rates.setdefault((cc, "iperf3"), []).append(_iperf(lab, 1, None))
                    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                        result.notes.append(f"{topo} {cc} iperf3 failed: {str(e).splitlines()[0]}")
                    def copy(transport, n, size):
                        cmd = [FERRY, "copy", "-q", "-p", str(n), "--transport", transport, "--length",
                               str(size), "ftp://10.77.0.2:2811/dev/zero", "/dev/null"]
                        return _timed(lab, cmd, 600)

                    for transport, n in WAN_SUBJECTS:
                        size = FIRST
                        try:
                            while size < LARGEST and copy(transport, n, size) < o.quic_seconds:
                                size *= 2
                        except (RuntimeError, subprocess.TimeoutExpired) as e:
                            result.notes.append(f"{topo} {cc} {transport} -p {n} sizing: {str(e).splitlines()[0]}")
                        sizes[(cc, f"{transport} -p {n}")] = size
                    for r in range(o.runs):
                        order = WAN_SUBJECTS if r % 2 == 0 else list(reversed(WAN_SUBJECTS))
                        for transport, n in order:
                            key = (cc, f"{transport} -p {n}")
                            size = sizes[key]
                            ctx.log(f"quic: {topo} {cc} {transport} -p {n} run {r + 1}/{o.runs} {size >> 20} MiB")
                            try:
                                wall = copy(transport, n, size)
                            except (RuntimeError, subprocess.TimeoutExpired) as e:
                                ctx.failures += 1
                                result.notes.append(f"{topo} {cc} {key[1]} run {r + 1} failed: "
                                                    f"{str(e).splitlines()[0]}")
                                continue
                            gbit = size * 8 / wall / 1e9
                            rates.setdefault(key, []).append(gbit)
                            result.raw.append({"where": topo, "cc": cc, "transport": transport, "streams": n,
                                               "bytes": size, "gbit_s": gbit})
                finally:
                    processes.kill_tree(server)
                    time.sleep(0.2)
    subjects = [f"{t} -p {n}" for t, n in WAN_SUBJECTS] + ["iperf3"]
    rows = []
    for cc in CCS:
        s = {sub: summarize([g * 1000 for g in rates.get((cc, sub), [])]) for sub in subjects}
        rows.append([cc] + [s[sub].cell(0) + (f" [{sizes.get((cc, sub), 0) >> 20} MiB]" if sub != "iperf3" else "")
                            for sub in subjects] + [
            fmt(ratio(s["quic -p 1"], s["tcp -p 1"])), fmt(ratio(s["quic -p 1"], s["tcp -p 8"])),
            GLOBUS_UDT_MBIT[name]])
        for sub in subjects:
            result.summaries[(f"{topo} {cc} {sub}", "Mbit/s")] = s[sub]
    result.tables.append(Table(f"{topo} ({desc}): Mbit/s, median (min–max) [size moved]",
                               ["hosts' TCP"] + subjects + ["quic-1 / tcp-1", "quic-1 / tcp-8",
                                                            "Globus UDT (UDT issue, cubic)"], rows))
    if result.panel is None or name == "wan-long-haul":
        groups = [f"{topo}\n{cc}" for cc in CCS]
        result.panel = Panel(f"QUIC and TCP on {topo}", "Mbit/s", groups,
                             {sub: [summarize([g * 1000 for g in rates.get((cc, sub), [])]) for cc in CCS]
                              for sub in subjects}, log_scale=True, xlabel="path, hosts' TCP")
