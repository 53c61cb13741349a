"""The loopback limit: iperf3 with large writes at the same stream counts."""

import json
import os
import subprocess

from .. import processes
from ..results import ScenarioResult, Table
from ..servers import BenchError, free_port, wait_listening
from ..stats import Summary, summarize
from ..timed_command import run_timed
from .registry import scenario

METHOD = (
    "A fresh `iperf3 -s -1` per run and `iperf3 -c 127.0.0.1 -P N -l 1M -t T -J`; the rate is the "
    "receiver's total (`end.sum_received`). 1 MiB writes, because iperf3's default 128 KiB writes "
    "understate loopback and Globus moves 256 KiB-1 MiB blocks. Debian's iperf3 runs all streams on "
    "one thread, so this is a limit for one sender thread, not for the machine."
)


@scenario("iperf", "Loopback limit (iperf3)")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    result = ScenarioResult("iperf", "Loopback limit (iperf3)", METHOD)
    rates: dict[int, list[float]] = {n: [] for n in o.streams}
    cpu: dict[int, list[tuple[float, float]]] = {n: [] for n in o.streams}
    for run_index in range(o.runs):
        for n in o.streams:
            ctx.log(f"iperf: run {run_index + 1}/{o.runs} -P {n}")
            try:
                gbps, sender_cpu, receiver_cpu = _one(ctx, result, n, o.iperf_seconds)
            except BenchError as e:
                ctx.failures += 1
                result.notes.append(f"iperf3 -P {n} run {run_index + 1} failed: {str(e).splitlines()[0]}")
                continue
            rates[n].append(gbps)
            cpu[n].append((sender_cpu, receiver_cpu))
            result.raw.append({"streams": n, "gb_s": gbps, "sender_cpu_pct": sender_cpu, "receiver_cpu_pct": receiver_cpu})
    rows = []
    for n in o.streams:
        s = summarize(rates[n])
        result.summaries[("iperf3", str(n))] = s
        snd = summarize([c[0] for c in cpu[n]])
        rcv = summarize([c[1] for c in cpu[n]])
        rows.append([str(n), s.cell(2), f"{s.median * 8:.1f}" if s.n else "—", snd.cell(0), rcv.cell(0)])
    result.tables.append(Table("iperf3 on 127.0.0.1, 1 MiB writes",
                               ["streams", "GB/s", "Gbit/s", "sender CPU %", "receiver CPU %"], rows))
    return result


def _one(ctx, result, streams: int, seconds: int) -> tuple[float, float, float]:
    workdir = ctx.scratch("iperf3")
    port = free_port()
    server_cmd = ["iperf3", "-s", "-1", "-p", str(port)]
    client_cmd = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", str(streams), "-l", "1M", "-t", str(seconds), "-J"]
    ctx.record_command(result, server_cmd, port)
    ctx.record_command(result, client_cmd, port)
    server_log = os.path.join(workdir, "server.log")
    with open(server_log, "wb") as out:
        server = processes.spawn(server_cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_listening(port, server, server_log, "iperf3 -s")
        client_log = os.path.join(workdir, "client.json")
        run = run_timed(client_cmd, seconds + 30, client_log)
        if run.returncode != 0:
            raise BenchError(f"iperf3 client exited {run.returncode}: {run.output[-500:]}")
        with open(client_log) as f:
            report = json.load(f)
    finally:
        processes.kill_tree(server, grace=2.0)
    end = report["end"]
    gbps = end["sum_received"]["bits_per_second"] / 8 / 1e9
    cpu = end.get("cpu_utilization_percent", {})
    return gbps, cpu.get("host_total", float("nan")), cpu.get("remote_total", float("nan"))


def measure(ctx, result, streams: int, seconds: int) -> tuple[float, float, float]:
    """One iperf3 run at `streams` streams: receiver GB/s, sender and receiver CPU %.

    What the iperf scenario measures, for scenarios that measure the limit themselves (client-mem).
    """
    return _one(ctx, result, streams, seconds)


def limit(ctx) -> dict[int, Summary] | None:
    """The iperf3 medians by stream count, if iperf ran earlier in this invocation."""
    res = ctx.results.get("iperf")
    if res is None:
        return None
    return {int(x): s for (who, x), s in res.summaries.items() if who == "iperf3"}
