"""Client+server pairs disk to disk: the disk scenario's source file fetched by each pair's own client."""

import contextlib
import os

from .. import disk_files
from ..alternation import Config, alternate
from ..comparison import summaries, throughput_panel, throughput_table
from ..pairs import PAIR_METHOD, PAIR_NAMES, get_command, pair_cpu_table
from ..results import ScenarioResult
from ..servers import BenchError, start_each
from ..transfer import measure_command
from ..units import format_size
from .registry import scenario

METHOD = PAIR_METHOD + (
    " Disk to disk, a get of the disk scenario's random source file (`--disk-size`, written once "
    "under `--dir` and reused) to a file on the same disk: "
    "`ferry copy -p N ftp://127.0.0.1:PORT/DIR/source-SIZE.bin /DIR/run-…/dst.bin` and "
    "`globus-url-copy -p N ftp://127.0.0.1:PORT/DIR/source-SIZE.bin file:///DIR/run-…/dst.bin`. "
    "The disk scenario's page-cache policy: before every run the previous destination is deleted, "
    "dirty pages are synced and, as root, the page cache is dropped. The wall time does not "
    "include writing the destination's dirty pages back. Every destination's size is checked and "
    "the first of each pair is compared byte for byte (cmp)."
)


@scenario("client-disk", "Client+server pairs, disk to disk")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    result = ScenarioResult("client-disk", f"Client+server pairs, disk to disk, {format_size(o.disk_size)} file", METHOD)
    cfgs = [Config(f"E{n}", n) for n in o.streams]
    source = disk_files.ensure_source(o.dir, o.disk_size, ctx.log)
    out_dir = ctx.scratch("client-disk-out")
    compared: set[str] = set()
    cache_state = {"dropped": 0, "warm": 0}

    def measure_one(server, config, _run):
        dst = os.path.join(out_dir, f"dst-{server.kind}.bin")
        disk_files.remove(dst)
        cache_state["dropped" if disk_files.drop_caches() else "warm"] += 1
        cmd = get_command(ctx, server, source, dst, config.streams)
        try:
            sample = measure_command(ctx, result, [server], cmd, o.disk_size, config.label, config.streams)
            size = os.path.getsize(dst) if os.path.exists(dst) else -1
            if size != o.disk_size:
                raise BenchError(f"{server.kind} pair {config.label}: destination has {size} bytes, expected {o.disk_size}")
            if server.kind not in compared:
                if not disk_files.same_content(source, dst):
                    raise BenchError(f"{server.kind} pair {config.label}: destination differs from the source (cmp)")
                compared.add(server.kind)
                result.notes.append(f"{server.kind} pair: {config.label} destination identical to the source (cmp).")
            return sample
        finally:
            disk_files.remove(dst)

    with contextlib.ExitStack() as stack:
        servers = start_each(stack, ctx, result)
        samples = alternate(ctx, result, servers, cfgs, o.runs, measure_one)

    if cache_state["dropped"] and not cache_state["warm"]:
        result.notes.insert(0, "Page cache dropped before every run (root): each run read the source from disk.")
    else:
        result.notes.insert(0, f"Page cache NOT dropped ({cache_state['warm']} runs; not root?): caches were warm, "
                               "so this measured reading from memory, not disk.")
    kinds = o.servers
    for group in samples.values():
        result.raw += [s.as_dict() for s in group]
    full = {(c.label, k): samples.get((c.label, k), []) for c in cfgs for k in kinds}
    rate = summaries(full, lambda s: s.gb_s * 1000)
    result.summaries.update(rate)
    result.tables.append(throughput_table("Throughput, MB/s: median (min–max)", cfgs, kinds, rate, "MB/s", digits=0,
                                          names=PAIR_NAMES))
    result.tables.append(pair_cpu_table("CPU seconds per GB (medians, min–max)", cfgs, kinds,
                                        summaries(full, lambda s: s.client_cpu_per_gb),
                                        summaries(full, lambda s: s.server_cpu_per_gb),
                                        summaries(full, lambda s: s.client_cpu_per_gb + s.server_cpu_per_gb)))
    result.panel = throughput_panel("Pairs, disk to disk", "MB/s", cfgs, kinds, rate, names=PAIR_NAMES)
    return result
