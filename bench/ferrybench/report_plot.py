"""The PNG plot: one panel of grouped bars per scenario that has one."""

import math

from .results import Panel

COLORS = {"ferry": "#d95f02", "globus": "#1b9e77", "iperf3": "#9e9e9e"}
# Variants of a subject ("globus pair", "globus -fast -cc 4") get their own shade of its colour.
SHADES = {"globus": ["#1b9e77", "#66c2a5", "#0b5e47"], "ferry": ["#d95f02", "#fc8d62", "#8c3c01"]}
# Panels per row; four or fewer stay in one row, as before.
COLUMNS = 4


def render_png(panels: list[Panel], path: str, title: str) -> bool:
    """Draws the panels side by side into path; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels = [p for p in panels if p is not None]
    if not panels:
        return False
    cols = min(len(panels), COLUMNS)
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4.5 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, panel in zip(flat, panels):
        _draw(ax, panel)
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _color(subject: str, used: dict[str, int]):
    """The subject's colour; a variant of ferry/globus takes the next shade of that colour."""
    if subject in COLORS:
        return COLORS[subject]
    family = subject.split()[0] if subject.split() else subject
    if family in SHADES:
        i = used.get(family, 0)
        used[family] = i + 1
        return SHADES[family][i % len(SHADES[family])]
    return None


def _draw(ax, panel: Panel) -> None:
    subjects = list(panel.bars)
    used: dict[str, int] = {}
    width = 0.8 / max(len(subjects), 1)
    for i, subject in enumerate(subjects):
        xs = [g + (i - (len(subjects) - 1) / 2) * width for g in range(len(panel.groups))]
        meds = [s.median if s.n else 0.0 for s in panel.bars[subject]]
        lo = [s.median - s.low if s.n > 1 else 0.0 for s in panel.bars[subject]]
        hi = [s.high - s.median if s.n > 1 else 0.0 for s in panel.bars[subject]]
        spread = [lo, hi] if any(s.n > 1 for s in panel.bars[subject]) else None
        bars = ax.bar(xs, meds, width, yerr=spread, capsize=3, label=subject,
                      color=_color(subject, used), error_kw={"elinewidth": 1})
        for bar, s in zip(bars, panel.bars[subject]):
            if s.n and not math.isnan(s.median):
                ax.annotate(f"{s.median:.0f}" if panel.counts else _short(s.median),
                            (bar.get_x() + bar.get_width() / 2, s.high),
                            ha="center", va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    if panel.log_scale:
        ax.set_yscale("log")
    ax.set_xlim(-0.75, len(panel.groups) - 0.25)
    ax.set_xticks(range(len(panel.groups)))
    ax.set_xticklabels(panel.groups)
    ax.set_xlabel(panel.xlabel or ("sessions" if "session" in panel.ylabel else "streams"))
    ax.set_ylabel(panel.ylabel)
    ax.set_title(panel.title + (" (log scale)" if panel.log_scale else ""))
    if panel.counts:
        top = max((s.high for bars in panel.bars.values() for s in bars if s.n), default=1.0)
        ax.set_ylim(0, max(top, 1.0) * 1.35)
        ax.legend(fontsize=8, loc="upper center", ncol=len(subjects))
    else:
        ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def _short(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.2f}"
