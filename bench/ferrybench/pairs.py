"""Client+server pairs: `ferry copy` against `ferry serve`, `globus-url-copy` against Globus.

The server scenarios (mem, disk, idle) drive both servers with the same globus-url-copy; the
client scenarios compare whole pairs, each client with its own server, so both ends of ferry are
measured against both ends of Globus.
"""

from .alternation import Config
from .results import Table
from .stats import ratio
from .transfer import guc_command
from .units import fmt

# Column and legend names; the kinds stay `ferry` and `globus` so colours and ratios follow.
PAIR_NAMES = {"ferry": "ferry pair", "globus": "globus pair"}

PAIR_METHOD = (
    "Each pair is a client with its own server: the **ferry pair** is `target/release/ferry copy` "
    "against `ferry serve --root / --anonymous --anonymous-write`, the **globus pair** is "
    "`globus-url-copy` against `globus-gridftp-server -aa` (both on 127.0.0.1, fresh for the "
    "scenario). Pairs alternate run by run (ferry, globus, then globus, ferry, …)."
)


def ferry_copy(ctx, src: str, dst: str, streams: int | None = None, length: int | None = None,
               extra: tuple[str, ...] = ()) -> list[str]:
    """`ferry copy [-p N] [--length L] [extra…] SRC DST`."""
    cmd = [ctx.options.ferry, "copy"]
    if streams:
        cmd += ["-p", str(streams)]
    if length is not None:
        cmd += ["--length", str(length)]
    return cmd + list(extra) + [src, dst]


def get_command(ctx, server, path: str, dst: str, streams: int, length: int | None = None) -> list[str]:
    """A get from `server` to a local path with the pair's own client (MODE E, `-p N`)."""
    if server.kind == "ferry":
        return ferry_copy(ctx, server.url(path), dst, streams, length)
    return guc_command(server.url(path), f"file://{dst}", streams, length)


def pair_cpu_table(title: str, configs: list[Config], kinds: list[str], client_cpu: dict, server_cpu: dict,
                   total_cpu: dict) -> Table:
    """CPU seconds per GB of each pair's client, server and both together, and the totals' ratio."""
    header = ["mode", "streams"]
    for k in kinds:
        name = PAIR_NAMES.get(k, k)
        header += [f"{name}: client CPU-s/GB", f"{name}: server", f"{name}: total"]
    both = "ferry" in kinds and "globus" in kinds
    if both:
        header.append("total ferry/globus")
    rows = []
    for c in configs:
        row = ["stream" if c.streams == 0 else "MODE E", str(max(c.streams, 1))]
        for k in kinds:
            row += [client_cpu[(c.label, k)].cell(2), server_cpu[(c.label, k)].cell(2), total_cpu[(c.label, k)].cell(2)]
        if both:
            row.append(fmt(ratio(total_cpu[(c.label, "ferry")], total_cpu[(c.label, "globus")])))
        rows.append(row)
    return Table(title, header, rows)
