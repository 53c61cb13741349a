"""Runs one client command and measures its wall time and its own CPU time."""

import os
import subprocess
import threading
import time
from dataclasses import dataclass

from . import processes


@dataclass
class TimedRun:
    """What one client run cost: exit code, wall seconds, CPU seconds, and what it printed."""

    returncode: int
    wall_s: float
    user_s: float
    sys_s: float
    output: str

    @property
    def cpu_s(self) -> float:
        """User plus system CPU seconds of the client (and any child it reaped)."""
        return self.user_s + self.sys_s


def run_timed(cmd: list[str], timeout: float, log_path: str) -> TimedRun:
    """Runs cmd to completion, its output going to log_path.

    CPU time comes from wait4() on this very child, which is exact and cannot pick up any other
    process the runner reaps (unlike deltas of RUSAGE_CHILDREN). On timeout the client's process
    group is killed and the run reports returncode 124.
    """
    with open(log_path, "wb") as log:
        start = time.monotonic()
        proc = processes.spawn(cmd, stdout=log, stderr=subprocess.STDOUT)
        timed_out = threading.Event()

        def on_timeout():
            timed_out.set()
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, on_timeout)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.monotonic() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
            processes.forget(proc)
        finally:
            timer.cancel()
            if proc.returncode is None:
                processes.kill_tree(proc, grace=0.5)
    with open(log_path, "rb") as log:
        output = log.read()[-4000:].decode("utf-8", "replace")
    code = 124 if timed_out.is_set() else proc.returncode
    return TimedRun(code, wall, usage.ru_utime, usage.ru_stime, output)
