"""Byte sizes on the command line and rates in the report."""

import re

_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """Parses `4G`, `512M`, `65536`, `2GiB` (binary multiples) into bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 4G, 512M, 1048576)")
    return int(m.group(1)) * _SUFFIXES[m.group(2).upper()]


def format_size(n: int) -> str:
    """Shows a byte count the way it was most likely given: 4 GiB, 512 MiB, 1000 B."""
    for suffix, unit in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {suffix}"
    return f"{n} B"


def gb_per_s(n_bytes: float, seconds: float) -> float:
    """Decimal GB/s, the unit of the benchmark method's anchors."""
    return n_bytes / seconds / 1e9 if seconds > 0 else float("nan")


def fmt(x, digits: int = 2) -> str:
    """A number for a table cell; a dash where there is none."""
    if x is None or x != x:
        return "—"
    return f"{x:.{digits}f}"
