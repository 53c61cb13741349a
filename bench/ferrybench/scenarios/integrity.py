"""Integrity: what `ferry copy`'s default verification costs, and how fast CKSM answers on a file
ferry's server received (summed while the bytes moved) against one it must read, and Globus."""

import contextlib
import os
import shutil
import time
from dataclasses import asdict, dataclass

from .. import cksm, disk_files, processes, proctree
from ..alternation import Config, alternate
from ..comparison import summaries, throughput_panel
from ..disk_runs import measure_disk_gets
from ..pairs import ferry_copy, pair_cpu_table
from ..results import ScenarioResult, Table
from ..servers import BenchError, Server, running, start_ferry
from ..stats import ratio, summarize
from ..transfer import measure_command
from ..units import fmt, format_size
from .registry import scenario

VERIFIED, NO_VERIFY = "verified", "--no-verify"
KINDS = [VERIFIED, NO_VERIFY]
PANEL_NAMES = {VERIFIED: "ferry verified", NO_VERIFY: "ferry --no-verify"}
NOT_KEPT, RECEIVED, GLOBUS = "ferry, not kept", "ferry, received", "globus"
DOES = {NOT_KEPT: "reads the file (kept values stale)", RECEIVED: "answers from the kept value (extended attribute)",
        GLOBUS: "reads the file"}
COST_BAR, BAR_STREAMS = 0.95, 4  # verified/--no-verify, mem→mem, at 4 streams
LATENCY_BAR_MS = 50.0
WARMUP_BYTES = 64 << 20
SHM_DIR = "/dev/shm/ferry-bench-integrity"
XATTRS = ("user.ferry.checksums", "user.XrdCks.adler32")

METHOD = (
    "**Cost of verification**, ferry pair only: `target/release/ferry copy` against `ferry serve --root / "
    "--anonymous --anonymous-write` (fresh for this part). Two subjects alternate run by run at each "
    "`--streams` count: **verified**, `ferry copy -p N SRC DST` against that server with its defaults "
    "(the client sums ADLER32 while the bytes arrive and asks the server `CKSM ADLER32 0 -1 PATH`; the "
    "server summed the file while sending it, or skips that when it already keeps the value, and "
    "answers from what it keeps), and **--no-verify**, `ferry copy -p N --no-verify SRC DST` against a "
    "second server started with `--checksum-cache off` as well, which takes no checksums at all. The "
    "difference is everything the defaults cost on both ends. Two media: *mem→mem*, a random `--integrity-size` file made once on tmpfs "
    "(`/dev/shm/ferry-bench-integrity/`, or `--dir`/integrity without /dev/shm; reused) fetched to a "
    "file in the same directory, deleted (untimed) before each run, after one untimed 64 MiB warm-up "
    "per subject (`/dev/zero` to `/dev/null`, as in client-mem); *disk→disk*, the disk scenario's "
    "source file (`--disk-size`) fetched to a file under `--dir` with the disk scenario's page-cache "
    "policy (destination deleted, `sync`, caches dropped as root before every run). Throughput is the "
    "size over the client's wall time, login and verification included; CPU as in client-mem (the "
    "client's rusage, the server's process tree, per decimal GB). Every destination's size is checked "
    "and the first of each subject per medium is compared byte for byte (cmp). The issue's bar: "
    "verification by default costs ≤ 5 % throughput on mem→mem at 4 streams, i.e. the median "
    "verified/--no-verify ratio at 4 streams is ≥ 0.95.\n\n"
    "**CKSM latency** on a `--cksm-size` random file written once under `--dir` (reused while its size "
    "fits), whose ADLER32 the runner computes once itself (zlib, 1 MiB chunks): every answer must equal "
    "it, or the run fails. A small socket client (`bench/ferrybench/cksm.py`) connects to "
    "127.0.0.1:PORT, reads the 220, logs in (`USER anonymous`, `PASS x`, 230) and times from sending "
    "`CKSM ADLER32 0 -1 /PATH` to its final reply (`213 VALUE`; multi-line and 1xx replies are read "
    "through). Three subjects alternate run by run: **ferry, not kept**, the runner's file on a ferry "
    "server, its mtime set to now before each run (`os.utime`, in a later whole second than before), so "
    "no kept value matches (ferry's exact-version record, XRootD's whole-second record, memory) and "
    "the server must read the file; **ferry, received**, a copy uploaded once, untimed, with "
    "`ferry copy LOCAL ftp://127.0.0.1:PORT/DIR/…/received-SIZE.bin` (the server summed it on "
    "arrival), asked of a `ferry serve` started afresh before each run (same command, new port), so "
    "the answer comes from the file's extended attribute, not the server's memory; **globus**, "
    "`globus-gridftp-server -aa` on the runner's file (it reads the whole file for every CKSM). Before "
    "every run the page cache is dropped as root (`sync; echo 3 > /proc/sys/vm/drop_caches`), after "
    "the restart and before the login. Server CPU is its process tree over the CKSM. The issue's bar: "
    "CKSM ADLER32 on a file ferry received answers in under 50 ms (median)."
)


@dataclass
class Flavour:
    """`ferry copy` with or without --no-verify against the one ferry server; it stands in for a
    Server in the alternation and in measure_command."""

    kind: str
    flags: tuple[str, ...]
    server: Server

    @property
    def proc(self):
        """The ferry server's process, for the alternation's failure notes."""
        return self.server.proc

    @property
    def pid(self) -> int:
        """The ferry server's PID, whose CPU is counted."""
        return self.server.pid

    @property
    def port(self) -> int:
        """The ferry server's control port."""
        return self.server.port

    def url(self, path: str) -> str:
        """The ferry server's URL for path."""
        return self.server.url(path)


@dataclass
class CksmSample:
    """One timed CKSM: from sending the command to its final reply."""

    server: str
    label: str
    n_bytes: int
    latency_s: float
    server_cpu_s: float
    value: str

    def as_dict(self) -> dict:
        """For the JSON file beside the report."""
        return {**asdict(self), "latency_ms": 1000 * self.latency_s}


@dataclass
class CksmSubject:
    """A file on a server and how each run prepares it (a new mtime, or a fresh ferry server)."""

    kind: str
    path: str
    server: Server | None = None
    restart_dir: str | None = None
    stale: bool = False
    starts: int = 0

    @property
    def proc(self):
        """The server's process while one runs, for the alternation's failure notes."""
        return self.server.proc if self.server is not None else None


def _part(name: str) -> ScenarioResult:
    """A part's own commands and notes, merged into the scenario's at the end."""
    return ScenarioResult("integrity", name, "")


def _merge(result: ScenarioResult, part: ScenarioResult, prefix: str) -> None:
    """A part's commands and notes into the scenario's, the notes prefixed with the part."""
    result.commands += [c for c in part.commands if c not in result.commands]
    result.notes += [f"{prefix}: {n}" for n in part.notes]


def _make_stale(path: str) -> None:
    """Sets mtime (and atime) to now, in a later whole second than the file's mtime."""
    old = os.stat(path).st_mtime_ns
    now = time.time_ns()
    if now // 10**9 <= old // 10**9:
        now = (old // 10**9 + 1) * 10**9 + now % 10**9
    os.utime(path, ns=(now, now))


def _measure_mem(ctx, part, flavours, cfgs, where: str) -> dict:
    """Gets of the tmpfs source into the same tmpfs directory, alternating the flavours."""
    o = ctx.options
    source = disk_files.ensure_random_file(where, "source", o.integrity_size, ctx.log)
    compared: set[str] = set()
    for flavour in flavours:  # untimed, as in client-mem: pages the client in, opens the server's pools
        cmd = ferry_copy(ctx, flavour.url("/dev/zero"), "/dev/null", 1, WARMUP_BYTES, flavour.flags)
        measure_command(ctx, part, [flavour], cmd, WARMUP_BYTES, "warm-up", 1)
    part.commands.clear()

    def measure_one(flavour, config, _run):
        dst = os.path.join(where, f"dst-{flavour.kind.strip('-')}.bin")
        disk_files.remove(dst)
        cmd = ferry_copy(ctx, flavour.url(source), dst, config.streams, extra=flavour.flags)
        try:
            sample = measure_command(ctx, part, [flavour], cmd, o.integrity_size, config.label, config.streams)
            size = os.path.getsize(dst) if os.path.exists(dst) else -1
            if size != o.integrity_size:
                raise BenchError(f"{flavour.kind} {config.label}: destination has {size} bytes, expected {o.integrity_size}")
            if flavour.kind not in compared:
                if not disk_files.same_content(source, dst):
                    raise BenchError(f"{flavour.kind} {config.label}: destination differs from the source (cmp)")
                compared.add(flavour.kind)
                part.notes.append(f"{flavour.kind}: {config.label} destination identical to the source (cmp).")
            return sample
        finally:
            disk_files.remove(dst)

    part.notes.append(f"Source and destinations under {where}.")
    return alternate(ctx, part, flavours, cfgs, o.runs, measure_one)


def _cost_tables(result, medium: str, cfgs, samples: dict, unit: str, scale: float, digits: int) -> dict:
    """Throughput per subject with verified/--no-verify, and CPU per GB; returns the rates."""
    full = {(c.label, k): samples.get((c.label, k), []) for c in cfgs for k in KINDS}
    for group in full.values():
        result.raw += [{**s.as_dict(), "medium": medium} for s in group]
    rate = summaries(full, lambda s: s.gb_s * scale)
    result.summaries.update({(f"{medium} {label}", k): v for (label, k), v in rate.items()})
    header = ["mode", "streams"] + [f"{k} {unit}" for k in KINDS] + ["verified/--no-verify"]
    rows = [["MODE E", str(c.streams)] + [rate[(c.label, k)].cell(digits) for k in KINDS]
            + [fmt(ratio(rate[(c.label, VERIFIED)], rate[(c.label, NO_VERIFY)]), 3)] for c in cfgs]
    result.tables.append(Table(f"{medium}: throughput, {unit}: median (min–max)", header, rows))
    result.tables.append(pair_cpu_table(f"{medium}: CPU seconds per GB (medians, min–max)", cfgs, KINDS,
                                        summaries(full, lambda s: s.client_cpu_per_gb),
                                        summaries(full, lambda s: s.server_cpu_per_gb),
                                        summaries(full, lambda s: s.client_cpu_per_gb + s.server_cpu_per_gb)))
    return rate


def _cksm_subjects(ctx, part, stack, path: str) -> list[CksmSubject]:
    """A ferry server, the received copy uploaded to it, and Globus where selected and installed."""
    o = ctx.options
    ferry = stack.enter_context(running("ferry", ctx))
    received = os.path.join(ctx.scratch("integrity-received"), f"received-{o.cksm_size}.bin")
    ctx.log(f"integrity: uploading {received} (once, untimed)")
    measure_command(ctx, part, [ferry], ferry_copy(ctx, path, ferry.url(received)), o.cksm_size, "upload", 0)
    size = os.path.getsize(received) if os.path.exists(received) else -1
    if size != o.cksm_size:
        raise BenchError(f"upload: the received copy has {size} bytes, expected {o.cksm_size}")
    try:
        present = [name for name in XATTRS if name in os.listxattr(received)]
    except OSError:
        present = []
    part.notes.append(f"After the upload the received copy carries {' and '.join(present)}." if present else
                      f"After the upload the received copy carries neither {' nor '.join(XATTRS)}.")
    subjects = [CksmSubject(NOT_KEPT, path, ferry, stale=True),
                CksmSubject(RECEIVED, received, restart_dir=ctx.scratch("ferry-received"))]
    if "globus" not in o.servers:
        part.notes.append("globus is not in --servers: Globus not measured.")
    elif shutil.which("globus-gridftp-server") is None:
        part.notes.append("globus-gridftp-server is not installed: Globus not measured.")
    else:
        try:
            subjects.append(CksmSubject(GLOBUS, path, stack.enter_context(running("globus", ctx))))
        except BenchError as e:
            ctx.failures += 1
            part.notes.append(f"globus did not start, not measured: {str(e).splitlines()[0]}")
    for s in subjects:
        ctx.record_command(part, ["CKSM", "ADLER32", "0", "-1", s.path])
    return subjects


def _measure_cksm(ctx, part, stack) -> tuple[list[CksmSubject], dict]:
    """The CKSM file and its ADLER32, the subjects, and one timed CKSM per run and subject."""
    o = ctx.options
    path = disk_files.ensure_random_file(o.dir, "cksm", o.cksm_size, ctx.log)
    ctx.log(f"integrity: ADLER32 of {path} (once, zlib)")
    expected = cksm.adler32_of(path)
    part.notes.append(f"ADLER32 of the file, computed by the runner: {expected:08x}.")
    subjects = _cksm_subjects(ctx, part, stack, path)
    timeout = max(60.0, o.cksm_size / 20e6)
    cache = {"dropped": 0, "warm": 0}

    def measure_one(subject: CksmSubject, config, _run):
        if subject.stale:
            _make_stale(subject.path)
        if subject.restart_dir:
            subject.starts += 1
            subject.server = start_ferry(o.ferry, subject.restart_dir, out_name=f"ferry-{subject.starts:03d}.out")
            line = f"{subject.server.command_line()}   # started afresh before each '{RECEIVED}' run"
            if line not in part.commands:
                part.commands.append(line)
        server = subject.server
        try:
            cache["dropped" if disk_files.drop_caches() else "warm"] += 1
            with cksm.ControlSession(server.port, timeout) as session:
                session.login()
                cpu_before = proctree.tree_cpu_seconds(server.pid)
                seconds, code, text = session.timed(f"CKSM ADLER32 0 -1 {subject.path}")
                cpu_after = proctree.tree_cpu_seconds(server.pid)
            value = cksm.checksum_value(code, text)
            if value != expected:
                raise BenchError(f"{subject.kind}: CKSM answered {value:08x}, expected {expected:08x} (wrong answer)")
            if server.proc.poll() is not None:
                raise BenchError(f"{subject.kind}: the server exited ({server.proc.returncode})")
            return CksmSample(subject.kind, config.label, o.cksm_size, seconds, cpu_after - cpu_before, f"{value:08x}")
        except cksm.FtpError as e:
            raise BenchError(f"{subject.kind}: {e}") from e
        finally:
            if subject.restart_dir:
                processes.kill_tree(server.proc)
                subject.server = None

    samples = alternate(ctx, part, subjects, [Config("cksm", 0)], o.runs, measure_one)
    if cache["dropped"] and not cache["warm"]:
        part.notes.insert(0, "Page cache dropped before every CKSM (root): the servers that read the file read it from disk.")
    else:
        part.notes.insert(0, f"Page cache NOT dropped ({cache['warm']} runs; not root?): the file was cached, alike "
                             "for every server, so reading it cost memory speed, not disk.")
    return subjects, samples


def _cksm_tables(result, subjects, samples):
    """Latency per subject and the ratios; returns the received subject's latency for the bar."""
    kinds = [s.kind for s in subjects]
    groups = {k: samples.get(("cksm", k), []) for k in kinds}
    for group in groups.values():
        result.raw += [{**s.as_dict(), "medium": "cksm"} for s in group]
    lat = {k: summarize([1000 * s.latency_s for s in g]) for k, g in groups.items()}
    cpu = {k: summarize([1000 * s.server_cpu_s for s in g]) for k, g in groups.items()}
    rows = [[k, DOES[k], lat[k].cell(2), cpu[k].cell(0)] for k in kinds]
    result.tables.append(Table("CKSM ADLER32 latency: median (min–max)",
                               ["subject", "the server", "latency ms", "server CPU ms"], rows))
    rows = [[f"{k} / {RECEIVED}", fmt(ratio(lat[k], lat[RECEIVED]), 1)] for k in (GLOBUS, NOT_KEPT) if k in lat]
    if rows:
        result.tables.append(Table("CKSM latency ratios (of medians)", ["ratio", "value"], rows))
    return lat.get(RECEIVED, summarize([]))


def _met(ok: bool | None) -> str:
    return "not measured" if ok is None else ("met" if ok else "not met")


@scenario("integrity", "Integrity: verification cost and CKSM latency")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    result = ScenarioResult("integrity", f"Integrity: ferry copy's verification ({format_size(o.integrity_size)} "
                            f"on tmpfs, {format_size(o.disk_size)} on disk) and CKSM latency "
                            f"({format_size(o.cksm_size)} file)", METHOD)
    if "ferry" not in o.servers:
        result.notes.append("ferry is not in --servers: nothing measured (this scenario measures ferry; "
                            "Globus is only CKSM's comparison).")
        return result
    cfgs = [Config(f"E{n}", n) for n in o.streams]
    mem, disk, sums = _part("mem"), _part("disk"), _part("cksm")
    mem_samples, disk_samples, subjects, cksm_samples = {}, {}, [], {}
    where = SHM_DIR if os.path.isdir("/dev/shm") else os.path.join(o.dir, "integrity")
    os.makedirs(where, mode=0o755, exist_ok=True)
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(running("ferry", ctx))
            bare = start_ferry(o.ferry, ctx.scratch("ferry-checksum-cache-off"),
                               logins=("--anonymous", "--anonymous-write", "--checksum-cache", "off"))
            ctx.record_server(bare)
            stack.callback(processes.kill_tree, bare.proc)
            flavours = [Flavour(VERIFIED, (), server), Flavour(NO_VERIFY, ("--no-verify",), bare)]
            mem_samples = _measure_mem(ctx, mem, flavours, cfgs, where)
            disk_samples = measure_disk_gets(
                ctx, disk, cfgs, "integrity-disk-out",
                lambda f, config, source, dst: ferry_copy(ctx, f.url(source), dst, config.streams, extra=f.flags),
                lambda f: f.kind, start=lambda _stack: flavours)
        except BenchError as e:
            ctx.failures += 1
            ctx.log(f"integrity: verification cost FAILED: {e}")
            mem.notes.append(f"not measured: {str(e).splitlines()[0]}")
    if o.clean and where == SHM_DIR:
        shutil.rmtree(where, ignore_errors=True)
    with contextlib.ExitStack() as stack:
        try:
            subjects, cksm_samples = _measure_cksm(ctx, sums, stack)
        except BenchError as e:
            ctx.failures += 1
            ctx.log(f"integrity: CKSM latency FAILED: {e}")
            sums.notes.append(f"not measured: {str(e).splitlines()[0]}")

    mem_rate = _cost_tables(result, "mem→mem (tmpfs)", cfgs, mem_samples, "GB/s", 1.0, 2)
    _cost_tables(result, "disk→disk", cfgs, disk_samples, "MB/s", 1000.0, 0)
    received = _cksm_tables(result, subjects, cksm_samples) if subjects else summarize([])
    bar_label = f"E{BAR_STREAMS}"
    cost = ratio(mem_rate.get((bar_label, VERIFIED), summarize([])), mem_rate.get((bar_label, NO_VERIFY), summarize([])))
    rows = [["verification by default costs ≤ 5 % throughput on mem→mem at 4 streams "
             "(median verified/--no-verify ≥ 0.95)", fmt(cost, 3), _met(None if cost != cost else cost >= COST_BAR)],
            ["CKSM ADLER32 on a file ferry received: under 50 ms (median)",
             f"{received.median:.2f} ms (max {received.high:.2f})" if received.n else "—",
             _met(received.median < LATENCY_BAR_MS if received.n else None)]]
    result.tables.append(Table("The issue's bars", ["bar", "measured", "met"], rows))
    result.notes.append("The cost bar is a ratio of two medians on a 2-core machine where runs vary by about "
                        "±30 %: ratios near 1 (about 0.9–1.1) are within the noise, and CPU-s/GB is the steadier "
                        "measure of what verification costs."
                        + ("" if BAR_STREAMS in o.streams else f" {BAR_STREAMS} streams not in --streams: not measured."))
    _merge(result, mem, "mem→mem")
    _merge(result, disk, "disk→disk")
    _merge(result, sums, "CKSM")
    result.panel = throughput_panel("ferry copy verification, mem→mem", "GB/s", cfgs, KINDS, mem_rate,
                                    names=PANEL_NAMES)
    if any(not s.sessions_reaped for g in list(mem_samples.values()) + list(disk_samples.values()) for s in g):
        result.notes.append("Some server session processes had not exited 10 s after the client; their CPU may be undercounted.")
    return result
