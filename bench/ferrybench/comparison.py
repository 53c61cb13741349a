"""Tables and plot panels comparing servers on the same configurations."""

from .alternation import Config
from .results import Panel, Table
from .stats import Summary, ratio, summarize
from .units import fmt


def summaries(samples, metric) -> dict[tuple[str, str], Summary]:
    """Summaries of metric(sample) for every (config label, server kind)."""
    return {key: summarize([metric(s) for s in group]) for key, group in samples.items()}


def throughput_table(title: str, configs: list[Config], kinds: list[str], rate: dict, unit: str,
                     limit: dict[int, Summary] | None = None, digits: int = 2,
                     names: dict[str, str] | None = None) -> Table:
    """Median (min–max) per server, ferry/globus, and each server as a % of the limit (iperf3).

    `names` relabels the columns (the client scenarios show `ferry pair`, `globus pair`).
    """
    name = (names or {}).get
    header = ["mode", "streams"] + [f"{name(k, k)} {unit}" for k in kinds]
    both = "ferry" in kinds and "globus" in kinds
    if both:
        header.append(f"{name('ferry', 'ferry')}/{name('globus', 'globus')}")
    if limit is not None:
        header.append(f"iperf3 {unit}")
        header += [f"{name(k, k)} % of iperf3" for k in kinds]
    rows = []
    for c in configs:
        row = ["stream" if c.streams == 0 else "MODE E", str(max(c.streams, 1))]
        row += [rate[(c.label, k)].cell(digits) for k in kinds]
        if both:
            row.append(fmt(ratio(rate[(c.label, "ferry")], rate[(c.label, "globus")])))
        if limit is not None:
            lim = limit.get(max(c.streams, 1), summarize([]))
            row.append(lim.cell(digits))
            row += [fmt(100 * ratio(rate[(c.label, k)], lim), 0) for k in kinds]
        rows.append(row)
    return Table(title, header, rows)


def cpu_table(title: str, configs: list[Config], kinds: list[str], server_cpu: dict, client_cpu: dict) -> Table:
    """CPU seconds per GB for each server and for the client while it talked to that server."""
    header = ["mode", "streams"] + [f"{k} server CPU-s/GB" for k in kinds] + [f"client CPU-s/GB vs {k}" for k in kinds]
    rows = []
    for c in configs:
        row = ["stream" if c.streams == 0 else "MODE E", str(max(c.streams, 1))]
        row += [server_cpu[(c.label, k)].cell(2) for k in kinds]
        row += [client_cpu[(c.label, k)].cell(2) for k in kinds]
        rows.append(row)
    return Table(title, header, rows)


def throughput_panel(title: str, ylabel: str, configs: list[Config], kinds: list[str], rate: dict,
                     limit: dict[int, Summary] | None = None, names: dict[str, str] | None = None) -> Panel:
    """Grouped bars per configuration: one bar per server, plus iperf3 where it was measured."""
    groups = ["stream" if c.streams == 0 else f"{c.streams}" for c in configs]
    bars = {(names or {}).get(k, k): [rate[(c.label, k)] for c in configs] for k in kinds}
    if limit:
        bars["iperf3"] = [limit.get(max(c.streams, 1), summarize([])) for c in configs]
    return Panel(title, ylabel, groups, bars)
