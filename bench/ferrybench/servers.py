"""Starting and stopping the servers under test on 127.0.0.1: ferry and globus-gridftp-server."""

import contextlib
import os
import pwd
import re
import shlex
import socket
import subprocess
import time
from dataclasses import dataclass, field

from . import processes

SERVER_KINDS = ("ferry", "globus")
LISTEN_TIMEOUT_S = 30.0


class BenchError(RuntimeError):
    """A problem the person running the benchmark has to fix; printed without a traceback."""


@dataclass
class Server:
    """A running server: its kind, process, control port and the command that started it."""

    kind: str
    proc: subprocess.Popen
    port: int
    command: list[str]
    log_path: str
    notes: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        """The daemon's PID; Globus session processes are its children."""
        return self.proc.pid

    def url(self, path: str) -> str:
        """An ftp:// URL for an absolute path (ferry runs with --root /, so paths match Globus)."""
        return f"ftp://127.0.0.1:{self.port}{path}"

    def command_line(self) -> str:
        """The start command with the port as a placeholder, for the report."""
        return re.sub(rf"(?<!\d){self.port}(?!\d)", "PORT", shlex.join(self.command))


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening_ports() -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A":  # TCP_LISTEN
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        except FileNotFoundError:
            pass
    return ports


def wait_listening(port: int, proc: subprocess.Popen, log_path: str, what: str) -> None:
    """Waits until something listens on port, reading /proc/net/tcp.

    Probing with connect() would cost a Globus session fork and, for iperf3 -1, its one test.
    """
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    while port not in _listening_ports():
        _check_alive(proc, log_path, what)
        if time.monotonic() > deadline:
            raise BenchError(f"{what} did not listen on port {port} within {LISTEN_TIMEOUT_S:.0f} s; see {log_path}")
        time.sleep(0.05)


def _check_alive(proc: subprocess.Popen, log_path: str, what: str) -> None:
    if proc.poll() is not None:
        tail = _tail(log_path).strip()
        last = tail.splitlines()[-1] if tail else "no output"
        raise BenchError(f"{what} exited with code {proc.returncode}: {last}\n{tail}")


def _tail(path: str, n: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode("utf-8", "replace")
    except FileNotFoundError:
        return "(no output)"


def anonymous_user() -> str | None:
    """The account Globus switches anonymous sessions to when it runs as root; None otherwise.

    As root, Globus refuses anonymous access unless -anonymous-user names a real account, and
    `nobody` exists on Debian. Not root, it serves as the invoking user and the flag is omitted.
    """
    if os.geteuid() != 0:
        return None
    for name in ("nobody", "daemon"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise BenchError("running as root, but there is neither a 'nobody' nor a 'daemon' account for Globus' anonymous sessions")


def start_globus(workdir: str) -> Server:
    """globus-gridftp-server in anonymous mode, foreground, forking one process per session.

    `-c EMPTY` keeps /etc/gridftp.conf (port 2811, other settings) from being read; `-hostname
    127.0.0.1` binds control and data sockets to loopback; the log stays at its default level
    (ERROR) so logging costs Globus nothing that ferry does not pay.
    """
    conf = os.path.join(workdir, "globus-empty.conf")
    open(conf, "w").close()
    log_path = os.path.join(workdir, "globus.log")
    port = free_port()
    cmd = ["globus-gridftp-server", "-c", conf, "-aa"]
    user = anonymous_user()
    if user:
        cmd += ["-anonymous-user", user]
    cmd += ["-hostname", "127.0.0.1", "-p", str(port), "-no-chdir", "-l", log_path]
    out_path = os.path.join(workdir, "globus.out")
    with open(out_path, "wb") as out:
        proc = processes.spawn(cmd, stdout=out, stderr=subprocess.STDOUT)
    server = Server("globus", proc, port, cmd, out_path)
    try:
        wait_listening(port, proc, out_path, "globus-gridftp-server")
    except BaseException:
        processes.kill_tree(proc)
        raise
    return server


_LISTENING = re.compile(rb"listening on (?:\[[^\]]*\]|[^\s:]+):(\d+)")


def start_ferry(binary: str, workdir: str, port: int = 0, out_name: str = "ferry.out",
                logins: tuple[str, ...] = ("--anonymous", "--anonymous-write"),
                extra: tuple[str, ...] = ()) -> Server:
    """`ferry serve` with --root / (--anonymous-whole-fs: the bench's files lie anywhere) and
    `logins` (default anonymous with writes, which a root ferry serves as ftp or nobody, as
    Globus' anchor is served as nobody) and `extra` options, on a port it picks and prints (or on
    `port`)."""
    if not os.access(binary, os.X_OK):
        raise BenchError(f"{binary} not found: build it first with `cargo build --release` (or pass --servers globus)")
    cmd = [binary, "serve", "--listen", f"127.0.0.1:{port}", "--root", "/", "--anonymous-whole-fs", *logins, *extra]
    out_path = os.path.join(workdir, out_name)
    with open(out_path, "wb") as out:
        proc = processes.spawn(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        port = _wait_for_port_line(proc, out_path)
        wait_listening(port, proc, out_path, "ferry serve")
    except BaseException:
        processes.kill_tree(proc)
        raise
    return Server("ferry", proc, port, cmd, out_path)


def _wait_for_port_line(proc: subprocess.Popen, out_path: str) -> int:
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    while True:
        with open(out_path, "rb") as f:
            m = _LISTENING.search(f.read())
        if m:
            return int(m.group(1))
        _check_alive(proc, out_path, "ferry serve")
        if time.monotonic() > deadline:
            raise BenchError(f"ferry serve printed no 'listening on 127.0.0.1:PORT' line within {LISTEN_TIMEOUT_S:.0f} s; see {out_path}")
        time.sleep(0.05)


@contextlib.contextmanager
def running(kind: str, ctx):
    """Starts a fresh server of `kind` for one scenario and always stops it afterwards."""
    workdir = ctx.scratch(kind)
    server = start_ferry(ctx.options.ferry, workdir) if kind == "ferry" else start_globus(workdir)
    ctx.record_server(server)
    try:
        yield server
    finally:
        processes.kill_tree(server.proc)


def start_each(stack: contextlib.ExitStack, ctx, result) -> list[Server]:
    """Starts every selected server inside stack; one that fails to start is noted and left out."""
    started = []
    for kind in ctx.options.servers:
        try:
            started.append(stack.enter_context(running(kind, ctx)))
        except BenchError as e:
            ctx.failures += 1
            ctx.log(f"{result.name}: {kind} did not start: {e}")
            result.notes.append(f"{kind} did not start, not measured: {str(e).splitlines()[0]}")
    return started
