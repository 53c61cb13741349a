"""The disk-to-disk measurement both disk scenarios share: one get of the random source file per
run into a fresh destination, page cache dropped first (as root), size checked every run and
the first destination of each subject compared byte for byte."""

import contextlib
import os

from . import disk_files
from .alternation import alternate
from .servers import BenchError, start_each
from .transfer import measure_command


def measure_disk_gets(ctx, result, cfgs, out_name: str, command, who, start=None) -> dict:
    """Alternates `command(server, config, source, dst)` over the started servers and `cfgs`;
    `who(server)` names a subject in messages. `start(stack)` gives the subjects (default: every
    selected server, started in stack). Returns the samples and notes the cache policy."""
    o = ctx.options
    source = disk_files.ensure_source(o.dir, o.disk_size, ctx.log)
    out_dir = ctx.scratch(out_name)
    compared: set[str] = set()
    cache_state = {"dropped": 0, "warm": 0}

    def measure_one(server, config, _run):
        dst = os.path.join(out_dir, f"dst-{server.kind}.bin")
        disk_files.remove(dst)
        cache_state["dropped" if disk_files.drop_caches() else "warm"] += 1
        cmd = command(server, config, source, dst)
        try:
            sample = measure_command(ctx, result, [server], cmd, o.disk_size, config.label, config.streams)
            size = os.path.getsize(dst) if os.path.exists(dst) else -1
            if size != o.disk_size:
                raise BenchError(f"{who(server)} {config.label}: destination has {size} bytes, expected {o.disk_size}")
            if server.kind not in compared:
                if not disk_files.same_content(source, dst):
                    raise BenchError(f"{who(server)} {config.label}: destination differs from the source (cmp)")
                compared.add(server.kind)
                result.notes.append(f"{who(server)}: {config.label} destination identical to the source (cmp).")
            return sample
        finally:
            disk_files.remove(dst)

    with contextlib.ExitStack() as stack:
        servers = start(stack) if start is not None else start_each(stack, ctx, result)
        samples = alternate(ctx, result, servers, cfgs, o.runs, measure_one)

    if cache_state["dropped"] and not cache_state["warm"]:
        result.notes.insert(0, "Page cache dropped before every run (root): each run read the source from disk.")
    else:
        result.notes.insert(0, f"Page cache NOT dropped ({cache_state['warm']} runs; not root?): caches were warm, "
                               "so this measured reading from memory, not disk.")
    return samples
