"""Client+server pairs memory to memory: ferry copy + ferry serve against globus-url-copy + Globus."""

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass

from ..alternation import Config, alternate
from ..comparison import summaries, throughput_panel, throughput_table
from ..pairs import PAIR_METHOD, PAIR_NAMES, get_command, pair_cpu_table
from ..results import ScenarioResult, Table
from ..servers import BenchError, start_each
from ..stats import ratio, summarize
from ..transfer import measure_command
from ..units import fmt, format_size
from . import iperf
from .registry import scenario

WARMUP_BYTES = 64 << 20

METHOD = PAIR_METHOD + (
    " Memory to memory, `/dev/zero` on the server to `/dev/null` at the client, SIZE bytes: "
    "`ferry copy -p N --length SIZE ftp://127.0.0.1:PORT/dev/zero /dev/null` and "
    "`globus-url-copy -p N -len SIZE ftp://127.0.0.1:PORT/dev/zero file:///dev/null` (both MODE E, "
    "partial reads, `ERET`). The limit is iperf3 at the same stream count, measured by the iperf "
    "scenario's own function (`iperf3 -c 127.0.0.1 -P N -l 1M -t T`) as a third subject in the "
    "same alternation. Throughput is SIZE over the client's wall time, connection and login "
    "included. CPU: the client's own rusage (wait4, all its threads) and the server's process tree "
    "(/proc/PID/stat, as in mem), per decimal GB. One untimed 64 MiB warm-up per pair first. "
    "At one stream a fourth subject, the **copy ceiling** (`bench/ferrybench/ceiling.py`), is the "
    "simplest pair that reads its source and copies it through the socket: a sender reading "
    "`/dev/zero` into 512 KiB and writing it whole, a receiver polling a non-blocking socket "
    "(it never sleeps, so no wake-up is paid), one process each, SIZE bytes timed from accept to "
    "end of file (no login, no protocol). Any pair that reads its source and copies it pays at "
    "least this, so `ceiling/globus pair` is the most a one-stream pair can reach over Globus here."
)

CEILING = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ceiling.py")


@dataclass
class IperfSample:
    """One iperf3 run at `streams` streams, as a subject of the alternation."""

    server: str
    label: str
    streams: int
    gb_s: float
    sender_cpu_pct: float
    receiver_cpu_pct: float

    def as_dict(self) -> dict:
        """For the JSON file beside the report."""
        return asdict(self)


@dataclass
class IperfAnchor:
    """iperf3, alternating with the pairs; it has no server process."""

    kind: str = "iperf3"


@dataclass
class CeilingSample:
    """One run of the copy ceiling (one stream only)."""

    label: str
    gb_s: float

    def as_dict(self) -> dict:
        """For the JSON file beside the report."""
        return {"server": "ceiling", **asdict(self)}


@dataclass
class CeilingAnchor:
    """The copy ceiling of one loopback stream (see ceiling.py), alternating with the pairs."""

    kind: str = "ceiling"


def measure_ceiling(size: int, label: str) -> CeilingSample:
    """Runs ceiling.py once for `size` bytes."""
    try:
        out = subprocess.run([sys.executable, CEILING, str(size)], capture_output=True, text=True,
                             timeout=300, check=True, stdin=subprocess.DEVNULL)
        return CeilingSample(label, float(json.loads(out.stdout)["gb_s"]))
    except (subprocess.SubprocessError, ValueError, KeyError) as e:
        raise BenchError(f"copy ceiling run failed: {e}") from e


@scenario("client-mem", "Client+server pairs, memory to memory")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    result = ScenarioResult("client-mem", f"Client+server pairs, memory to memory, {format_size(o.size)} per transfer",
                            METHOD)
    cfgs = [Config(f"E{n}", n) for n in o.streams]
    with contextlib.ExitStack() as stack:
        servers = start_each(stack, ctx, result)
        live = []
        for server in servers:
            try:
                measure_command(ctx, result, [server], get_command(ctx, server, "/dev/zero", "/dev/null", 1, WARMUP_BYTES),
                                WARMUP_BYTES, "warm-up", 1)
                live.append(server)
            except BenchError as e:
                ctx.failures += 1
                ctx.log(f"client-mem: {server.kind} pair warm-up FAILED: {e}")
                result.notes.append(f"{server.kind} pair: warm-up transfer failed, not measured: {str(e).splitlines()[0]}")
        result.commands.clear()

        def measure_one(subject, config, _run):
            if subject.kind == "ceiling":
                if config.streams != 1:
                    return None
                return measure_ceiling(o.size, config.label)
            if subject.kind == "iperf3":
                gbps, snd, rcv = iperf.measure(ctx, result, config.streams, o.iperf_seconds)
                return IperfSample("iperf3", config.label, config.streams, gbps, snd, rcv)
            cmd = get_command(ctx, subject, "/dev/zero", "/dev/null", config.streams, o.size)
            return measure_command(ctx, result, [subject], cmd, o.size, config.label, config.streams)

        anchors = [IperfAnchor()] + ([CeilingAnchor()] if 1 in o.streams else [])
        samples = alternate(ctx, result, live + anchors, cfgs, o.runs, measure_one)
        samples = {key: [s for s in group if s is not None] for key, group in samples.items()}

    kinds = o.servers
    for group in samples.values():
        result.raw += [s.as_dict() for s in group]
    full = {(c.label, k): samples.get((c.label, k), []) for c in cfgs for k in kinds}
    rate = summaries(full, lambda s: s.gb_s)
    result.summaries.update(rate)
    limit = {c.streams: summarize([s.gb_s for s in samples.get((c.label, "iperf3"), [])]) for c in cfgs}
    result.tables.append(throughput_table("Throughput, GB/s: median (min–max)", cfgs, kinds, rate, "GB/s", limit,
                                          names=PAIR_NAMES))
    result.tables.append(pair_cpu_table("CPU seconds per GB (medians, min–max)", cfgs, kinds,
                                        summaries(full, lambda s: s.client_cpu_per_gb),
                                        summaries(full, lambda s: s.server_cpu_per_gb),
                                        summaries(full, lambda s: s.client_cpu_per_gb + s.server_cpu_per_gb)))
    ceiling = summarize([s.gb_s for s in samples.get(("E1", "ceiling"), [])])
    if ceiling.n:
        row = [ceiling.cell(2)] + [fmt(100 * ratio(rate[("E1", k)], ceiling), 0) for k in kinds]
        if "globus" in kinds:
            row.append(fmt(ratio(ceiling, rate[("E1", "globus")])))
        header = ["copy ceiling GB/s"] + [f"{PAIR_NAMES.get(k, k)} % of ceiling" for k in kinds]
        if "globus" in kinds:
            header.append("ceiling/globus pair")
        result.tables.append(Table("One stream against the copy ceiling: median (min–max)", header, [row]))
    result.panel = throughput_panel("Pairs, memory to memory", "GB/s", cfgs, kinds, rate, limit, names=PAIR_NAMES)
    if any(not s.sessions_reaped for g in full.values() for s in g):
        result.notes.append("Some server session processes had not exited 10 s after the client; their CPU may be undercounted.")
    return result
