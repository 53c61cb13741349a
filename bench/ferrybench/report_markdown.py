"""The markdown report: machine, commands, one section per scenario, the plot."""

from .results import ScenarioResult, Table
from .units import format_size

READING = (
    "Each cell is the median of the runs, with the (min–max) spread when there was more than one. "
    "Ratios are of medians: ferry/globus > 1 means ferry moved data faster. CPU-s/GB is CPU seconds "
    "per decimal GB moved, lower is cheaper; on 2 cores client and server share the machine, so the "
    "cheaper data path tends to win. Runs vary by about ±30 % on this kind of machine: only ratios "
    "well away from 1 (≥ 1.5 or ≤ 0.67) say something on their own."
)


PAIR_RESULTS = {"client-mem", "client-disk", "small-files"}
PAIRS = (" The client scenarios (client-mem, client-disk, small-files) are the exception: there each "
         "client drives its own server, `ferry copy` against ferry and `globus-url-copy` against Globus, "
         "and the pairs alternate the same way.")


def table_markdown(table: Table) -> str:
    """One table with its title in bold above it."""
    lines = [f"**{table.title}**", "", "| " + " | ".join(table.header) + " |",
             "|" + "|".join("---" for _ in table.header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return "\n".join(lines)


def scenario_markdown(result: ScenarioResult, with_method: bool = True) -> str:
    """A scenario's section: method, commands, tables, notes."""
    parts = [f"## {result.title}", ""]
    if with_method:
        parts += [result.method, ""]
        if result.commands:
            parts += ["Commands (ports vary per run):", "", "```", *result.commands, "```", ""]
    for table in result.tables:
        parts += [table_markdown(table), ""]
    if result.notes:
        parts += ["Notes:", ""] + [f"- {n}" for n in result.notes] + [""]
    return "\n".join(parts)


def render(ctx, machine: dict, fairness: dict, argv: list[str], png_name: str | None) -> str:
    """The whole report."""
    o = ctx.options
    lines = [f"# ferry benchmark, {machine['date (UTC)']} UTC", ""]
    if o.quick:
        lines += ["**Quick run** (`--quick`): sizes and run counts too small for the figures to mean "
                  "anything; it checks that the runner works.", ""]
    lines += ["Rerun with:", "", "```", "python3 bench/run.py " + " ".join(argv), "```", ""]
    lines += ["## Machine and software", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in machine.items()]
    lines += [f"| load average at start / end | {fairness['load_start']} / {fairness['load_end']} |",
              f"| runs per configuration | {o.runs} |",
              f"| sizes | memory-to-memory {format_size(o.size)}, disk file {format_size(o.disk_size)} |"]
    if "small-files" in ctx.results:
        lines.append(f"| small files | {o.small_files} × 4 KiB, flat and in {o.small_dirs} directories |")
    if "integrity" in ctx.results:
        lines.append(f"| integrity | {format_size(o.integrity_size)} tmpfs file, {format_size(o.cksm_size)} CKSM file |")
    if "restart" in ctx.results:
        lines.append(f"| restart | {o.restart_tries} tries per direction, {format_size(o.restart_size)} file |")
    lines.append("")
    if fairness["busy"]:
        lines += ["**Other processes were busy when the run started**, so every figure below is contended "
                  "and only the ratios within this run may be compared:", ""]
        lines += [f"- {b}" for b in fairness["busy"]] + [""]
    else:
        lines += ["No other process used more than 10 % of a core when the run started.", ""]
    lines += ["## How to read this", "", READING, "",
              "Servers alternate run by run (ferry, globus, then globus, ferry, …), every server is "
              "driven by the same globus-url-copy client with the same flags, and each scenario starts "
              "fresh servers." + (PAIRS if PAIR_RESULTS & set(ctx.results) else "") +
              " Servers were started as:", "", "```"]
    lines += [f"{kind}: {cmd}" for kind, cmd in ctx.server_commands.items()] + ["```", ""]
    if ctx.notes:
        lines += [f"- {n}" for n in ctx.notes] + [""]
    for result in ctx.results.values():
        lines.append(scenario_markdown(result))
    if png_name:
        lines += ["## Plot", "", f"![throughput and idle cost]({png_name})", ""]
    return "\n".join(lines)
