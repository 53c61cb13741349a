"""Client+server pairs disk to disk: the disk scenario's source file fetched by each pair's own client."""

from ..alternation import Config
from ..disk_runs import measure_disk_gets
from ..comparison import summaries, throughput_panel, throughput_table
from ..pairs import PAIR_METHOD, PAIR_NAMES, get_command, pair_cpu_table
from ..results import ScenarioResult
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
    samples = measure_disk_gets(ctx, result, cfgs, "client-disk-out",
                                lambda server, config, source, dst: get_command(ctx, server, source, dst, config.streams),
                                lambda s: f"{s.kind} pair")
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
