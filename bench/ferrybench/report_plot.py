"""The PNG plot: one panel of grouped bars per scenario that has one."""

import math

from .results import Panel

COLORS = {"ferry": "#d95f02", "globus": "#1b9e77", "iperf3": "#9e9e9e"}


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
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.5), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        _draw(ax, panel)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _draw(ax, panel: Panel) -> None:
    subjects = list(panel.bars)
    width = 0.8 / max(len(subjects), 1)
    for i, subject in enumerate(subjects):
        xs = [g + (i - (len(subjects) - 1) / 2) * width for g in range(len(panel.groups))]
        meds = [s.median if s.n else 0.0 for s in panel.bars[subject]]
        lo = [s.median - s.low if s.n > 1 else 0.0 for s in panel.bars[subject]]
        hi = [s.high - s.median if s.n > 1 else 0.0 for s in panel.bars[subject]]
        spread = [lo, hi] if any(s.n > 1 for s in panel.bars[subject]) else None
        bars = ax.bar(xs, meds, width, yerr=spread, capsize=3, label=subject,
                      color=COLORS.get(subject, None), error_kw={"elinewidth": 1})
        for bar, s in zip(bars, panel.bars[subject]):
            if s.n and not math.isnan(s.median):
                ax.annotate(_short(s.median), (bar.get_x() + bar.get_width() / 2, s.high),
                            ha="center", va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
    if panel.log_scale:
        ax.set_yscale("log")
    ax.set_xlim(-0.75, len(panel.groups) - 0.25)
    ax.set_xticks(range(len(panel.groups)))
    ax.set_xticklabels(panel.groups)
    ax.set_xlabel("sessions" if "session" in panel.ylabel else "streams")
    ax.set_ylabel(panel.ylabel)
    ax.set_title(panel.title + (" (log scale)" if panel.log_scale else ""))
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def _short(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.2f}"
