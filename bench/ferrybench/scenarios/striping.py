"""Striping: clusters of data nodes on netlab (4 per side, 400 Mbit/s each, 60 ms), the cost of
a one-node stripe on loopback, and data nodes killed mid-transfer with the retry checked."""

import contextlib
import json
import os
import random
import shutil
import subprocess
import time

from .. import processes
from ..results import ScenarioResult, Table
from ..stats import ratio, summarize
from ..units import fmt, format_size
from .netlab import NETLAB, TOPOLOGIES, _exec, _lab, _netlab
from .wan import _spawn_in, _wait_port
from .registry import scenario

MIB = 1 << 20
TOPO = "cluster-pair"
DATA = "/dev/shm/ferry-bench-stripe"
SECRET = "ferry bench IPC secret, shared by frontends and data nodes"
# Ports inside the lab hosts.
FERRY_SINGLE, FERRY_FRONT, FERRY_NODE = 2811, 2812, 2820
GLOBUS_FRONT, GLOBUS_NODE = 2813, 2830
STREAMS = 4
SUBJECTS = ["ferry 1 node", "ferry striped", "Globus striped"]

METHOD = (
    "**Cluster pair** (netlab, `bench/topologies/cluster-pair.toml`): source hosts s1–s4 and "
    "destination hosts d1–d4, each behind its own 400 Mbit/s link to one router, 15 ms each way "
    "(60 ms round trip between the clusters), MTU 9000. Every host runs a data node "
    "(`ferry serve --data-node`, and `globus-gridftp-server -dn`); s1 and d1 also run the "
    "frontends (`ferry serve --remote-nodes` with the four nodes of its side and an IPC secret; "
    "`globus-gridftp-server -r`) and a plain single-node ferry server. The nodes of a side share "
    "one directory (tmpfs), as a cluster shares its file system. The client runs in s1: "
    "**ferry 1 node** is `ferry copy -p 4` between the single-node servers, **ferry striped** "
    "`ferry copy --stripe -p 4` between the frontends (1 MiB blocks, round robin), **Globus striped** "
    "`globus-url-copy -stripe -p 4` between the Globus frontends. One file of SIZE random bytes, "
    "third party; rate = SIZE over the client's wall time (logins, SPAS/SPOR and slow start "
    "included); every result is compared with the source. Subjects alternate run by run. "
    "**Node loss**: TRIES times, `ferry copy --stripe --json` between the ferry frontends, and at a "
    "random moment between 15 % and 85 % of the striped transfer's median time one of the eight "
    "data nodes, chosen at random, is killed (SIGKILL); the client retries on its own (restart "
    "markers, the remaining nodes); a try passes when the client exits 0 and the file is "
    "identical. The node is started again before the next try. "
    "**Loopback overhead**: on 127.0.0.x without netlab, `ferry copy -p 4` third party between two "
    "single-node servers and between two striped servers of one data node each (frontend on "
    "127.0.0.1, nodes on 127.0.0.2/3), LOOP bytes from tmpfs to tmpfs, alternating, RUNS runs."
)


def _source(path, size, ctx):
    if not os.path.exists(path) or os.path.getsize(path) != size:
        ctx.log(f"striping: writing {format_size(size)} of random data to {path}")
        with open(path + ".part", "wb") as f:
            for _ in range(size // MIB):
                f.write(os.urandom(MIB))
        os.rename(path + ".part", path)
    os.chmod(path, 0o644)


def _same(a, b):
    return subprocess.run(["cmp", "-s", a, b]).returncode == 0


class Cluster:
    """Everything started in the lab: ferry and Globus nodes, frontends, single servers."""

    def __init__(self, ctx, lab, addr, work):
        self.ctx, self.lab, self.addr, self.work = ctx, lab, addr, work
        self.secret = os.path.join(work, "secret")
        with open(self.secret, "w") as f:
            f.write(SECRET)
        self.procs = []
        self.ferry_nodes = {}  # host -> Popen
        self.empty = os.path.join(work, "empty.conf")
        open(self.empty, "w").close()

    def start(self):
        f = self.ctx.options.ferry
        for side, root in (("s", f"{DATA}/src"), ("d", f"{DATA}/dst")):
            hosts = [f"{side}{i}" for i in range(1, 5)]
            for h in hosts:
                self.start_ferry_node(h)
                self._start(h, ["globus-gridftp-server", "-c", self.empty, "-aa", "-anonymous-user", "nobody",
                                "-dn", "-hostname", self.addr[h], "-p", str(GLOBUS_NODE)], GLOBUS_NODE, "globus node")
            front = hosts[0]
            nodes = ",".join(f"{self.addr[h]}:{FERRY_NODE}" for h in hosts)
            write = ["--anonymous-write"] if side == "d" else []
            self._start(front, [f, "serve", "--listen", f"{self.addr[front]}:{FERRY_FRONT}", "--root", root,
                                "--anonymous", *write, "--allow-third-party", "anonymous", "--remote-nodes", nodes, "--ipc-secret-file", self.secret],
                        FERRY_FRONT, "ferry frontend")
            self._start(front, [f, "serve", "--listen", f"{self.addr[front]}:{FERRY_SINGLE}", "--root", root,
                                "--anonymous", *write, "--allow-third-party", "anonymous"], FERRY_SINGLE, "ferry single node")
            gnodes = ",".join(f"{self.addr[h]}:{GLOBUS_NODE}" for h in hosts)
            self._start(front, ["globus-gridftp-server", "-c", self.empty, "-aa", "-anonymous-user", "nobody",
                                "-hostname", self.addr[front], "-p", str(GLOBUS_FRONT), "-r", gnodes],
                        GLOBUS_FRONT, "globus frontend")

    def _start(self, host, cmd, port, what):
        p = _spawn_in(self.lab, host, cmd, open(os.path.join(self.work, f"{host}-{port}.log"), "ab"))
        self.procs.append(p)
        _wait_port(self.lab, host, port, p, f"{what} in {host}")
        return p

    def start_ferry_node(self, host):
        root = f"{DATA}/src" if host.startswith("s") else f"{DATA}/dst"
        p = self._start(host, [self.ctx.options.ferry, "serve", "--data-node", "--listen",
                               f"{self.addr[host]}:{FERRY_NODE}", "--root", root, "--ipc-secret-file",
                               self.secret], FERRY_NODE, "ferry data node")
        self.ferry_nodes[host] = p

    def kill_ferry_node(self, host):
        p = self.ferry_nodes.pop(host)
        p.kill()
        p.wait()

    def stop(self):
        for p in self.procs:
            processes.kill_tree(p)


def _command(ctx, subject, addr, name):
    s, d = addr["s1"], addr["d1"]
    if subject == "ferry 1 node":
        return [ctx.options.ferry, "copy", "-q", "-p", str(STREAMS), f"ftp://{s}:{FERRY_SINGLE}/src.bin",
                f"ftp://{d}:{FERRY_SINGLE}/{name}"]
    if subject == "ferry striped":
        return [ctx.options.ferry, "copy", "-q", "--stripe", "-p", str(STREAMS), f"ftp://{s}:{FERRY_FRONT}/src.bin",
                f"ftp://{d}:{FERRY_FRONT}/{name}"]
    return ["globus-url-copy", "-stripe", "-p", str(STREAMS), f"ftp://{s}:{GLOBUS_FRONT}{DATA}/src/src.bin",
            f"ftp://{d}:{GLOBUS_FRONT}{DATA}/dst/{name}"]


def _netlab_part(ctx, result, size, runs, tries):
    topo = os.path.join(TOPOLOGIES, f"{TOPO}.toml")
    os.makedirs(f"{DATA}/src", exist_ok=True)
    os.makedirs(f"{DATA}/dst", exist_ok=True)
    os.chmod(DATA, 0o755)
    os.chmod(f"{DATA}/src", 0o755)
    os.chmod(f"{DATA}/dst", 0o777)
    src = f"{DATA}/src/src.bin"
    _source(src, size, ctx)
    _netlab("down", "--all", check=False)
    rates = {s: [] for s in SUBJECTS}
    with _lab(topo, TOPO) as lab:
        addr = {f"{side}{i}": _netlab("addr", "--lab", lab, f"{side}{i}").stdout.strip()
                for side in "sd" for i in range(1, 5)}
        cluster = Cluster(ctx, lab, addr, ctx.scratch("striping"))
        try:
            cluster.start()
            for r in range(runs):
                order = SUBJECTS if r % 2 == 0 else list(reversed(SUBJECTS))
                for subject in order:
                    name = f"run-{r}.bin"
                    dst = f"{DATA}/dst/{name}"
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(dst)
                    ctx.log(f"striping: run {r + 1}/{runs} {subject} {format_size(size)}")
                    cmd = _command(ctx, subject, addr, name)
                    ctx.record_command(result, cmd)
                    t0 = time.monotonic()
                    p = _exec(lab, "s1", cmd, timeout=600, check=False)
                    wall = time.monotonic() - t0
                    if p.returncode != 0 or not _same(src, dst):
                        ctx.failures += 1
                        result.notes.append(f"{subject} run {r + 1} failed: exit {p.returncode} "
                                            f"{(p.stderr or p.stdout).strip()[-300:]}")
                        continue
                    rates[subject].append(size / wall / 1e6)
                    result.raw.append({"part": "netlab", "subject": subject, "bytes": size, "seconds": wall})
                    os.remove(dst)
            striped = summarize(rates["ferry striped"])
            expected = size / (striped.median * 1e6) if striped.n else 15.0
            loss = _node_loss(ctx, result, lab, cluster, addr, src, tries, expected)
        finally:
            cluster.stop()
    summ = {s: summarize(v) for s, v in rates.items()}
    rows = [[s, summ[s].cell(1), fmt(summ[s].median * 8 / 1000, 2)] for s in SUBJECTS]
    result.tables.append(Table(f"Cluster pair, 4 + 4 nodes at 400 Mbit/s, 60 ms: {format_size(size)} third party, "
                               "MB/s median (min–max)", ["subject", "MB/s", "Gbit/s"], rows))
    passed, mid = loss
    bars = [
        ["ferry striped / ferry 1 node (bar ≥ 3.5)", fmt(ratio(summ["ferry striped"], summ["ferry 1 node"]))],
        ["ferry striped / Globus striped (bar ≥ 1.0)", fmt(ratio(summ["ferry striped"], summ["Globus striped"]))],
        [f"node loss: identical files after a killed node (bar {tries} of {tries})",
         f"{passed} of {tries} ({mid} killed mid-transfer and retried)"],
    ]
    return summ, bars


def _node_loss(ctx, result, lab, cluster, addr, src, tries, expected):
    rng = random.Random(int(time.time()))
    hosts = [f"{side}{i}" for side in "sd" for i in range(1, 5)]
    passed = mid = 0
    for t in range(tries):
        victim = rng.choice(hosts)
        delay = rng.uniform(0.15, 0.85) * expected
        name = f"loss-{t}.bin"
        dst = f"{DATA}/dst/{name}"
        with contextlib.suppress(FileNotFoundError):
            os.remove(dst)
        cmd = [ctx.options.ferry, "copy", "--json", "--stripe", "-p", str(STREAMS),
               f"ftp://{addr['s1']}:{FERRY_FRONT}/src.bin", f"ftp://{addr['d1']}:{FERRY_FRONT}/{name}"]
        ctx.record_command(result, cmd)
        ctx.log(f"striping: node loss try {t + 1}/{tries}: kill {victim} after {delay:.1f} s")
        client = processes.spawn([NETLAB, "exec", "--lab", lab, "s1", "--", *cmd], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT)
        time.sleep(delay)
        cluster.kill_ferry_node(victim)
        try:
            out, _ = client.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            processes.kill_tree(client)
            out = b"timed out"
        text = out.decode(errors="replace")
        retried = '"event":"retry"' in text
        ok = client.returncode == 0 and _same(src, dst)
        passed += ok
        mid += retried
        events = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        errors = [e.get("error", "") for e in events if e.get("event") == "retry"]
        result.raw.append({"part": "node-loss", "try": t, "victim": victim, "after_s": delay, "ok": ok,
                           "retried": retried, "errors": errors})
        if not ok:
            ctx.failures += 1
            result.notes.append(f"node loss try {t + 1} (killed {victim}) failed: {text.strip()[-300:]}")
        with contextlib.suppress(FileNotFoundError):
            os.remove(dst)
        cluster.start_ferry_node(victim)
    return passed, mid


def _loopback_part(ctx, result, size, runs):
    f = ctx.options.ferry
    work = ctx.scratch("striping-loopback")
    src_root, dst_root = "/dev/shm/ferry-bench-stripe-lo/src", "/dev/shm/ferry-bench-stripe-lo/dst"
    os.makedirs(src_root, exist_ok=True)
    os.makedirs(dst_root, exist_ok=True)
    src = f"{src_root}/src.bin"
    _source(src, size, ctx)
    secret = os.path.join(work, "secret")
    with open(secret, "w") as fh:
        fh.write(SECRET)
    ports = {"single-src": 27811, "single-dst": 27812, "front-src": 27813, "front-dst": 27814,
             "node-src": 27815, "node-dst": 27816}
    cmds = [
        [f, "serve", "--listen", f"127.0.0.1:{ports['single-src']}", "--root", src_root, "--anonymous"],
        [f, "serve", "--listen", f"127.0.0.1:{ports['single-dst']}", "--root", dst_root, "--anonymous",
         "--anonymous-write"],
        [f, "serve", "--data-node", "--listen", f"127.0.0.2:{ports['node-src']}", "--root", src_root,
         "--ipc-secret-file", secret],
        [f, "serve", "--data-node", "--listen", f"127.0.0.3:{ports['node-dst']}", "--root", dst_root,
         "--ipc-secret-file", secret],
        [f, "serve", "--listen", f"127.0.0.1:{ports['front-src']}", "--root", src_root, "--anonymous",
         "--allow-third-party", "anonymous", "--remote-nodes", f"127.0.0.2:{ports['node-src']}", "--ipc-secret-file", secret],
        [f, "serve", "--listen", f"127.0.0.1:{ports['front-dst']}", "--root", dst_root, "--anonymous",
         "--anonymous-write", "--allow-third-party", "anonymous", "--remote-nodes", f"127.0.0.3:{ports['node-dst']}", "--ipc-secret-file", secret],
    ]
    procs = [processes.spawn(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in cmds]
    rates = {"unstriped": [], "striped, 1 node each": []}
    try:
        time.sleep(1.0)
        for r in range(runs):
            order = list(rates) if r % 2 == 0 else list(reversed(list(rates)))
            for subject in order:
                a, b = (("single-src", "single-dst") if subject == "unstriped" else ("front-src", "front-dst"))
                cmd = [f, "copy", "-q", "-p", str(STREAMS)] + (["--stripe"] if subject != "unstriped" else []) + [
                    f"ftp://127.0.0.1:{ports[a]}/src.bin", f"ftp://127.0.0.1:{ports[b]}/out.bin"]
                ctx.record_command(result, cmd)
                dst = f"{dst_root}/out.bin"
                with contextlib.suppress(FileNotFoundError):
                    os.remove(dst)
                t0 = time.monotonic()
                p = subprocess.run(cmd, capture_output=True, timeout=600)
                wall = time.monotonic() - t0
                if p.returncode != 0 or not _same(src, dst):
                    ctx.failures += 1
                    result.notes.append(f"loopback {subject} run {r + 1} failed: {p.stderr.decode()[-300:]}")
                    continue
                rates[subject].append(size / wall / 1e6)
                result.raw.append({"part": "loopback", "subject": subject, "bytes": size, "seconds": wall})
    finally:
        for p in procs:
            processes.kill_tree(p)
        shutil.rmtree("/dev/shm/ferry-bench-stripe-lo", ignore_errors=True)
    summ = {s: summarize(v) for s, v in rates.items()}
    result.tables.append(Table(f"Loopback, {format_size(size)} third party, -p {STREAMS}: MB/s median (min–max)",
                               ["subject", "MB/s"], [[s, summ[s].cell(0)] for s in rates]))
    return summ, [["loopback: striped with 1 node per side / unstriped (bar ≥ 0.9)",
                   fmt(ratio(summ["striped, 1 node each"], summ["unstriped"]))]]


@scenario("striping", "Striping: 4 + 4 data nodes on netlab, node loss, 1-node overhead")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    quick = o.size < (1 << 30)
    size = 256 * MIB if quick else 2048 * MIB
    loop = 256 * MIB if quick else 1024 * MIB
    tries = 2 if quick else 10
    method = (METHOD.replace("SIZE", format_size(size)).replace("TRIES", str(tries))
              .replace("LOOP", format_size(loop)).replace("RUNS", str(o.runs)))
    result = ScenarioResult("striping", "Striping: clusters of data nodes, node loss, overhead", method)
    bars = []
    _, loop_bars = _loopback_part(ctx, result, loop, o.runs)
    bars += loop_bars
    if os.geteuid() != 0 or not os.path.exists(NETLAB):
        result.notes.append("Netlab part not measured: needs root and target/release/ferry-netlab.")
    else:
        try:
            net_summ, net_bars = _netlab_part(ctx, result, size, o.runs, tries)
            bars = net_bars + bars
            result.summaries.update({("cluster pair", s): v for s, v in net_summ.items()})
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            ctx.failures += 1
            result.notes.append(f"netlab part failed: {str(e).splitlines()[0]}")
    result.tables.insert(0, Table("Bars", ["measure", "value"], bars))
    return result
