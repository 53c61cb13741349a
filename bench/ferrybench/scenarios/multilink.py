"""Multilink: one file to 1, 2, 4 and 8 destinations on netlab, serial and parallel unicast
against forwarding trees (ferry's at fan-out 1, 2, 4 and its own choice; Globus' -MC)."""

import json
import os
import re
import shutil
import subprocess
import threading
import time

from .. import processes
from ..results import ScenarioResult, Table
from ..stats import ratio, summarize
from ..units import fmt, format_size
from .netlab import NETLAB, TOPOLOGIES, _exec, _lab, _netlab
from .registry import scenario
from .striping import _same
from .wan import _spawn_in, _wait_port

MIB = 1 << 20
TOPO = "multilink"
DATA = "/dev/shm/ferry-bench-multilink"
FERRY_PORT, GLOBUS_PORT = 2811, 2812
LINK_RATE = "100M"  # the topology's links, told to ferry's fan-out rule
COUNTS = (1, 2, 4, 8)
SUBJECTS = ("ferry serial", "ferry parallel", "ferry tree 1", "ferry tree 2", "ferry tree 4",
            "ferry tree auto", "Globus -MC")

METHOD = (
    "**Topology** (netlab, `bench/topologies/multilink.toml`): a source host and eight destination "
    "hosts d1–d8, each on its own 100 Mbit/s link to one router, 5 ms each way, MTU 9000 (100 Mbit/s "
    "so the userspace emulator carries a whole tree on two cores; the topology file says why). "
    "Hosts' TCP congestion control: CC. Every destination runs `ferry serve --fs-whitelist "
    "file,gridftp_multicast --multicast-allow-to NETS` (the lab's networks) and `globus-gridftp-server -fs-whitelist file,gridftp_multicast` "
    "(anonymous), each writing to its own tmpfs directory. The client runs on the source host and "
    "sends one file of SIZE random bytes from tmpfs (file to file) to the first N destinations: "
    "**ferry serial** one `ferry copy` after another; **ferry parallel** N `ferry copy` at once; "
    "**ferry tree K** `ferry copy --to-many --fan-out K` (the first destination forwards, "
    "gridftp_multicast); **ferry tree auto** `ferry copy --to-many --link-rate 100M` with the fan-out it chooses from what it measures (the link rate is told); "
    "**Globus -MC** `globus-url-copy -MC FILE` (Globus' default fan-out, cc=2, one stream, as "
    "more corrupt its files). Time = the client's wall time until every copy is written (ferry "
    "runs with --no-verify, as Globus verifies nothing; its trees still compare every copy's size); every destination is compared with the "
    "source after each run. Subjects alternate run by run; RUNS runs."
)


def _source(path, size, ctx):
    if not os.path.exists(path) or os.path.getsize(path) != size:
        ctx.log(f"multilink: writing {format_size(size)} of random data to {path}")
        with open(path + ".part", "wb") as f:
            for _ in range(size // MIB):
                f.write(os.urandom(MIB))
        os.rename(path + ".part", path)
    os.chmod(path, 0o644)


def _topology(tmp, cc, queue):
    text = open(os.path.join(TOPOLOGIES, f"{TOPO}.toml")).read()
    text = re.sub(r'^name = ".*"$', f'name = "{TOPO}"\ncongestion = "{cc}"', text, count=1, flags=re.M)
    if queue == "sparse-first":
        text = re.sub(r'^\[\[link\]\]$', '[[link]]\nsparse_first = true', text, flags=re.M)
    path = os.path.join(tmp, f"{TOPO}-{cc}-{queue}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def _commands(ctx, subject, addr, n, src, work):
    """The command lines (run one after another, or all at once for parallel) for one run."""
    f = ctx.options.ferry
    hosts = [f"d{i}" for i in range(1, n + 1)]
    ferry_urls = [f"ftp://{addr[h]}:{FERRY_PORT}/out.bin" for h in hosts]
    if subject in ("ferry serial", "ferry parallel"):
        return [[f, "copy", "-q", "--no-verify", src, u] for u in ferry_urls]
    if subject.startswith("ferry tree"):
        k = subject.rsplit(" ", 1)[1]
        fan = ["--link-rate", LINK_RATE] if k == "auto" else ["--fan-out", k]
        return [[f, "copy", "-q", "--no-verify", *fan, "--to-many", src, *ferry_urls]]
    mc = os.path.join(work, f"mc-{n}.txt")
    with open(mc, "w") as fh:
        fh.write("".join(f"ftp://{addr[h]}:{GLOBUS_PORT}{DATA}/globus-{h}/out.bin\n" for h in hosts))
    return [["globus-url-copy", "-MC", mc, f"file://{src}"]]


def _outputs(subject, n):
    hosts = [f"d{i}" for i in range(1, n + 1)]
    kind = "globus" if subject.startswith("Globus") else "ferry"
    return [f"{DATA}/{kind}-{h}/out.bin" for h in hosts]


def _run(ctx, result, lab, subject, addr, n, src, work):
    outs = _outputs(subject, n)
    for o in outs:
        if os.path.exists(o):
            os.remove(o)
    cmds = _commands(ctx, subject, addr, n, src, work)
    for c in cmds:
        ctx.record_command(result, c)
    t0 = time.monotonic()
    if subject == "ferry parallel":
        procs = [processes.spawn([NETLAB, "exec", "--lab", lab, "src", "--", *c], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT) for c in cmds]
        texts = [p.communicate(timeout=900)[0].decode(errors="replace") for p in procs]
        codes = [p.returncode for p in procs]
    else:
        codes, texts = [], []
        for c in cmds:
            p = _exec(lab, "src", c, timeout=900, check=False)
            codes.append(p.returncode)
            texts.append((p.stderr or "") + (p.stdout or ""))
    wall = time.monotonic() - t0
    bad = [o for o in outs if not os.path.exists(o) or not _same(src, o)]
    if any(codes) or bad:
        ctx.failures += 1
        result.notes.append(f"{subject} to {n} failed: exits {codes}, differing {bad}: "
                            f"{' '.join(texts).strip()[-300:]}")
        return None
    return wall


KILL_METHOD = (
    "**A hop killed mid-transfer** (`--multilink-parts kill`): `ferry copy --json --no-verify "
    "--fan-out 2 --keep-order --to-many` of the same file to d1–d8, so d1 forwards to d2 and d3 and "
    "d2's subtree is d2, d4, d5, d6. Once d2's copy holds 40 % of the file its ferry server is killed "
    "(SIGKILL, the process tree) and started again at once. Named = seconds from the kill to the "
    "client's `forward_failed` event naming d2 (its parent's perf marker); held = what d2's subtree "
    "held then, by the restart markers; moved = what the retry round sent (its `done` event), "
    "against what the subtree lacked (file − held). Every destination is compared with the source "
    "after each run."
)


def _kill_run(ctx, lab, addr, servers, size, src):
    """One copy with d2 killed mid-transfer: (named seconds, held bytes, moved bytes, identical)."""
    hosts = [f"d{i}" for i in range(1, 9)]
    for h in hosts:
        o = f"{DATA}/ferry-{h}/out.bin"
        if os.path.exists(o):
            os.remove(o)
    urls = [f"ftp://{addr[h]}:{FERRY_PORT}/out.bin" for h in hosts]
    victim = urls[1]
    cmd = [NETLAB, "exec", "--lab", lab, "src", "--", ctx.options.ferry, "copy", "--json", "--no-verify",
           "--fan-out", "2", "--keep-order", "--to-many", src, *urls]
    p = processes.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events, errs = [], []

    def read(stream, into):
        for line in stream:
            into.append((time.monotonic(), line.rstrip("\n")))

    readers = [threading.Thread(target=read, args=(p.stdout, events)),
               threading.Thread(target=read, args=(p.stderr, errs))]
    for t in readers:
        t.start()
    partial = f"{DATA}/ferry-d2/out.bin"
    deadline = time.monotonic() + 120
    while (not os.path.exists(partial) or os.path.getsize(partial) < size * 2 // 5) and p.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    killed = time.monotonic()
    processes.kill_tree(servers["d2"], grace=0)
    log = open(os.path.join(os.path.dirname(src), "d2-restarted.log"), "ab")
    servers["d2"] = _spawn_in(lab, "d2", [ctx.options.ferry, "serve", "--listen", f"{addr['d2']}:{FERRY_PORT}",
                                          "--root", f"{DATA}/ferry-d2", "--anonymous", "--anonymous-write",
                                          "--fs-whitelist", "file,gridftp_multicast",
                                          "--multicast-allow-to", "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"], log)
    _wait_port(lab, "d2", FERRY_PORT, servers["d2"], "ferry serve in d2 (again)")
    p.wait(timeout=900)
    for t in readers:
        t.join()
    parsed = []
    for t, line in events:
        try:
            parsed.append((t, json.loads(line)))
        except ValueError:
            pass
    named = [(t, e) for t, e in parsed if e.get("event") == "forward_failed" and e.get("url") == victim]
    done = [e for _, e in parsed if e.get("event") == "done"]
    same = all(os.path.exists(f"{DATA}/ferry-{h}/out.bin") and _same(src, f"{DATA}/ferry-{h}/out.bin")
               for h in hosts)
    if p.returncode != 0 or not named or not done:
        tail = " ".join(l for _, l in errs)[-300:]
        raise RuntimeError(f"killed hop: exit {p.returncode}, named {len(named)}, done {len(done)}: {tail}")
    held = sum(int(b) - int(a) for a, b in (r.split("-") for r in named[-1][1]["held"].split(",") if r))
    return named[0][0] - killed, held, done[-1].get("moved", 0), same


def _kill_part(ctx, result, lab, addr, servers, size, src, runs, cc):
    rows, raw_named, worst = [], [], 0.0
    for r in range(runs):
        ctx.log(f"multilink ({cc}): killed hop, run {r + 1}/{runs}")
        named, held, moved, same = _kill_run(ctx, lab, addr, servers, size, src)
        if not same:
            ctx.failures += 1
        lacked = size - held
        raw_named.append(named)
        worst = max(worst, moved / lacked if lacked else 0.0)
        result.raw.append({"congestion": cc, "part": "kill", "named_s": named, "held": held,
                           "moved": moved, "lacked": lacked, "identical": same})
        rows.append([str(r + 1), f"{named:.2f}", format_size(held), format_size(lacked), format_size(moved),
                     f"{moved / lacked:.3f}" if lacked else "–", "yes" if same else "NO"])
    result.tables.append(Table(f"d2 killed at 40 %, hosts {cc}", ["run", "named after (s)", "held",
                                                                  "lacked", "retry moved", "moved / lacked",
                                                                  "all identical"], rows))
    return [[f"{cc}: killed hop named after, worst of {runs} (bar ≤ 10 s)", f"{max(raw_named):.2f} s"],
            [f"{cc}: retry moved / what the subtree lacked, worst (bar ≤ 1.0)", f"{worst:.3f}"]]


def _part(ctx, result, size, runs, cc, queue):
    work = ctx.scratch(f"multilink-{cc}-{queue}")
    label = cc if queue == "fifo" else f"{cc}, links serving small packets first"
    src = f"{DATA}/src.bin"
    _source(src, size, ctx)
    _netlab("down", "--all", check=False)
    times = {(s, n): [] for s in SUBJECTS for n in COUNTS}
    with _lab(_topology(work, cc, queue), TOPO) as lab:
        addr = {h: _netlab("addr", "--lab", lab, h).stdout.strip() for h in [f"d{i}" for i in range(1, 9)]}
        procs, servers = [], {}
        try:
            empty = os.path.join(work, "empty.conf")
            open(empty, "w").close()
            for h, a in addr.items():
                for kind in ("ferry", "globus"):
                    root = f"{DATA}/{kind}-{h}"
                    os.makedirs(root, exist_ok=True)
                    os.chmod(root, 0o777)
                log = open(os.path.join(work, f"{h}.log"), "ab")
                procs.append(_spawn_in(lab, h, [ctx.options.ferry, "serve", "--listen", f"{a}:{FERRY_PORT}",
                                                "--root", f"{DATA}/ferry-{h}", "--anonymous", "--anonymous-write",
                                                "--fs-whitelist", "file,gridftp_multicast",
                                          "--multicast-allow-to", "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"], log))
                _wait_port(lab, h, FERRY_PORT, procs[-1], f"ferry serve in {h}")
                procs.append(_spawn_in(lab, h, ["globus-gridftp-server", "-c", empty, "-aa", "-anonymous-user",
                                                "nobody", "-p", str(GLOBUS_PORT), "-fs-whitelist",
                                                "file,gridftp_multicast"], log))
                _wait_port(lab, h, GLOBUS_PORT, procs[-1], f"globus-gridftp-server in {h}")
            servers = {h: procs[2 * i] for i, h in enumerate(addr)}
            for r in range(runs if "times" in ctx.options.multilink_parts else 0):
                for n in COUNTS:
                    subjects = [s for s in SUBJECTS if n > 1 or s in ("ferry serial", "ferry tree auto",
                                                                      "Globus -MC")]
                    if r % 2:
                        subjects.reverse()
                    for s in subjects:
                        ctx.log(f"multilink ({label}): run {r + 1}/{runs}, {s} to {n}")
                        wall = _run(ctx, result, lab, s, addr, n, src, work)
                        if wall is not None:
                            times[(s, n)].append(wall)
                            result.raw.append({"congestion": cc, "queue": queue, "subject": s, "destinations": n,
                                               "bytes": size, "seconds": wall})
            kill_bars = (_kill_part(ctx, result, lab, addr, servers, size, src, runs, label)
                         if "kill" in ctx.options.multilink_parts else [])
        finally:
            for p in procs + list(servers.values()):
                processes.kill_tree(p)
    summ = {k: summarize(v) for k, v in times.items()}
    if "times" not in ctx.options.multilink_parts:
        return summ, kill_bars
    rows = [[s] + [summ[(s, n)].cell(2) for n in COUNTS] for s in SUBJECTS]
    result.tables.append(Table(f"{format_size(size)} to N destinations, hosts {label}: seconds, median (min–max)",
                               ["subject"] + [f"N = {n}" for n in COUNTS], rows))
    best = min((summ[(s, 8)] for s in SUBJECTS if s.startswith("ferry tree") and summ[(s, 8)].n),
               key=lambda x: x.median, default=summarize([]))
    one = summ[("ferry tree auto", 1)]
    bars = [
        [f"{label}: ferry tree auto, 8 destinations / 1 destination (bar ≤ 1.5)",
         fmt(ratio(summ[("ferry tree auto", 8)], one))],
        [f"{label}: Globus -MC / ferry tree auto, 8 destinations, time (bar ≥ 1.0)",
         fmt(ratio(summ[("Globus -MC", 8)], summ[("ferry tree auto", 8)]))],
        [f"{label}: ferry serial / best ferry tree, 8 destinations, time",
         fmt(ratio(summ[("ferry serial", 8)], best))],
    ] + kill_bars
    return summ, bars


@scenario("multilink", "Multilink: one file to 1-8 destinations, unicast against forwarding trees")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    size = o.multilink_size
    method = (METHOD.replace("SIZE", format_size(size)).replace("RUNS", str(o.runs))
              .replace("CC", ", ".join(o.multilink_congestion)))
    if "sparse-first" in o.multilink_queues:
        method += ("\n\n**Queues.** fifo: each link direction is one tail-drop FIFO (the emulator's "
                   "default), so a host's ACKs and control replies wait behind its own outgoing bulk "
                   "data (about 21 ms at 100 Mbit/s with the 256 KiB queue). sparse-first "
                   "(`sparse_first = true` on every link): packets of at most 200 bytes go ahead of "
                   "the queue, as Linux's default qdisc, fq_codel, serves sparse flows first on a "
                   "host's own uplink.")
    if "kill" in o.multilink_parts:
        method += "\n\n" + KILL_METHOD
    result = ScenarioResult("multilink", "Multilink: one file to many destinations", method)
    bars = []
    if os.geteuid() != 0 or not os.path.exists(NETLAB) or not shutil.which("globus-url-copy"):
        result.notes.append("Not measured: needs root, target/release/ferry-netlab and globus-url-copy.")
        ctx.failures += 1
        return result
    os.makedirs(DATA, exist_ok=True)
    os.chmod(DATA, 0o755)
    try:
        for cc in o.multilink_congestion:
            for queue in o.multilink_queues:
                summ, b = _part(ctx, result, size, o.runs, cc, queue)
                bars += b
                result.summaries.update({(f"{cc}, {queue}, N = {n}", s): v for (s, n), v in summ.items()})
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        ctx.failures += 1
        result.notes.append(f"multilink failed: {str(e).splitlines()[0]}")
    finally:
        shutil.rmtree(DATA, ignore_errors=True)
    result.tables.insert(0, Table("Bars", ["measure", "value"], bars))
    return result
