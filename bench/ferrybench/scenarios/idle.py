"""Idle sessions: server memory per logged-in idle session, and a transfer while thousands are held."""

import resource
import time

from .. import proctree
from ..ftp_sessions import IdleSessions
from ..results import Panel, ScenarioResult, Table
from ..servers import BenchError, running
from ..stats import ratio, summarize
from ..transfer import guc_command, measure_get
from ..units import fmt, format_size
from .registry import scenario

TRANSFER_STREAMS = 4
# Globus forks and execs a process per connection: open a few at a time so none times out.
CONCURRENCY = {"ferry": 256, "globus": 16}
# File descriptors the runner keeps for itself besides the sessions.
FD_MARGIN = 200

METHOD = (
    "N control connections are opened to a fresh server and each logged in (220 banner, "
    "`USER anonymous`, `PASS x`, 230), then left idle. Server memory is PSS (`/proc/PID/smaps_rollup`) "
    "summed over the daemon and all its descendants, 1 s after the last login, minus the same sum "
    "before the first connection; divided by N. Globus runs a process per session, so its count is "
    "capped (--globus-idle-max). With the largest count held, the 4-stream memory-to-memory "
    "transfer runs again and is compared with the same transfer measured before any session was opened."
)


def _counts(ctx, kind: str, result: ScenarioResult) -> list[int]:
    o = ctx.options
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    fd_cap = soft - FD_MARGIN
    counts = []
    for n in sorted(set(o.idle_sessions)):
        capped = n
        if kind == "globus" and n > o.globus_idle_max:
            capped = o.globus_idle_max
            result.notes.append(f"globus: {n} idle sessions capped at {capped} (--globus-idle-max): "
                                "each Globus session is a process of about 1.4 MB.")
        if capped > fd_cap:
            result.notes.append(f"{kind}: {n} sessions capped at {fd_cap}: RLIMIT_NOFILE is {soft}.")
            capped = fd_cap
        if capped not in counts:
            counts.append(capped)
    return counts


def _transfers(ctx, result, server, label: str) -> list:
    o = ctx.options
    samples = []
    for i in range(o.runs):
        ctx.log(f"idle: {server.kind} {label} transfer {i + 1}/{o.runs}")
        cmd = guc_command(server.url("/dev/zero"), "file:///dev/null", TRANSFER_STREAMS, o.size)
        try:
            samples.append(measure_get(ctx, result, server, cmd, o.size, label, TRANSFER_STREAMS))
        except BenchError as e:
            ctx.failures += 1
            result.notes.append(f"{server.kind}: transfer with {str(e).splitlines()[0]}")
            break
    return samples


@scenario("idle", "Idle sessions")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    result = ScenarioResult("idle", "Idle sessions", METHOD)
    mem_rows, load_rows = [], []
    per_session: dict[tuple[str, int], float] = {}
    for kind in o.servers:
        counts = _counts(ctx, kind, result)
        try:
            with running(kind, ctx) as server:
                without = _transfers(ctx, result, server, "no idle sessions")
                time.sleep(1.0)
                base_kib, base_procs = proctree.tree_pss_kib(server.pid)
                sessions = IdleSessions(server.port, CONCURRENCY[kind])
                try:
                    for n in counts:
                        ctx.log(f"idle: {kind}: opening sessions up to {n}")
                        seconds = sessions.open_until(n)
                        time.sleep(1.0)
                        kib, procs = proctree.tree_pss_kib(server.pid)
                        held = len(sessions.conns)
                        each = (kib - base_kib) / held if held else float("nan")
                        per_session[(kind, n)] = each
                        mem_rows.append([kind, str(n), f"{held} ({len(sessions.errors)} failed)",
                                         f"{base_kib / 1024:.1f}", f"{kib / 1024:.1f}", fmt(each, 1),
                                         f"{base_procs} → {procs}", f"{seconds:.1f}"])
                        result.raw.append({"server": kind, "sessions": n, "held": held, "failed": len(sessions.errors),
                                           "pss_before_kib": base_kib, "pss_after_kib": kib, "kib_per_session": each,
                                           "processes": procs, "open_s": seconds})
                        if sessions.errors:
                            ctx.failures += 1
                            result.notes.append(f"{kind}: {len(sessions.errors)} of {n} logins failed, first: {sessions.errors[0]}")
                            break
                    held = len(sessions.conns)
                    loaded = _transfers(ctx, result, server, f"{held} idle sessions held")
                    alive = sessions.still_open()
                    if alive != held:
                        result.notes.append(f"{kind}: only {alive} of {held} idle sessions were still open after the transfers.")
                finally:
                    sessions.close()
        except BenchError as e:
            ctx.failures += 1
            result.notes.append(f"{kind}: idle scenario failed: {str(e).splitlines()[0]}")
            continue
        a = summarize([s.gb_s for s in without])
        b = summarize([s.gb_s for s in loaded])
        load_rows.append([kind, str(held), a.cell(2), b.cell(2), fmt(ratio(b, a)),
                          summarize([s.server_cpu_per_gb for s in without]).cell(2),
                          summarize([s.server_cpu_per_gb for s in loaded]).cell(2)])
        result.raw += [s.as_dict() for s in without + loaded]

    result.tables.append(Table("Server memory per idle session (PSS over the whole process tree)",
                               ["server", "sessions", "held", "PSS before MiB", "PSS after MiB", "KiB per session",
                                "processes", "s to open"], mem_rows))
    result.tables.append(Table(f"{TRANSFER_STREAMS}-stream memory-to-memory transfer ({format_size(o.size)}) "
                               "with the idle sessions held, GB/s",
                               ["server", "idle sessions held", "without", "with", "with/without",
                                "server CPU-s/GB without", "with"], load_rows))
    groups = sorted({n for _, n in per_session})
    result.panel = Panel("Idle session cost", "KiB PSS per session", [str(n) for n in groups],
                         {k: [summarize([per_session[(k, n)]] if (k, n) in per_session else []) for n in groups]
                          for k in o.servers}, log_scale=True)
    return result
