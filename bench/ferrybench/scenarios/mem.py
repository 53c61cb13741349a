"""Memory to memory: /dev/zero on the server to /dev/null at the client, for a fixed length."""

import contextlib

from ..alternation import Config, alternate
from ..comparison import cpu_table, summaries, throughput_panel, throughput_table
from ..results import ScenarioResult
from ..servers import BenchError, start_each
from ..transfer import guc_command, measure_get
from ..units import format_size
from . import iperf
from .registry import scenario

WARMUP_BYTES = 64 << 20

METHOD = (
    "`globus-url-copy [-p N] -len SIZE ftp://127.0.0.1:PORT/dev/zero file:///dev/null` against each "
    "server in turn (same client, same flags). The `stream` row has no `-p` (stream mode, PASV); "
    "the MODE E rows pass `-p N`, `-p 1` included. Throughput is SIZE over the client's wall time, "
    "connection and login included. Server CPU is utime+stime of the server's whole process tree "
    "(Globus: the daemon plus its per-session child, counted through the daemon's cutime/cstime "
    "once reaped) from /proc/PID/stat before and after; client CPU is the client's own rusage "
    "(wait4). One untimed 64 MiB warm-up transfer per server first."
)


def configs(streams: list[int]) -> list[Config]:
    """Stream mode, then MODE E at each stream count."""
    return [Config("stream", 0)] + [Config(f"E{n}", n) for n in streams]


@scenario("mem", "Memory to memory (/dev/zero → /dev/null)")
def run(ctx) -> ScenarioResult:
    return _measure(ctx, "mem", "Memory to memory", METHOD, upload=False, cfgs=configs(ctx.options.streams))


PUT_METHOD = (
    "`globus-url-copy -p N -len SIZE file:///dev/zero ftp://127.0.0.1:PORT/dev/null` against each "
    "server in turn: the server receives (STOR, MODE E, the client connects to the server's PASV "
    "listener) and writes to /dev/null. Otherwise as `mem`: same alternation, wall time and CPU "
    "accounting, one untimed 64 MiB warm-up upload per server."
)


@scenario("mem-put", "Uploads memory to memory (/dev/zero → server /dev/null)")
def run_put(ctx) -> ScenarioResult:
    cfgs = [Config(f"E{n}", n) for n in ctx.options.streams]
    return _measure(ctx, "mem-put", "Uploads, memory to memory", PUT_METHOD, upload=True, cfgs=cfgs)


def _command(server, streams: int, size: int, upload: bool) -> list[str]:
    if upload:
        return guc_command("file:///dev/zero", server.url("/dev/null"), streams, size)
    return guc_command(server.url("/dev/zero"), "file:///dev/null", streams, size)


def _measure(ctx, name: str, title: str, method: str, upload: bool, cfgs: list[Config]) -> ScenarioResult:
    o = ctx.options
    result = ScenarioResult(name, f"{title}, {format_size(o.size)} per transfer", method)
    with contextlib.ExitStack() as stack:
        servers = start_each(stack, ctx, result)
        live = []
        for server in servers:
            try:
                measure_get(ctx, result, server, _command(server, 1, WARMUP_BYTES, upload),
                            WARMUP_BYTES, "warm-up", 1)
                live.append(server)
            except BenchError as e:
                ctx.log(f"{name}: {server.kind} warm-up FAILED: {e}")
                result.notes.append(f"{server.kind}: warm-up transfer failed, not measured: {str(e).splitlines()[0]}")
        result.commands.clear()

        def measure_one(server, config, _run):
            cmd = _command(server, config.streams, o.size, upload)
            return measure_get(ctx, result, server, cmd, o.size, config.label, config.streams)

        samples = alternate(ctx, result, live, cfgs, o.runs, measure_one)

    kinds = o.servers
    for (label, kind), group in samples.items():
        result.raw += [s.as_dict() for s in group]
    full = {(c.label, k): samples.get((c.label, k), []) for c in cfgs for k in kinds}
    rate = summaries(full, lambda s: s.gb_s)
    result.summaries.update(rate)
    lim = iperf.limit(ctx)
    result.tables.append(throughput_table("Throughput, GB/s: median (min–max)", cfgs, kinds, rate, "GB/s", lim))
    result.tables.append(cpu_table("CPU seconds per GB (medians, min–max)", cfgs, kinds,
                                   summaries(full, lambda s: s.server_cpu_per_gb),
                                   summaries(full, lambda s: s.client_cpu_per_gb)))
    result.panel = throughput_panel(title, "GB/s", cfgs, kinds, rate, lim)
    if any(not s.sessions_reaped for g in full.values() for s in g):
        result.notes.append("Some server session processes had not exited 10 s after the client; their CPU may be undercounted.")
    return result
