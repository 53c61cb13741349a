"""Child processes in their own process groups, always reaped and killed on the way out.

Every server and client is started in a new session, so a Ctrl-C in the terminal reaches only the
runner, which then kills each group itself (and any straggler by PID) in its finally blocks; the
atexit hook is the last resort for anything a finally did not reach.
"""

import atexit
import os
import signal
import subprocess
import time

from . import proctree

_live: dict[int, subprocess.Popen] = {}


def spawn(cmd, **kwargs) -> subprocess.Popen:
    """Starts cmd in a new session (its own process group) and remembers it for cleanup."""
    proc = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL, **kwargs)
    _live[proc.pid] = proc
    return proc


def forget(proc: subprocess.Popen) -> None:
    """Stops tracking a process that has been waited for."""
    _live.pop(proc.pid, None)


def kill_tree(proc: subprocess.Popen, grace: float = 3.0) -> None:
    """Ends proc, its process group and every descendant, then reaps proc.

    Globus forks one session child per connection. Those are killed first, by PID, while the
    daemon is alive to reap them (orphans would wait on init); then the daemon's group goes.
    """
    if proc.poll() is None:
        sessions = proctree.descendants(proc.pid)
        for pid in sessions:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace
        while sessions and proctree.descendants(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        stragglers = proctree.descendants(proc.pid)
        _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        _signal_group(proc.pid, signal.SIGKILL)
        for pid in stragglers:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    else:
        _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    forget(proc)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_all() -> None:
    """Kills everything still tracked; registered with atexit."""
    for proc in list(_live.values()):
        kill_tree(proc, grace=1.0)


def _raise_interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def install_signal_handlers() -> None:
    """Makes SIGTERM and SIGHUP unwind like Ctrl-C, so every finally block runs.

    SIGINT is set too, because a shell starting the runner in the background ignores it.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGHUP, _raise_interrupt)


atexit.register(kill_all)
