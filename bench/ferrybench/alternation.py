"""Runs every configuration on every server, interleaved, so drift hits all servers alike."""

from dataclasses import dataclass

from .servers import BenchError, Server

# A server that fails this many runs in a scenario is skipped for the rest of it.
MAX_FAILURES = 2


@dataclass
class Config:
    """One measured configuration: its row label and stream count (0 = stream mode)."""

    label: str
    streams: int


def alternate(ctx, result, servers: list[Server], configs: list[Config], runs: int, measure_one):
    """Calls measure_one(server, config, run) for each run, config and server, alternating servers.

    A "server" is anything with a `kind` (and, when it is a server, a `proc`): the client
    scenarios pass client+server pairs and an iperf3 anchor the same way.

    The order is run-major (every configuration once, then again) so slow drift on a shared
    machine spreads over all rows, and within a configuration the servers take turns, the first
    mover swapping each run. Returns {(config label, server kind): [samples]}.
    """
    samples: dict[tuple[str, str], list] = {(c.label, s.kind): [] for c in configs for s in servers}
    failures = {s.kind: 0 for s in servers}
    for run in range(runs):
        for config in configs:
            order = servers if run % 2 == 0 else list(reversed(servers))
            for server in order:
                if failures[server.kind] >= MAX_FAILURES:
                    continue
                ctx.log(f"{result.name}: run {run + 1}/{runs} {config.label} {server.kind}")
                try:
                    samples[(config.label, server.kind)].append(measure_one(server, config, run))
                except BenchError as e:
                    failures[server.kind] += 1
                    ctx.failures += 1
                    ctx.log(f"{result.name}: {server.kind} {config.label} FAILED: {e}")
                    result.notes.append(f"{server.kind} run {run + 1} failed, {str(e).splitlines()[0]}")
                    if failures[server.kind] >= MAX_FAILURES:
                        result.notes.append(f"{server.kind} failed {MAX_FAILURES} runs; skipped for the rest of this scenario.")
                        proc = getattr(server, "proc", None)  # an anchor such as iperf3 has no server
                        if proc is not None and proc.poll() is not None:
                            result.notes.append(f"{server.kind} server had exited with code {proc.returncode}.")
    return samples
