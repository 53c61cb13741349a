"""What a scenario hands to the report: tables, a plot panel, commands and notes."""

from dataclasses import dataclass, field

from .stats import Summary


@dataclass
class Table:
    """A markdown table: a title, column headers and rows of already formatted cells."""

    title: str
    header: list[str]
    rows: list[list[str]]


@dataclass
class Panel:
    """One plot panel of grouped bars: per subject (ferry, globus, iperf3) one Summary per group."""

    title: str
    ylabel: str
    groups: list[str]
    bars: dict[str, list[Summary]]
    log_scale: bool = False
    xlabel: str | None = None  # default: "sessions" for per-session panels, else "streams"
    counts: bool = False  # whole numbers (restart tries): integer labels, room above for the legend


@dataclass
class ScenarioResult:
    """Everything one scenario measured and how."""

    name: str
    title: str
    method: str
    commands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    panel: Panel | None = None
    summaries: dict[tuple[str, str], Summary] = field(default_factory=dict)
    raw: list[dict] = field(default_factory=list)
