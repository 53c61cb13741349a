"""Medians and spreads of repeated measurements."""

import statistics
from dataclasses import dataclass


@dataclass
class Summary:
    """The median of some samples and their range; `n` is how many there were."""

    median: float
    low: float
    high: float
    n: int

    def cell(self, digits: int = 2) -> str:
        """`median (low–high)`, or just the median for one sample."""
        if self.n == 0:
            return "—"
        if self.n == 1:
            return f"{self.median:.{digits}f}"
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}–{self.high:.{digits}f})"


def summarize(samples) -> Summary:
    """Summarises finite samples; an empty list gives a Summary that prints as a dash."""
    xs = [x for x in samples if x is not None and x == x]
    if not xs:
        return Summary(float("nan"), float("nan"), float("nan"), 0)
    return Summary(statistics.median(xs), min(xs), max(xs), len(xs))


def ratio(a: Summary, b: Summary) -> float:
    """a's median over b's, NaN where either is missing."""
    if a.n == 0 or b.n == 0 or b.median == 0:
        return float("nan")
    return a.median / b.median
