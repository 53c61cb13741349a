"""Restart: kill -9 the ferry server during a `ferry copy --retries 10`, restart it, check the bytes."""

import os
import random
import re
import shlex
import signal
import socket
import statistics
import subprocess
import time
from collections import Counter

from .. import disk_files, processes
from ..results import Panel, ScenarioResult, Table
from ..servers import BenchError, Server, free_port, start_ferry
from ..stats import summarize
from ..units import format_size
from .registry import scenario

RETRIES = 10
# A transfer shorter than this is too quick to kill reliably at a random point of it.
TARGET_S = 2.0
# --tcp-bs values tried in turn (auto) until an uninterrupted copy lasts TARGET_S; None = no flag.
TCP_BS_LADDER = [None, 65536, 16384, 4096, 2048, 1024]
# Where in the expected duration the kill may land (fractions), avoiding login and the end:
# at 95 % three puts of twenty had already finished (copies vary by ±15 % here).
KILL_WINDOW = (0.05, 0.80)
RESTART_DEADLINE_S = 10.0
# ferry copy's retry line: `retrying (attempt 2, resuming after 193986560 bytes): …`
RESUMED = re.compile(r"^retrying \(attempt \d+, resuming after (\d+) bytes\)", re.MULTILINE)

METHOD = (
    f"A file of random bytes (`--restart-size`, made once under `--dir`) is copied with "
    f"`ferry copy --retries {RETRIES}` from a `ferry serve` to a local file (get) and from a local file to "
    "the server (put). During each try the server is killed with SIGKILL after a random delay and "
    "restarted at once on the same port (`--listen 127.0.0.1:PORT`, a port below the kernel's "
    "ephemeral range, so no outgoing connection can take it meanwhile); the copy is then waited for, "
    "and its exit code and whether the destination is byte-identical to the source (`cmp`) are "
    "recorded. The delay is drawn uniformly from 5-80 % of the expected duration, the median of two "
    "uninterrupted copies measured first (which are also checked with cmp), with Python's "
    "`random.Random(seed)`; the seed is printed below and `--restart-seed` replays the same delays. "
    f"Loopback copies are quick, so when an uninterrupted copy takes under {TARGET_S:.0f} s, "
    "`--tcp-bs` (TCP buffers of the data connections, also asked of the server) is lowered step by step "
    "(64K, 16K, 4K, 2K, 1K) until a copy lasts that long, or else the slowest of them is taken (smaller "
    "buffers are not always slower); the value used is given below (`--restart-tcp-bs` fixes it). "
    "\"killed mid-transfer\" counts tries where the client was still running when the kill came."
)


class RestartableServer:
    """One `ferry serve` at a time on a port that stays the same across kill -9 and restart."""

    def __init__(self, ctx, result, workdir: str):
        self.ctx = ctx
        self.result = result
        self.workdir = workdir
        self.server: Server | None = None
        self.port = 0
        self.starts = 0

    def start(self) -> Server:
        """Starts the server: on a free port the first time, on the same port after that."""
        self.starts += 1
        if not self.port:
            self.port = _port_below_ephemeral()
        self.server = start_ferry(self.ctx.options.ferry, self.workdir, self.port, f"ferry-{self.starts:03d}.out")
        if self.starts == 1:
            self.ctx.record_server(self.server)
        else:
            line = f"kill -9 SERVER_PID; {self.server.command_line()}   # at once, same port"
            if line not in self.result.commands:
                self.result.commands.append(line)
        return self.server

    def kill9(self) -> None:
        """SIGKILL to the server (one process, many threads) and reap it."""
        proc = self.server.proc
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        processes.forget(proc)

    def restart(self) -> float:
        """Starts a new server on the same port at once; retries while the port is not yet free."""
        start = time.monotonic()
        while True:
            try:
                self.start()
                return time.monotonic() - start
            except BenchError:
                if time.monotonic() - start > RESTART_DEADLINE_S:
                    raise
                time.sleep(0.05)

    def check(self) -> str | None:
        """None while the server runs; else how it ended and the end of its log (it is restarted)."""
        proc = self.server.proc
        if proc.poll() is None:
            return None
        processes.forget(proc)
        what = f"the server (pid {proc.pid}) had exited with code {proc.returncode}: `{_log_tail(self.server.log_path).strip()[-400:]}`"
        self.start()
        return what

    def stop(self) -> None:
        """Kills whatever server is running."""
        if self.server is not None:
            processes.kill_tree(self.server.proc, grace=1.0)


def _port_below_ephemeral() -> int:
    """A free 127.0.0.1 port below the kernel's ephemeral range.

    Outgoing connections (this runner's, the client's, anyone's) take their local ports from the
    ephemeral range; one that happened to take the server's port in the moment between the kill
    and the restart would keep the new server from binding it. Below the range that cannot happen.
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    return free_port()


def _copy_command(ctx, server: Server, direction: str, source: str, dst: str, tcp_bs: int | None) -> list[str]:
    cmd = [ctx.options.ferry, "copy", "--retries", str(RETRIES)]
    if tcp_bs:
        cmd += ["--tcp-bs", str(tcp_bs)]
    if direction == "get":
        return cmd + [server.url(source), dst]
    return cmd + [source, server.url(dst)]


def _log_tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read()[-4000:].decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _run_client(cmd: list[str], log_path: str, timeout: float, at=None) -> tuple[int, float, dict]:
    """Runs the copy; with `at` = (delay, action), calls action() (kill -9 and restart) after delay
    seconds, or at once if the client has ended before that, recording whether it was still running.

    Returns the exit code (124 on timeout), the wall time and what happened at the kill.
    """
    event: dict = {}
    with open(log_path, "wb") as log:
        start = time.monotonic()
        proc = processes.spawn(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        if at is not None:
            delay, action = at
            while proc.poll() is None and time.monotonic() - start < delay:
                time.sleep(min(0.01, max(delay - (time.monotonic() - start), 0.0)))
            event["running_at_kill"] = proc.poll() is None
            event["kill_at_s"] = time.monotonic() - start
            event["restart_s"] = action()
        try:
            rc = proc.wait(timeout=max(timeout - (time.monotonic() - start), 1.0))
        except subprocess.TimeoutExpired:
            rc = 124
        wall = time.monotonic() - start
    finally:
        processes.kill_tree(proc, grace=0.5)
    return rc, wall, event


def _calibrate(ctx, result, holder, direction, source, dst, log_dir) -> tuple[int | None, float] | None:
    """Picks --tcp-bs and the expected duration; None when an uninterrupted copy already fails."""
    o = ctx.options
    ladder = TCP_BS_LADDER if o.restart_tcp_bs == "auto" else [None if o.restart_tcp_bs == "none" else int(o.restart_tcp_bs)]
    tried = []
    for bs in ladder:
        walls = []
        for j in range(2):
            disk_files.remove(dst)
            cmd = _copy_command(ctx, holder.server, direction, source, dst, bs)
            ctx.log(f"restart: {direction}: calibrating, --tcp-bs {bs or 'default'}, copy {j + 1}/2")
            log_path = os.path.join(log_dir, f"{direction}-calibrate-{bs}-{j}.log")
            rc, wall, _ = _run_client(cmd, log_path, 120 + o.restart_size / 1e6)
            if rc != 0 or not disk_files.same_content(source, dst):
                ctx.failures += 1
                what = f"exited {rc}" if rc != 0 else "gave a destination that differs (cmp)"
                result.notes.append(f"{direction}: an uninterrupted copy {what}, so no kills were tried: "
                                    f"`{shlex.join(cmd)}`: {_log_tail(log_path).strip()[-300:]}")
                return None
            walls.append(wall)
        if min(walls) >= TARGET_S:
            return bs, statistics.median(walls)
        tried.append((statistics.median(walls), bs))
    # None lasted TARGET_S: the slowest one (smaller buffers are not always slower).
    expected, bs = max(tried, key=lambda t: t[0])
    return bs, expected


@scenario("restart", "Restart after kill -9 of the server")
def run(ctx) -> ScenarioResult:
    o = ctx.options
    result = ScenarioResult("restart", f"Restart: {o.restart_tries} × kill -9 of the ferry server during a "
                            f"{format_size(o.restart_size)} copy", METHOD)
    if "ferry" not in o.servers:
        result.notes.append("Skipped: ferry is not among --servers.")
        return result
    seed = o.restart_seed if o.restart_seed is not None else random.SystemRandom().randrange(1, 2 ** 31)
    rng = random.Random(seed)
    source = disk_files.ensure_random_file(o.dir, "restart", o.restart_size, ctx.log)
    workdir = ctx.scratch("restart")
    holder = RestartableServer(ctx, result, workdir)
    summary_rows, try_rows = [], []
    counts: dict[str, dict[str, int]] = {}
    headline = []
    try:
        holder.start()
        for direction in ("get", "put"):
            dst = os.path.join(workdir, f"{direction}-dst.bin")
            picked = _calibrate(ctx, result, holder, direction, source, dst, workdir)
            if picked is None:
                continue
            tcp_bs, expected = picked
            if tcp_bs and o.restart_tcp_bs == "auto":
                result.notes.append(f"{direction}: an uninterrupted copy took under {TARGET_S:.0f} s without it, so the "
                                    f"tries pass `--tcp-bs {tcp_bs}` to slow the transfer (expected {expected:.2f} s).")
            elif tcp_bs:
                result.notes.append(f"{direction}: the tries pass `--tcp-bs {tcp_bs}` (--restart-tcp-bs); "
                                    f"expected {expected:.2f} s.")
            if expected < TARGET_S:
                result.notes.append(f"{direction}: the expected duration is under {TARGET_S:.0f} s"
                                    f"{' even with the slowest --tcp-bs tried' if o.restart_tcp_bs == 'auto' else ''}, "
                                    "so some kills may come after the copy ended (see \"killed mid-transfer\").")
            tries = []
            for i in range(o.restart_tries):
                delay = rng.uniform(*KILL_WINDOW) * expected
                disk_files.remove(dst)
                cmd = _copy_command(ctx, holder.server, direction, source, dst, tcp_bs)
                ctx.record_command(result, cmd, holder.port)
                ctx.log(f"restart: {direction} try {i + 1}/{o.restart_tries}: kill -9 at {delay:.2f} s")
                log_path = os.path.join(workdir, f"{direction}-try-{i + 1:02d}.log")

                server_log_path = ""

                def kill_and_restart():
                    nonlocal server_log_path
                    holder.kill9()
                    seconds = holder.restart()
                    server_log_path = holder.server.log_path
                    return seconds

                rc, wall, event = _run_client(cmd, log_path, 120 + 5 * expected, (delay, kill_and_restart))
                server_state = holder.check()
                if server_state:
                    ctx.failures += 1
                    result.notes.append(f"{direction} try {i + 1}: after the copy, {server_state}")
                log = _log_tail(log_path)
                server_log = _log_tail(server_log_path)
                size = os.path.getsize(dst) if os.path.exists(dst) else -1
                identical = size == o.restart_size and disk_files.same_content(source, dst)
                retries = sum(1 for line in log.splitlines() if line.startswith("retrying"))
                resumed = [int(x) for x in RESUMED.findall(log)]
                t = {"direction": direction, "try": i + 1, "delay_s": delay, "kill_at_s": event["kill_at_s"],
                     "running_at_kill": event["running_at_kill"], "restart_s": event["restart_s"], "exit": rc,
                     "wall_s": wall, "retries": retries, "resumed_after": resumed, "dst_bytes": size, "identical": identical,
                     "tcp_bs": tcp_bs, "expected_s": expected, "seed": seed}
                tries.append(t)
                result.raw.append(t)
                try_rows.append([direction, str(i + 1), f"{event['kill_at_s']:.2f}",
                                 "yes" if event["running_at_kill"] else "no (already done)", f"{event['restart_s']:.2f}",
                                 str(rc), f"{wall:.2f}", str(retries), ", ".join(map(str, resumed)) or "—",
                                 str(size), "yes" if identical else "**NO**"])
                if rc != 0 or not identical:
                    ctx.failures += 1
                    last = [ln for ln in log.splitlines() if ln.strip()]
                    result.notes.append(f"{direction} try {i + 1}: exit {rc}, {'identical' if identical else 'NOT identical'} "
                                        f"({size} bytes), kill at {event['kill_at_s']:.2f} s; last output: "
                                        f"`{last[-1].strip() if last else 'none'}`; command: `{shlex.join(cmd)}`; "
                                        f"restarted server's log: `{' | '.join(server_log.splitlines()[-6:])}`")
            n = len(tries)
            ident = sum(t["identical"] for t in tries)
            ok = sum(t["exit"] == 0 for t in tries)
            mid = sum(t["running_at_kill"] for t in tries)
            codes = Counter(t["exit"] for t in tries)
            counts[direction] = {"identical": ident, "exit 0": ok, "killed mid-transfer": mid}
            from_zero = sum(1 for t in tries if t["resumed_after"] and t["resumed_after"][0] == 0)
            if from_zero:
                result.notes.append(f"{direction}: {from_zero} of {sum(1 for t in tries if t['resumed_after'])} retried "
                                    "copies resumed after 0 bytes, i.e. started over (no restart marker had reached "
                                    "the client before the kill).")
            headline.append(f"{direction}: {ident} of {n} identical ({mid} of the {n} killed mid-transfer)")
            summary_rows.append([direction, f"**{ident} of {n}**", f"{ok} of {n}",
                                 ", ".join(f"{c} ×{k}" for c, k in sorted(codes.items())), f"{mid} of {n}",
                                 str(tcp_bs or "default"), f"{expected:.2f}",
                                 summarize([t["wall_s"] for t in tries]).cell(2),
                                 summarize([t["retries"] for t in tries]).cell(0),
                                 summarize([t["restart_s"] for t in tries]).cell(2)])
    finally:
        holder.stop()

    result.notes.insert(0, f"Seed {seed} (`--restart-seed {seed}` replays these delays)." +
                        (" " + "; ".join(headline) + "." if headline else ""))
    result.tables.append(Table("Tries per direction (wall, retries and restart: median (min–max))",
                               ["direction", "identical (cmp)", "exit 0", "exit codes (code ×count)",
                                "killed mid-transfer", "--tcp-bs", "expected s", "wall s", "retries",
                                "server back in s"], summary_rows))
    result.tables.append(Table("Every try", ["direction", "try", "kill at s", "running at kill", "server back in s",
                                             "exit", "wall s", "retries", "resumed after (bytes)",
                                             "bytes at destination", "identical"],
                               try_rows))
    if counts:
        dirs = list(counts)
        result.panel = Panel(f"Restart after kill -9 ({o.restart_tries} tries each)", f"tries (of {o.restart_tries})",
                             dirs, {what: [summarize([counts[d][what]]) for d in dirs]
                                    for what in ("killed mid-transfer", "exit 0", "identical")}, xlabel="direction",
                             counts=True)
    return result
