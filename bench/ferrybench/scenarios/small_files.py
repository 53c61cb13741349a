"""Many small files, recursively: ferry copy with its defaults against globus-url-copy's best flags."""

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from .. import disk_files
from ..alternation import Config, alternate
from ..results import Panel, ScenarioResult, Table
from ..servers import BenchError, Server, running
from ..stats import ratio, summarize
from ..transfer import measure_command
from ..units import fmt
from .registry import scenario

FILE_SIZE = 4096

METHOD = (
    "N files of 4 KiB of random data (`--small-files`, made once under `--small-dir` and reused), in one "
    "flat directory and, separately, spread over `--small-dirs` directories; each tree copied "
    "recursively into a new empty directory. **ferry pair**: `ferry copy -r SRC/ DST/` with its "
    "default flags (no `-p`, `--concurrency`: 4 files in flight) against `ferry serve`. **globus "
    "pair**: `globus-url-copy` against `globus-gridftp-server` with its best flags for many files, "
    "`-r -pp -cc 4` and, as a separate subject, `-r -fast -cc 4`. Two transfers: a get (server → "
    "local directory) and a third-party copy (server → a second server of the same kind, the client "
    "only steering). Files per second is N over the client's wall time (connection and login "
    "included). Subjects alternate run by run. Sources and copies live under `--small-dir`, by "
    "default a tmpfs (/dev/shm): this measures per-file protocol cost, not the file system (on this "
    "machine's ext4 every pair fell to 1,300-2,000 files/s after a few create-and-delete rounds, "
    "whatever the protocol); dirty pages of the previous run are synced before each run, untimed. Every run's destination is checked for N files and N × 4096 bytes, "
    "and the first run of each configuration and subject is compared with the source by `diff -r`. "
    "CPU is per file: the client's rusage and the server trees (both servers for third party)."
)

GLOBUS_VARIANTS = (("globus-pp", ["-r", "-pp", "-cc", "4"]), ("globus-fast", ["-r", "-fast", "-cc", "4"]))
NAMES = {"ferry": "ferry pair", "gcp": "gcp -r", "globus-pp": "globus pair -pp -cc 4", "globus-fast": "globus pair -fast -cc 4"}
LONG_NAMES = {"ferry": "ferry pair (ferry copy -r, defaults)",
              "gcp": "gcp -r (`ferry cp -r` with no flags against ferry serve, an empty cache each run: it probes)",
              "globus-pp": "globus pair (-r -pp -cc 4)",
              "globus-fast": "globus pair (-r -fast -cc 4)"}


@dataclass
class Variant:
    """A client with its flags and its two servers (source; destination for third party)."""

    kind: str
    flags: list[str]
    src: Server
    dst: Server

    @property
    def proc(self):
        """The source server's process, for the alternation's failure notes."""
        return self.src.proc


@dataclass
class Layout:
    """One source tree: its label and where it is."""

    label: str
    path: str
    rows: list[Config] = field(default_factory=list)


def _command(ctx, variant: Variant, src_dir: str, out_dir: str, third_party: bool) -> list[str]:
    src = variant.src.url(src_dir.rstrip("/") + "/")
    if variant.kind in ("ferry", "gcp"):
        dst = variant.dst.url(out_dir + "/") if third_party else out_dir + "/"
        if variant.kind == "gcp":
            cache = tempfile.mkdtemp(prefix="gcp-cache-", dir=ctx.options.small_dir)
            return ["env", f"XDG_CACHE_HOME={cache}", ctx.options.ferry, "cp", "-r", "-q", src, dst]
        return [ctx.options.ferry, "copy", "-r", src, dst]
    dst = variant.dst.url(out_dir + "/") if third_party else f"file://{out_dir}/"
    return ["globus-url-copy", *variant.flags, src, dst]


def _start_servers(stack, ctx, result, kind: str) -> tuple[Server, Server] | None:
    try:
        return stack.enter_context(running(kind, ctx)), stack.enter_context(running(kind, ctx))
    except BenchError as e:
        ctx.failures += 1
        ctx.log(f"small-files: {kind} did not start: {e}")
        result.notes.append(f"{kind} did not start, not measured: {str(e).splitlines()[0]}")
        return None


def _fs_type(path: str) -> str:
    """The file system type holding path (`df --output=fstype`), or "unknown"."""
    try:
        out = subprocess.run(["df", "--output=fstype", path], capture_output=True, text=True, check=True).stdout
        return out.split()[-1]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


@scenario("small-files", "Many small files")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    n = o.small_files
    per_dir = f"{n // o.small_dirs}" if n % o.small_dirs == 0 else f"~{n / o.small_dirs:.0f}"
    result = ScenarioResult("small-files", f"Many small files: {n} × 4 KiB, recursive", METHOD)
    os.makedirs(o.small_dir, mode=0o755, exist_ok=True)
    os.chmod(o.small_dir, 0o755)  # Globus serves anonymous sessions as `nobody`
    flat = disk_files.ensure_small_files(o.small_dir, n, 0, FILE_SIZE, ctx.log)
    tree = disk_files.ensure_small_files(o.small_dir, n, o.small_dirs, FILE_SIZE, ctx.log)
    result.notes.append(f"Sources and copies under {o.small_dir} ({_fs_type(o.small_dir)}).")
    sources = {"flat": flat, "tree": tree}
    shapes = {"flat": f"flat, {n} files", "tree": f"{o.small_dirs} dirs × {per_dir} files"}
    cfgs = [Config(f"{shape} {xfer}", 0) for xfer in ("get", "third-party") for shape in ("flat", "tree")]
    verified: set[tuple[str, str]] = set()

    def measure_one(variant: Variant, config: Config, _run):
        shape, xfer = config.label.split()
        third_party = xfer == "third-party"
        out_dir = tempfile.mkdtemp(prefix="small-out-", dir=o.small_dir)
        os.chmod(out_dir, 0o777)  # Globus writes as `nobody` when it runs as root
        os.sync()
        cmd = _command(ctx, variant, sources[shape], out_dir, third_party)
        servers = [variant.src, variant.dst] if third_party else [variant.src]
        try:
            sample = measure_command(ctx, result, servers, cmd, n * FILE_SIZE, config.label, 0,
                                     subject=variant.kind, timeout=max(120.0, n / 5))
            count, total = disk_files.count_files(out_dir)
            if (count, total) != (n, n * FILE_SIZE):
                raise BenchError(f"{NAMES[variant.kind]} {config.label}: destination has {count} files, {total} bytes; "
                                 f"expected {n}, {n * FILE_SIZE}")
            if (config.label, variant.kind) not in verified:
                same, diff = disk_files.same_tree(sources[shape], out_dir)
                if not same:
                    raise BenchError(f"{NAMES[variant.kind]} {config.label}: destination differs (diff -r): {diff}")
                verified.add((config.label, variant.kind))
            return sample
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)

    with contextlib.ExitStack() as stack:
        variants = []
        for kind in o.servers:
            pair = _start_servers(stack, ctx, result, kind)
            if pair is None:
                continue
            if kind == "ferry":
                variants.append(Variant("ferry", [], *pair))
                variants.append(Variant("gcp", [], *pair))
            else:
                variants += [Variant(name, flags, *pair) for name, flags in GLOBUS_VARIANTS]
        samples = alternate(ctx, result, variants, cfgs, o.runs, measure_one)
    for cache in glob.glob(os.path.join(o.small_dir, "gcp-cache-*")):
        shutil.rmtree(cache, ignore_errors=True)

    kinds = [v.kind for v in variants]
    for group in samples.values():
        result.raw += [{**s.as_dict(), "files": n, "files_per_s": n / s.wall_s} for s in group]
    checked = sorted({k for _, k in verified})
    if verified:
        result.notes.append("Verified: every run had N files of the right total size; the first run of each "
                            "configuration was identical to the source (diff -r) for " + ", ".join(NAMES[k] for k in checked) + ".")
    rate = {(c.label, k): summarize([n / s.wall_s for s in samples.get((c.label, k), [])]) for c in cfgs for k in kinds}
    result.summaries.update(rate)

    header = ["source tree", "transfer"] + [f"{NAMES[k]} files/s" for k in kinds]
    ratios = [(a, k) for a in ("ferry", "gcp") if a in kinds for k in kinds if k not in ("ferry", "gcp")]
    header += [f"{NAMES[a].split()[0]} / {NAMES[k].replace('globus pair ', 'globus ')}" for a, k in ratios]
    rows = []
    for c in cfgs:
        shape, xfer = c.label.split()
        row = [shapes[shape], "get (server → local)" if xfer == "get" else "third party (server → server)"]
        row += [rate[(c.label, k)].cell(0) for k in kinds]
        row += [fmt(ratio(rate[(c.label, a)], rate[(c.label, k)])) for a, k in ratios]
        rows.append(row)
    result.tables.append(Table("Files per second: median (min–max)", header, rows))

    header = ["source tree", "transfer"]
    for k in kinds:
        header += [f"{NAMES[k]}: client CPU-ms/file", "server(s)"]
    rows = []
    for c in cfgs:
        shape, xfer = c.label.split()
        row = [shapes[shape], xfer]
        for k in kinds:
            group = samples.get((c.label, k), [])
            row += [summarize([1000 * s.client_cpu_s / n for s in group]).cell(2),
                    summarize([1000 * s.server_cpu_s / n for s in group]).cell(2)]
        rows.append(row)
    result.tables.append(Table("CPU milliseconds per file (medians, min–max)", header, rows))
    result.notes.insert(0, "Subjects: " + "; ".join(LONG_NAMES[k] for k in kinds) + ".")
    groups = [f"{c.label.split()[0]}\n{c.label.split()[1]}" for c in cfgs]
    result.panel = Panel(f"Small files ({n} × 4 KiB)", "files/s", groups,
                         {NAMES[k]: [rate[(c.label, k)] for c in cfgs] for k in kinds}, xlabel="source tree, transfer")
    if any(not s.sessions_reaped for g in samples.values() for s in g):
        result.notes.append("Some server session processes had not exited 10 s after the client; their CPU may be undercounted.")
    return result
