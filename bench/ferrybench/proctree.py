"""A server's process tree from /proc: its descendants, CPU time and proportional memory (PSS)."""

import os
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat from field 3 (state) on; the comm field may hold spaces."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data[data.rindex(")") + 2 :].split()


def descendants(pid: int) -> list[int]:
    """Every live descendant of pid (children, grandchildren, ...), found by scanning /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is None:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by pid's whole tree, dead members included.

    For each live process of the tree we add utime+stime (fields 14-15, its own threads) and
    cutime+cstime (fields 16-17, the children it has already reaped). A Globus daemon forks one
    child per session and reaps it when the session ends, so a finished session's time moves from
    the child's utime/stime into the daemon's cutime/cstime: the sum is monotonic and counts each
    tick once. Reading the children's stat while they live would miss their last moments, and the
    daemon's c-times alone would miss sessions still running; the sum has neither gap. It only
    loses a child whose parent died first (reparented to init), which does not happen to a
    running daemon. Callers wait until the session children have been reaped before the final
    reading (see wait_for_children), so no tick is still in flight.
    """
    total = 0
    for member in [pid, *descendants(pid)]:
        fields = _stat_fields(member)
        if fields is None:
            continue
        total += sum(int(x) for x in fields[11:15])
    return total / CLK_TCK


def wait_for_children(pid: int, expected: set[int], timeout: float = 10.0) -> bool:
    """Waits until pid's live descendants are no more than `expected`; True when they are."""
    deadline = time.monotonic() + timeout
    while True:
        extra = set(descendants(pid)) - expected
        if not extra:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def pss_kib(pid: int) -> int:
    """Proportional set size of one process in KiB (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def tree_pss_kib(pid: int) -> tuple[int, int]:
    """PSS summed over pid and all its descendants, in KiB, and how many processes that was."""
    members = [pid, *descendants(pid)]
    return sum(pss_kib(p) for p in members), len(members)
