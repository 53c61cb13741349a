"""Disk to disk: a real file on the server's disk fetched to a file on the same disk."""

from ..alternation import Config
from ..disk_runs import measure_disk_gets
from ..comparison import cpu_table, summaries, throughput_panel, throughput_table
from ..results import ScenarioResult
from ..transfer import guc_command
from ..units import format_size
from .registry import scenario

METHOD = (
    "`globus-url-copy -p N ftp://127.0.0.1:PORT/DIR/source-SIZE.bin file:///DIR/run-…/dst.bin` (MODE E), "
    "servers alternating. The source is random data written once. Before every run the previous "
    "destination is deleted, dirty pages are synced and, as root, the page cache is dropped "
    "(`sync; echo 3 > /proc/sys/vm/drop_caches`), so each run reads the source from disk. The "
    "client's wall time does not include writing the destination's dirty pages back. Every "
    "destination's size is checked, and the first of each server is compared byte for byte (cmp)."
)


@scenario("disk", "Disk to disk (file → file, same disk)")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    result = ScenarioResult("disk", f"Disk to disk, {format_size(o.disk_size)} file", METHOD)
    cfgs = [Config(f"E{n}", n) for n in o.streams]
    samples = measure_disk_gets(ctx, result, cfgs, "disk-out",
                                lambda server, config, source, dst: guc_command(server.url(source), f"file://{dst}", config.streams),
                                lambda s: s.kind)
    kinds = o.servers
    for group in samples.values():
        result.raw += [s.as_dict() for s in group]
    full = {(c.label, k): samples.get((c.label, k), []) for c in cfgs for k in kinds}
    rate = summaries(full, lambda s: s.gb_s * 1000)
    result.summaries.update(rate)
    result.tables.append(throughput_table("Throughput, MB/s: median (min–max)", cfgs, kinds, rate, "MB/s", digits=0))
    result.tables.append(cpu_table("CPU seconds per GB (medians, min–max)", cfgs, kinds,
                                   summaries(full, lambda s: s.server_cpu_per_gb),
                                   summaries(full, lambda s: s.client_cpu_per_gb)))
    result.panel = throughput_panel("Disk to disk", "MB/s", cfgs, kinds, rate)
    return result
