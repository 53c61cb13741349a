#!/usr/bin/env python3
"""Benchmarks ferry against globus-gridftp-server and iperf3: `python3 bench/run.py --help`."""

import os
import subprocess
import sys

SYSTEM_PYTHON = "/usr/bin/python3"


def _use_python_with_matplotlib() -> None:
    """Re-runs under Debian's python3 when this interpreter (pyenv, say) lacks matplotlib.

    The plot needs python3-matplotlib, a Debian package, which only the system interpreter sees.
    """
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    if os.environ.get("FERRYBENCH_REEXEC") or not os.path.exists(SYSTEM_PYTHON):
        return
    if os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON):
        return
    if subprocess.run([SYSTEM_PYTHON, "-c", "import matplotlib"], capture_output=True).returncode != 0:
        return
    os.environ["FERRYBENCH_REEXEC"] = "1"
    os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__), *sys.argv[1:]])


if __name__ == "__main__":
    _use_python_with_matplotlib()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ferrybench.main import main

    sys.exit(main(sys.argv[1:]))
