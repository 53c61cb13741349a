"""Scenarios, run in this order: the iperf3 limit first, so later tables can quote it."""

from . import iperf, mem, disk, idle  # noqa: F401  (importing registers them)
from .registry import SCENARIOS

__all__ = ["SCENARIOS"]
