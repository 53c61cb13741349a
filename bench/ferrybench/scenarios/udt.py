"""UDT data channels: ferry's own UDT4 against ferry's TCP, ferry's QUIC and Globus' UDT
(Debian's globus-gridftp-server and globus-url-copy over libudt 4.11), on loopback and across
the lossy netlab paths, hosts on cubic and on bbr, with CPU seconds per GB; and ferry's UDT
sharing a clean bottleneck with a cubic TCP flow."""

import contextlib
import os
import resource
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
from .quic import beside_tcp
from .registry import scenario
from .security import _client_env, _setup_pki, _start_ferry_gsi, _start_globus_gsi
from .wan import PATHS, _iperf, _socket_buffer_max, _spawn_in, _timed, _topology_file, _wait_port

MIB = 1 << 20
FERRY = os.path.join(REPO_ROOT, "target", "release", "ferry")
WHITELIST = ("--dc-whitelist", "tcp,udt,quic,gsi")
LOOP_SUBJECTS = [("tcp", 1), ("udt", 1), ("udt:cc=udt", 1), ("udt", 4), ("quic", 1)]
WAN_SUBJECTS = [("udt", 1), ("udt:cc=udt", 1), ("quic", 1), ("tcp", 1), ("tcp", 8)]
WAN_PATHS = ["wan-long-haul", "wan-lossy"]
CCS = ["cubic", "bbr"]
FIRST, LARGEST = 16 * MIB, 4096 * MIB
# Globus' UDT file, sparse on tmpfs: globus-url-copy -udt runs stream mode, which has no -len.
SHM = "/dev/shm"
# The seed's table (GridFTP over UDT, 004): 3-4x single-stream TCP on 60-200 ms paths and about
# 95 % of raw UDT. The issue's own measurement of Globus on these paths, cubic hosts (Mbit/s).
ISSUE_GLOBUS_UDT = {"wan-long-haul": "91–102", "wan-lossy": "22"}

# The seed's own figures, beside ours (GridFTP over UDT, `../shared/seeds/004_*`, Tables 2 and
# 3; Table 1's figures are not in the text, only that UDT beat the best TCP 4x at 204 and 60 ms).
SEED_TABLE = Table(
    "The seed's figures (GridFTP over UDT, Reno hosts, 1 Gbit/s paths): Mbit/s",
    ["path", "flows", "GridFTP over TCP", "GridFTP over UDT", "UDT / TCP"],
    [["Japan–ORNL, 194 ms", "each alone", "132.1", "416.8", "3.2"],
     ["Japan–ORNL, 194 ms", "1 TCP + 1 UDT at once", "122.6", "404.3", "3.3"],
     ["the seed's Table 3 path, 193 ms", "each alone", "80.1", "240.2", "3.0"],
     ["the seed's Table 3 path, 193 ms", "1 TCP + 1 UDT at once", "42.4", "187.6", "4.4"],
     ["ANL–Auckland 204 ms, ANL–LA 60 ms", "each alone", "(figures lost)", "(figures lost)", "≈ 4"],
     ["TeraGrid", "alone", "", "≈ 700 (80 % CPU; TCP 30–50 %)", ""]],
)

METHOD = (
    "**Loopback**: one `ferry serve --anonymous --dc-whitelist tcp,udt,quic,gsi` and `ferry copy -q -p N "
    "--transport T --length SIZE ftp://127.0.0.1:PORT/dev/zero /dev/null`, T = tcp, udt (ferry's "
    "model-based controller), udt:cc=udt (libudt's CUDTCC rules in ferry's UDT) or quic (ferry's QUIC, "
    "its default BBR, encrypted: QUIC always is), subjects alternating "
    "run by run. **Loopback with GSI** (DCAU A, clear data, as globus-url-copy -udt defaults): "
    "**Globus UDT** is `globus-url-copy -udt` from `globus-gridftp-server -dc-whitelist udt,gsi,tcp` "
    "(stream mode: Globus never completes a MODE E connection it accepts over UDT with GSI), "
    "**guc → ferry** the same client against `ferry serve --gsi`, **ferry → Globus** `ferry copy -p 1 "
    "--transport udt` from that Globus server, **ferry udt/tcp** `ferry copy -p 1 "
    "--transport T` against `ferry serve --gsi` (for quic the GSI credentials ride in QUIC's own TLS "
    "1.3); the file is a sparse SIZE file on /dev/shm, written "
    "to /dev/null. CPU is the client's rusage plus the server's process tree, per decimal GB. "
    "**Netlab**: `long-haul` (1 Gbit/s, 200 ms, 0.1 % loss each way) and `lossy-wan` (1 Gbit/s, "
    "60 ms, 1 % loss each way), both hosts on cubic then on bbr (their TCP; ferry's UDT runs its own "
    "controller either way), rmem/wmem_max 64 MiB, servers in host b, clients in host a. **Globus "
    "UDT** is globus-url-copy -udt from a GSI globus-gridftp-server in host b (-ss names the host "
    "certificate's subject, issued for localhost); **Globus TCP -p N** the same client and server "
    "without -udt, N parallel streams; **guc → ferry UDT** the same client with -udt against a GSI "
    "`ferry serve` in host b (ferry's controller sending into libudt's receiver); **ferry → Globus "
    "UDT** `ferry copy -p 1 --transport udt --subject DN` from the GSI globus-gridftp-server "
    "(libudt's CUDTCC sending into ferry's receiver). iperf3 -P 1 TCP and iperf3 UDP at 1 Gbit/s "
    "(the link's limit) run on the same hosts. CPU per decimal GB on netlab is the client's (its "
    "rusage, through `ferry-netlab exec`) plus the serving server's process tree. "
    "Each subject is first sized, untimed: from "
    f"{FIRST >> 20} MiB, doubled until one transfer lasts SECONDS s (--udt-seconds) or reaches "
    f"{LARGEST >> 20} MiB; the timed runs move that size. **Fairness**: `wan-60ms` (1 Gbit/s, 60 ms, "
    "no loss, cubic hosts), an iperf3 cubic flow for 40 s and, from its 10th second, one `ferry copy "
    "--transport udt` of 1 GiB, each one's rate over the UDT transfer's span."
)


@scenario("udt", "UDT data channels: loopback, lossy long paths, Globus UDT, fairness")
def run(ctx) -> ScenarioResult:
    result = ScenarioResult("udt", "UDT data channels against TCP and Globus UDT", METHOD)
    parts = ctx.options.udt_paths
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
    result.notes.append(f"Netlab transfers sized to last at least {ctx.options.udt_seconds} s (--udt-seconds).")
    _netlab("down", "--all", check=False)
    with _socket_buffer_max(64 * MIB):
        with tempfile.TemporaryDirectory() as pki_dir:
            os.chmod(pki_dir, 0o755)
            pki = _setup_pki(ctx, pki_dir)
            for name in wan:
                _wan(ctx, result, name, pki)
        if wan:
            result.tables.append(SEED_TABLE)
        if "fairness" in parts:
            _fairness(ctx, result)
    return result


@contextlib.contextmanager
def _shm_file(size):
    path = os.path.join(SHM, f"ferry-udt-bench-{os.getpid()}.bin")
    with open(path, "wb") as f:
        f.truncate(size)
    os.chmod(path, 0o644)
    try:
        yield path
    finally:
        os.remove(path)


def _loopback(ctx, result):
    o = ctx.options
    size = o.size
    samples = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = start_ferry(FERRY, tmp, extra=WHITELIST)
        try:
            url = f"ftp://127.0.0.1:{server.port}/dev/zero"
            for r in range(o.runs):
                order = LOOP_SUBJECTS if r % 2 == 0 else list(reversed(LOOP_SUBJECTS))
                for transport, n in order:
                    ctx.log(f"udt loopback: {transport} -p {n} run {r + 1}/{o.runs}")
                    cmd = [FERRY, "copy", "-q", "-p", str(n), "--transport", transport, "--length", str(size),
                           url, "/dev/null"]
                    got = _measure(cmd, server.pid, size, tmp)
                    if isinstance(got, str):
                        ctx.failures += 1
                        result.notes.append(f"loopback {transport} -p {n} run {r + 1} failed: {got}")
                        continue
                    samples.setdefault((transport, n), []).append(got)
        finally:
            processes.kill_tree(server.proc)
    rows = []
    for s in LOOP_SUBJECTS:
        rate = summarize([g for g, _ in samples.get(s, [])])
        cpu = summarize([c for _, c in samples.get(s, [])])
        result.summaries[(f"loopback {s[0]}", str(s[1]))] = rate
        rows.append([s[0], str(s[1]), rate.cell(2), cpu.cell(2)])
    result.tables.append(Table(f"Loopback, {size >> 20} MiB /dev/zero → /dev/null: GB/s and CPU s per GB, "
                               "median (min–max)", ["transport", "streams", "GB/s", "CPU s/GB"], rows))
    result.raw.extend({"where": "loopback", "transport": s[0], "streams": s[1], "gb_s": g, "cpu_s_per_gb": c}
                      for s, v in samples.items() for g, c in v)


def _measure(cmd, server_pid, size, tmp):
    """Runs `cmd`; (GB/s, CPU s per GB with the server's tree), or the failure's text."""
    before = proctree.tree_cpu_seconds(server_pid)
    try:
        r = run_timed(cmd, 900, os.path.join(tmp, "client.out"))
    except subprocess.TimeoutExpired:
        return "timed out"
    server_cpu = proctree.tree_cpu_seconds(server_pid) - before
    if r.returncode != 0:
        return r.output[-300:].strip()
    gb = size / 1e9
    return gb / r.wall_s, (r.cpu_s + server_cpu) / gb


def _loopback_gsi(ctx, result):
    o = ctx.options
    size = min(o.size, 2048 * MIB)
    subjects = ["Globus UDT", "guc → ferry udt", "ferry → Globus udt", "ferry udt", "ferry quic", "ferry tcp"]
    samples = {}
    with tempfile.TemporaryDirectory() as tmp, _shm_file(size) as path:
        os.chmod(tmp, 0o755)
        pki = _setup_pki(ctx, tmp)
        ferry = start_ferry(FERRY, tmp, out_name="ferry-gsi.out",
                            logins=("--gsi", "--host-cert", pki["hostcert"], "--host-key", pki["hostkey"],
                                    "--cert-dir", pki["certs"], "--gridmap", pki["gridmap"]),
                            extra=WHITELIST)
        globus = _start_globus_gsi(tmp, pki, extra=("-dc-whitelist", "udt,gsi,tcp"))
        try:
            with _client_env(pki):
                for r in range(o.runs):
                    order = subjects if r % 2 == 0 else list(reversed(subjects))
                    for subject in order:
                        ctx.log(f"udt loopback GSI: {subject} run {r + 1}/{o.runs}")
                        server = globus if "Globus" in subject else ferry
                        url = f"gsiftp://localhost:{server.port}{path}"
                        if subject.startswith("ferry"):
                            cmd = [FERRY, "copy", "-q", "-p", "1", "--transport", subject.split()[-1], url,
                                   "/dev/null"]
                        else:
                            cmd = ["globus-url-copy", "-udt", url, "file:///dev/null"]
                        got = _measure(cmd, server.proc.pid, size, tmp)
                        if isinstance(got, str):
                            ctx.failures += 1
                            result.notes.append(f"loopback GSI {subject} run {r + 1} failed: {got}")
                            continue
                        samples.setdefault(subject, []).append(got)
        finally:
            processes.kill_tree(ferry.proc)
            processes.kill_tree(globus.proc)
    rates = {s: summarize([g for g, _ in samples.get(s, [])]) for s in subjects}
    rows = []
    for s in subjects:
        cpu = summarize([c for _, c in samples.get(s, [])])
        result.summaries[("loopback GSI", s)] = rates[s]
        rows.append([s, rates[s].cell(2), cpu.cell(2), fmt(ratio(rates[s], rates["Globus UDT"]))])
    result.tables.append(Table(f"Loopback with GSI (DCAU A, clear data), one stream, {size >> 20} MiB tmpfs "
                               "file → /dev/null: GB/s and CPU s per GB, median (min–max)",
                               ["subject", "GB/s", "CPU s/GB", "/ Globus UDT"], rows))
    result.raw.extend({"where": "loopback-gsi", "subject": s, "gb_s": g, "cpu_s_per_gb": c}
                      for s, v in samples.items() for g, c in v)


def _host_subject(pki):
    r = subprocess.run(["openssl", "x509", "-noout", "-subject", "-nameopt", "compat", "-in", pki["hostcert"]],
                       check=True, capture_output=True, text=True)
    return r.stdout.strip().removeprefix("subject=").strip()


def _iperf_udp(lab):
    """iperf3 UDP at the link's rate from b to a for 8 s: Mbit/s received."""
    import json
    _exec(lab, "b", ["iperf3", "-s", "-D", "-1", "-p", "5202"])
    time.sleep(0.3)
    r = _exec(lab, "a", ["iperf3", "-c", "10.77.0.2", "-p", "5202", "-u", "-b", "1G", "-R", "-t", "8", "-J"],
              timeout=60, check=False)
    _exec(lab, "b", ["pkill", "-x", "iperf3"], check=False)
    data = json.loads(r.stdout)
    return data["end"]["sum"]["bits_per_second"] / 1e6


def _wan(ctx, result, name, pki):
    o = ctx.options
    topo, desc, _rtt = PATHS[name]
    subjects = [f"{t} -p {n}" for t, n in WAN_SUBJECTS] + ["Globus UDT", "guc → ferry UDT", "ferry → Globus UDT",
                                                            "Globus TCP -p 1", "Globus TCP -p 8"]
    rates, sizes, cpus = {}, {}, {}
    subject_dn = _host_subject(pki)
    with tempfile.TemporaryDirectory() as tmp, _shm_file(LARGEST) as path, _client_env(pki):
        os.chmod(tmp, 0o755)
        for cc in CCS:
            ctx.log(f"udt: {topo} with {cc} hosts")
            with _lab(_topology_file(tmp, topo, cc), "wan") as lab:
                out = open(os.path.join(tmp, "servers.out"), "ab")
                ferry = _spawn_in(lab, "b", [FERRY, "serve", "--listen", "10.77.0.2:2811", "--root", "/", "--anonymous-whole-fs",
                                             "--anonymous", *WHITELIST], out)
                # The same globus-url-copy -udt against ferry's sender: ferry's controller feeding
                # libudt's receiver across the path.
                ferry_gsi = _spawn_in(lab, "b", [FERRY, "serve", "--listen", "10.77.0.2:2813", "--root", "/", "--anonymous-whole-fs",
                                                 "--gsi", "--host-cert", pki["hostcert"], "--host-key",
                                                 pki["hostkey"], "--cert-dir", pki["certs"], "--gridmap",
                                                 pki["gridmap"], *WHITELIST], out)
                conf = os.path.join(tmp, "globus.conf")
                open(conf, "w").close()
                genv = ["env", f"X509_CERT_DIR={pki['certs']}", f"X509_USER_CERT={pki['hostcert']}",
                        f"X509_USER_KEY={pki['hostkey']}", f"GRIDMAP={pki['gridmap']}"]
                globus = _spawn_in(lab, "b", [*genv, "globus-gridftp-server", "-c", conf, "-p", "2812",
                                              "-hostname", "10.77.0.2", "-dc-whitelist", "udt,gsi,tcp", "-no-chdir",
                                              "-l", os.path.join(tmp, "globus.log")], out)
                out.close()
                try:
                    _wait_port(lab, "b", 2811, ferry, "ferry serve")
                    _wait_port(lab, "b", 2812, globus, "globus-gridftp-server")
                    _wait_port(lab, "b", 2813, ferry_gsi, "ferry serve --gsi")
                    for what, measure in (("iperf3 tcp", lambda: _iperf(lab, 1, None)),
                                          ("iperf3 udp", lambda: _iperf_udp(lab) / 1000)):
                        try:
                            rates.setdefault((cc, what), []).append(measure())
                        except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
                            result.notes.append(f"{topo} {cc} {what} failed: {str(e).splitlines()[0]}")

                    def copy(subject, size):
                        """(wall seconds, CPU seconds of client and server)."""
                        if subject == "ferry → Globus UDT":
                            os.truncate(path, size)
                            cmd = [FERRY, "copy", "-q", "-p", "1", "--transport", "udt", "--subject", subject_dn,
                                   f"gsiftp://10.77.0.2:2812{path}", "/dev/null"]
                            server = globus
                        elif subject.startswith(("Globus", "guc")):
                            # Stream mode has no -len: the sparse file takes each size.
                            os.truncate(path, size)
                            how = ["-p", subject.split()[-1]] if "TCP" in subject else ["-udt"]
                            server, port = (ferry_gsi, 2813) if subject.startswith("guc") else (globus, 2812)
                            cmd = ["globus-url-copy", *how, "-ss", subject_dn,
                                   f"gsiftp://10.77.0.2:{port}{path}", "file:///dev/null"]
                        else:
                            transport, _, n = subject.split()
                            cmd = [FERRY, "copy", "-q", "-p", n, "--transport", transport, "--length", str(size),
                                   "ftp://10.77.0.2:2811/dev/zero", "/dev/null"]
                            server = ferry
                        before = _children_cpu(), proctree.tree_cpu_seconds(server.pid)
                        wall = _timed(lab, cmd, 900)
                        cpu = _children_cpu() - before[0] + proctree.tree_cpu_seconds(server.pid) - before[1]
                        return wall, cpu

                    for subject in subjects:
                        size = FIRST
                        try:
                            while size < LARGEST and copy(subject, size)[0] < o.udt_seconds:
                                size *= 2
                        except (RuntimeError, subprocess.TimeoutExpired) as e:
                            result.notes.append(f"{topo} {cc} {subject} sizing: {str(e).splitlines()[0]}")
                        sizes[(cc, subject)] = size
                    for r in range(o.runs):
                        order = subjects if r % 2 == 0 else list(reversed(subjects))
                        for subject in order:
                            size = sizes[(cc, subject)]
                            ctx.log(f"udt: {topo} {cc} {subject} run {r + 1}/{o.runs} {size >> 20} MiB")
                            try:
                                wall, cpu = copy(subject, size)
                            except (RuntimeError, subprocess.TimeoutExpired) as e:
                                ctx.failures += 1
                                result.notes.append(f"{topo} {cc} {subject} run {r + 1} failed: "
                                                    f"{str(e).splitlines()[0]}")
                                continue
                            gbit = size * 8 / wall / 1e9
                            rates.setdefault((cc, subject), []).append(gbit)
                            cpus.setdefault((cc, subject), []).append(cpu / (size / 1e9))
                            result.raw.append({"where": topo, "cc": cc, "subject": subject, "bytes": size,
                                               "gbit_s": gbit, "cpu_s_per_gb": cpu / (size / 1e9)})
                finally:
                    processes.kill_tree(ferry)
                    processes.kill_tree(ferry_gsi)
                    processes.kill_tree(globus)
                    time.sleep(0.2)
    cols = subjects + ["iperf3 tcp", "iperf3 udp"]
    rows = []
    for cc in CCS:
        s = {sub: summarize([g * 1000 for g in rates.get((cc, sub), [])]) for sub in cols}
        rows.append([cc] + [s[sub].cell(0) + (f" [{sizes.get((cc, sub), 0) >> 20} MiB]" if sub in subjects else "")
                            for sub in cols] + [
            fmt(ratio(s["udt -p 1"], s["Globus UDT"])), fmt(ratio(s["guc → ferry UDT"], s["Globus UDT"])),
            fmt(ratio(s["ferry → Globus UDT"], s["Globus UDT"])),
            fmt(ratio(s["quic -p 1"], s["Globus UDT"])),
            fmt(ratio(s["udt -p 1"], s["iperf3 udp"])), fmt(ratio(s["quic -p 1"], s["iperf3 udp"])),
            ISSUE_GLOBUS_UDT[name]])
        for sub in cols:
            result.summaries[(f"{topo} {cc} {sub}", "Mbit/s")] = s[sub]
    result.tables.append(Table(f"{topo} ({desc}): Mbit/s, median (min–max) [size moved]",
                               ["hosts' TCP"] + cols + ["udt-1 / Globus UDT", "guc → ferry / Globus UDT",
                                                        "ferry → Globus / Globus UDT",
                                                        "quic-1 / Globus UDT",
                                                        "udt-1 / link (iperf3 udp)",
                                                        "quic-1 / link (iperf3 udp)",
                                                        "Globus UDT, issue's figure"], rows))
    cpu_rows = [[cc] + [summarize(cpus.get((cc, sub), [])).cell(2) for sub in subjects] for cc in CCS]
    result.tables.append(Table(f"{topo}: CPU s per GB, client and server together, median (min–max)",
                               ["hosts' TCP"] + subjects, cpu_rows))
    if result.panel is None or name == "wan-long-haul":
        groups = [f"{topo}\n{cc}" for cc in CCS]
        result.panel = Panel(f"UDT, TCP and Globus UDT on {topo}", "Mbit/s", groups,
                             {sub: [summarize([g * 1000 for g in rates.get((cc, sub), [])]) for cc in CCS]
                              for sub in cols}, log_scale=True, xlabel="path, hosts' TCP")


def _children_cpu():
    """CPU seconds of every child process this one has waited for."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _fairness(ctx, result):
    """One UDT transfer and one cubic TCP flow (iperf3) through the clean 60 ms bottleneck."""
    beside_tcp(ctx, result, "udt", "UDT", WHITELIST, "one ferry UDT transfer")
