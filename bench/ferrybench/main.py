"""The runner: checks prerequisites, runs the chosen scenarios, writes the report and the plot."""

import json
import os
import resource
import shutil
import sys
import time

from . import machine, processes
from .context import Context
from .options import Options, parse_options
from .report_markdown import render, scenario_markdown
from .report_plot import render_png
from .results import ScenarioResult
from .scenarios import SCENARIOS
from .servers import BenchError


SERVER_SCENARIOS = {"mem", "disk", "idle"}  # globus-url-copy against each server
PAIR_SCENARIOS = {"client-mem", "client-disk", "small-files"}  # each client against its own server


def _check_tools(o: Options) -> None:
    needed = set()
    chosen = set(o.scenarios)
    if SERVER_SCENARIOS & chosen:
        needed.add("globus-url-copy")  # the one client for every server
        if "globus" in o.servers:
            needed.add("globus-gridftp-server")
    if PAIR_SCENARIOS & chosen and "globus" in o.servers:
        needed |= {"globus-url-copy", "globus-gridftp-server"}
    if {"iperf", "client-mem"} & chosen:
        needed.add("iperf3")
    if {"client-disk", "small-files", "integrity"} & chosen:
        needed |= {"cmp", "diff"}
    missing = sorted(t for t in needed if shutil.which(t) is None)
    if missing:
        raise BenchError(f"missing {', '.join(missing)}: run scripts/install-deps as root")
    uses_ferry = (SERVER_SCENARIOS | PAIR_SCENARIOS | {"integrity", "restart"}) & chosen
    if "ferry" in o.servers and uses_ferry and not os.access(o.ferry, os.X_OK):
        raise BenchError(f"{o.ferry} not found: build it first with `cargo build --release` "
                         "(or measure Globus alone with --servers globus)")


def _raise_fd_limit(ctx: Context) -> None:
    """Idle sessions need a descriptor each, in the runner and in the server (which inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        ctx.notes.append(f"RLIMIT_NOFILE raised from {soft} to {hard} (servers inherit it).")
    else:
        ctx.notes.append(f"RLIMIT_NOFILE is {soft}, its hard limit (servers inherit it).")


def _write(ctx: Context, machine_facts: dict, fairness: dict, argv: list[str]) -> str:
    o = ctx.options
    os.makedirs(o.results, exist_ok=True)
    base = os.path.join(o.results, ctx.stamp)
    panels = [r.panel for r in ctx.results.values() if r.panel is not None]
    title = f"ferry vs Globus GridFTP, {machine_facts['date (UTC)']} UTC{' (quick run)' if o.quick else ''}"
    png = render_png(panels, base + ".png", title)
    if not png and panels:
        ctx.notes.append("No plot: matplotlib is missing (apt-get install python3-matplotlib).")
    with open(base + ".md", "w") as f:
        f.write(render(ctx, machine_facts, fairness, argv, os.path.basename(base) + ".png" if png else None))
    with open(base + ".json", "w") as f:
        json.dump({"machine": machine_facts, "fairness": fairness, "argv": argv,
                   "scenarios": {n: r.raw for n, r in ctx.results.items()}}, f, indent=1)
    with open(os.path.join(o.results, "latest.md"), "w") as f:
        f.write(render(ctx, machine_facts, fairness, argv, "latest.png" if png else None))
    if png:
        shutil.copyfile(base + ".png", os.path.join(o.results, "latest.png"))
    return base


def main(argv: list[str]) -> int:
    options = parse_options(argv, list(SCENARIOS))
    try:
        _check_tools(options)
    except BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 2
    processes.install_signal_handlers()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    ctx = Context(options, stamp)
    try:
        _raise_fd_limit(ctx)
        ctx.log("checking that nothing else is busy (1 s)")
        fairness = {"load_start": machine.loadavg(), "busy": machine.busy_processes()}
        for b in fairness["busy"]:
            ctx.log(f"WARNING: busy: {b}")
        facts = machine.describe(options.ferry)
        for name in options.scenarios:
            ctx.log(f"scenario {name}")
            try:
                ctx.results[name] = SCENARIOS[name].run(ctx)
            except BenchError as e:
                ctx.failures += 1
                ctx.log(f"scenario {name} FAILED: {e}")
                ctx.results[name] = ScenarioResult(name, SCENARIOS[name].title, "", notes=[f"Scenario failed: {e}"])
        fairness["load_end"] = machine.loadavg()
    except KeyboardInterrupt:
        print("\nbench: interrupted; servers stopped, scratch files removed", file=sys.stderr)
        return 130
    finally:
        processes.kill_all()
        ctx.cleanup()
        if options.clean:
            shutil.rmtree(options.dir, ignore_errors=True)
    base = _write(ctx, facts, fairness, argv)
    for result in ctx.results.values():
        print(scenario_markdown(result, with_method=False))
    print(f"Report: {base}.md, plot: {base}.png (copied to latest.md / latest.png)")
    if ctx.failures:
        print(f"bench: {ctx.failures} run(s) or scenario(s) failed; see the notes in the report", file=sys.stderr)
        return 1
    return 0
