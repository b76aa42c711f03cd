"""Presentation-neutral building blocks: what a result *shows*, not how it is drawn.

Every interface (the Rich CLI, the HTML/Markdown report, the web page, the terminal dashboard)
renders these; none of them computes a figure of its own. They are frozen Pydantic models, so a
view is JSON (`model_dump(mode="json")`) for the web API and byte-identical for the same inputs.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

Cell = float | int | str | bool | None
ColumnKind = Literal["int", "float", "str", "pct", "bool"]
VerdictStatus = Literal["pass", "warn", "fail", "info"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Column(_Frozen):
    """A table column: its values' kind and unit (renderers format numbers from these)."""

    key: str
    label: str
    unit: str | None = None
    kind: ColumnKind = "float"
    decimals: int = 1
    help: str | None = Field(None, description="How the figure is defined (the '?' of the interfaces).")


class Table(_Frozen):
    key: str
    title: str
    columns: list[Column]
    rows: list[list[Cell]]
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _rows_fit(self) -> Table:
        """Every row has one cell per column: a document's table read back (``servesim report``,
        the web) is refused naming the table and the row, not a renderer's zip() traceback."""
        n = len(self.columns)
        for i, row in enumerate(self.rows):
            if len(row) != n:
                raise ValueError(
                    f"table {self.key!r} ({self.title}): row {i + 1} has {len(row)} cells for its {n} columns"
                )
        return self

    @classmethod
    def figures(cls, key: str, title: str, rows: list[list[Cell]], notes: list[str] | None = None) -> Table:
        """A two-column "figure | value" table (totals, the workload, the CPU tier)."""
        columns = [
            Column(key="what", label="figure", kind="str"),
            Column(key="value", label="value", kind="str"),
        ]
        return cls(key=key, title=title, columns=columns, rows=rows, notes=notes or [])

    def column(self, key: str) -> list[Cell]:
        """The values of one column, by key."""
        j = [c.key for c in self.columns].index(key)
        return [row[j] for row in self.rows]


class Line(_Frozen):
    """Another y over a series' x (p50 and p90 next to the p99 of the same rates), or over its own
    ``x`` (another run's curve overlaid: its own rates or times)."""

    label: str
    y: list[float]
    x: list[float] | None = Field(None, description="This line's own x (None: the series' x).")


class Mark(_Frozen):
    """A vertical line at ``x`` with its label (the SLO knee, the unstable rate)."""

    x: float
    label: str


class Span(_Frozen):
    """A shaded stretch of x from ``x0`` to ``x1`` with its label (a replica's outage)."""

    x0: float
    x1: float
    label: str


class Series(_Frozen):
    """y against x (already down-sampled: renderers draw every point)."""

    key: str
    title: str
    x_label: str
    x_unit: str | None
    y_label: str
    y_unit: str | None
    x: list[float]
    y: list[float]
    kind: Literal["line", "step", "bar", "scatter"] = "line"
    reference: float | None = Field(None, description="A horizontal line to draw (a limit or an SLO).")
    reference_label: str | None = None
    help: str | None = None
    lines: list[Line] = Field(default_factory=list, description="More y over the same x, labelled.")
    marks: list[Mark] = Field(default_factory=list, description="Vertical lines at x, labelled.")
    spans: list[Span] = Field(default_factory=list, description="Shaded stretches of x, labelled.")
    log_y: bool = Field(False, description="Draw y on a log axis (latencies over decades).")
    categories: list[str] = Field(
        default_factory=list, description="Labels of x when x only index categories (0, 1, 2 ...)."
    )
    name: str | None = Field(None, description="The legend name of y (else y_label).")
    stacked: bool = Field(
        False, description="Bars: ``lines`` stacked on y (parts of one whole), not side by side."
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``spans`` key when there are none, no ``stacked`` when not stacked: a series without
        either dumps as before."""
        out: dict[str, Any] = handler(self)
        if not self.spans:
            out.pop("spans", None)
        if not self.stacked:
            out.pop("stacked", None)
        return out


class Histogram(_Frozen):
    """Counts between bin edges (len(edges) == len(counts) + 1), with the SLO to draw."""

    key: str
    title: str
    unit: str | None
    edges: list[float]
    counts: list[int]
    count: int
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    slo: float | None = None
    help: str | None = None
    label: str | None = Field(None, description="What the x axis measures (else the title).")
    count_label: str = Field("requests", description="What the counts count (the y axis).")
    reference: float | None = Field(None, description="A vertical limit to draw (a budget).")
    reference_label: str | None = None


class Kpi(_Frozen):
    """One headline figure; ``verdict`` compares it with its SLO when there is one."""

    key: str
    label: str
    value: float | None
    unit: str | None
    decimals: int = 1
    slo: float | None = None
    verdict: Literal["pass", "fail", "none"] = "none"
    help: str | None = None


class Verdict(_Frozen):
    key: str
    label: str
    status: VerdictStatus
    text: str


_T = TypeVar("_T", Table, Series, Histogram, Kpi)


class Section(_Frozen):
    """One view: KPIs, tables, charts and verdicts about one result."""

    key: str
    title: str
    kpis: list[Kpi] = Field(default_factory=list)
    tables: list[Table] = Field(default_factory=list)
    series: list[Series] = Field(default_factory=list)
    histograms: list[Histogram] = Field(default_factory=list)
    verdicts: list[Verdict] = Field(default_factory=list)
    text: list[str] = Field(default_factory=list)

    def table(self, key: str) -> Table:
        return _by_key(self.tables, key)

    def chart(self, key: str) -> Series:
        return _by_key(self.series, key)

    def histogram(self, key: str) -> Histogram:
        return _by_key(self.histograms, key)

    def kpi(self, key: str) -> Kpi:
        return _by_key(self.kpis, key)


def _by_key(items: list[_T], key: str) -> _T:
    for item in items:
        if item.key == key:
            return item
    raise KeyError(f"no {key!r} in this view (has: {', '.join(i.key for i in items)})")


__all__ = [
    "Cell",
    "Column",
    "Histogram",
    "Kpi",
    "Line",
    "Mark",
    "Section",
    "Series",
    "Span",
    "Table",
    "Verdict",
]
