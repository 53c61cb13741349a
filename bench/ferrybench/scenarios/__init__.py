"""Scenarios, run in this order: the iperf3 limit first, so later tables can quote it.

The server scenarios (mem, disk, idle) drive both servers with globus-url-copy; the client
scenarios after them compare client+server pairs (ferry copy + ferry serve against
globus-url-copy + globus-gridftp-server), the cost of ferry's default verification and CKSM
latency (integrity), and ferry's restart after a server crash.
"""

from . import iperf, mem, disk, idle  # noqa: F401  (importing registers them)
from . import client_mem, client_disk, small_files, integrity, restart, netlab, wan, security, striping, gcp, service, quic, multilink, udt, https, tokens, tpc  # noqa: F401
from .registry import SCENARIOS

__all__ = ["SCENARIOS"]
