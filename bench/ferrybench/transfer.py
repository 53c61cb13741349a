"""One measured globus-url-copy transfer: wall time, server CPU over its process tree, client CPU."""

import os
from dataclasses import asdict, dataclass

from . import proctree
from .servers import BenchError, Server
from .timed_command import run_timed

# Slower than this and a run is hung, not slow: 20 MB/s, but never less than a minute.
MIN_RATE_BPS = 20e6
MIN_TIMEOUT_S = 60.0


@dataclass
class TransferSample:
    """One timed transfer of `n_bytes` from `server` with `streams` (0 = stream mode)."""

    server: str
    label: str
    streams: int
    n_bytes: int
    wall_s: float
    server_cpu_s: float
    client_cpu_s: float
    sessions_reaped: bool

    @property
    def gb_s(self) -> float:
        """Throughput in decimal GB/s over the client's whole wall time."""
        return self.n_bytes / self.wall_s / 1e9

    @property
    def server_cpu_per_gb(self) -> float:
        """Server CPU seconds per decimal GB moved."""
        return self.server_cpu_s / (self.n_bytes / 1e9)

    @property
    def client_cpu_per_gb(self) -> float:
        """The client's CPU seconds per decimal GB moved."""
        return self.client_cpu_s / (self.n_bytes / 1e9)

    def as_dict(self) -> dict:
        """For the JSON file beside the report."""
        d = asdict(self)
        d.update(gb_s=self.gb_s, server_cpu_per_gb=self.server_cpu_per_gb, client_cpu_per_gb=self.client_cpu_per_gb)
        return d


def guc_command(src: str, dst: str, streams: int, length: int | None = None) -> list[str]:
    """globus-url-copy for a get; streams 0 is stream mode, N >= 1 is MODE E with `-p N`.

    `-p 1` is given explicitly: without -p the client uses stream mode (PASV, plain bytes), with
    it MODE E (OPTS RETR Parallelism, PORT: the server connects out). With `-len` the client asks
    for a partial read, `ERET P 0 LEN PATH`, instead of RETR.
    """
    cmd = ["globus-url-copy"]
    if streams > 0:
        cmd += ["-p", str(streams)]
    if length is not None:
        cmd += ["-len", str(length)]
    return cmd + [src, dst]


def measure_get(ctx, result, server: Server, cmd: list[str], n_bytes: int, label: str, streams: int) -> TransferSample:
    """Runs one client command against server and measures it; raises BenchError on failure."""
    return measure_command(ctx, result, [server], cmd, n_bytes, label, streams)


def client_name(cmd: list[str]) -> str:
    """`globus-url-copy`, `ferry copy`: what the error messages call the client."""
    name = os.path.basename(cmd[0])
    return f"{name} {cmd[1]}" if name == "ferry" and len(cmd) > 1 else name


def measure_command(ctx, result, servers: list[Server], cmd: list[str], n_bytes: int, label: str, streams: int,
                    subject: str | None = None, timeout: float | None = None) -> TransferSample:
    """Runs one client command against one or more servers (third party: source and destination).

    Server CPU is the sum over every server's process tree; the sample is filed under `subject`
    (default: the first server's kind). Raises BenchError when the client fails or a server exits.
    """
    subject = subject or servers[0].kind
    ctx.record_command(result, cmd, servers[0].port, {s.port: f"PORT{i + 1}" for i, s in enumerate(servers[1:], 1)})
    before_children = {s.pid: set(proctree.descendants(s.pid)) for s in servers}
    cpu_before = sum(proctree.tree_cpu_seconds(s.pid) for s in servers)
    client = "guc" if os.path.basename(cmd[0]) == "globus-url-copy" else os.path.basename(cmd[0])
    log_path = os.path.join(ctx.scratch(f"{client}-{subject.split()[0]}"), "client.log")
    run = run_timed(cmd, timeout or max(MIN_TIMEOUT_S, n_bytes / MIN_RATE_BPS), log_path)
    # A finished Globus session's CPU reaches the daemon's cutime only once the daemon reaps it.
    reaped = all([proctree.wait_for_children(s.pid, before_children[s.pid]) for s in servers])
    cpu_after = sum(proctree.tree_cpu_seconds(s.pid) for s in servers)
    if run.returncode != 0:
        why = "timed out" if run.returncode == 124 else f"exited {run.returncode}"
        lines = [ln.strip() for ln in run.output.splitlines() if ln.strip()]
        last = lines[-1] if lines else "no output"
        raise BenchError(f"{label}: {client_name(cmd)} {why}: {last}\n{' '.join(cmd)}\n{run.output.strip()[-1500:]}")
    for server in servers:
        if server.proc.poll() is not None:
            raise BenchError(f"{server.kind} server exited ({server.proc.returncode}) during {label}")
    return TransferSample(subject, label, streams, n_bytes, run.wall_s, cpu_after - cpu_before, run.cpu_s, reaped)
