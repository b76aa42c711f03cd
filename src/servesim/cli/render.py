"""Rich rendering of the views (``servesim.views``): the CLI's one way to print a result.

Numbers are formatted from each column's kind and decimals; a numeric column is never narrower
than its widest value (Rich wraps text columns and headers instead), so at 80 columns a table
wraps words but never cuts a number; a table too wide for the terminal is split into parts that
each repeat its first column.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from servesim.cli.tables import fit_widths
from servesim.views.format import fmt, header, kpi_value
from servesim.views.model import Kpi, Section, Table, Verdict

TEXT_MIN_WIDTH = 16  # a text column is never squeezed below its values up to this many characters
VERDICT_STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "info": "cyan"}


def _min_width(table: Table, j: int, cells: list[list[str]]) -> int:
    """A column's narrowest readable width: its widest number (or up to TEXT_MIN_WIDTH of text)
    and its header's longest word, plus Rich's padding and border."""
    col = table.columns[j]
    widest = max((len(r[j]) for r in cells), default=0)
    if col.kind == "str":
        widest = min(widest, TEXT_MIN_WIDTH)
    word = max((len(w) for w in header(col).split()), default=0)
    return max(widest, word) + 3


def split_columns(table: Table, width: int) -> list[Table]:
    """The table as one or more tables that each fit ``width``: columns packed left to right,
    each part repeating the first (key) column, so no number is ever cut."""
    cells = [[fmt(v, c) for v, c in zip(row, table.columns, strict=True)] for row in table.rows]
    widths = [_min_width(table, j, cells) for j in range(len(table.columns))]
    if sum(widths) + 1 <= width or len(table.columns) <= 2:
        return [table]
    # The key: the leading columns up to the first text column (e.g. "#" and "req_id").
    kinds = [c.kind for c in table.columns]
    nkey = kinds.index("str") + 1 if "str" in kinds[:2] else 1
    key_width = sum(widths[:nkey]) + 1
    parts: list[list[int]] = []
    current: list[int] = []
    used = key_width
    for j in range(nkey, len(widths)):
        if current and used + widths[j] > width:
            parts.append(current)
            current, used = [], key_width
        current.append(j)
        used += widths[j]
    parts.append(current)
    out = []
    for k, cols in enumerate(parts):
        keep = [*range(nkey), *cols]
        out.append(
            table.model_copy(
                update={
                    "title": table.title if k == 0 else f"(continued {k + 1}/{len(parts)})",
                    "columns": [table.columns[j] for j in keep],
                    "rows": [[row[j] for j in keep] for row in table.rows],
                    "notes": table.notes if k == len(parts) - 1 else [],
                }
            )
        )
    return out


def _natural_width(table: Table, j: int, cells: list[list[str]]) -> int:
    """A column's width with its header on one line and its text unwrapped, plus padding and
    border."""
    widest = max((len(r[j]) for r in cells), default=0)
    return max(widest, len(header(table.columns[j]))) + 3


def column_widths(table: Table, width: int) -> list[int] | None:
    """Each column's content width for a table that fits ``width`` (``fit_widths``), or None."""
    cells = [[fmt(v, c) for v, c in zip(row, table.columns, strict=True)] for row in table.rows]
    lo = [_min_width(table, j, cells) for j in range(len(table.columns))]
    hi = [_natural_width(table, j, cells) for j in range(len(table.columns))]
    sizes = fit_widths(lo, hi, width)
    return None if sizes is None else [w - 3 for w in sizes]


def rich_table(table: Table, *, show_header: bool = True, width: int | None = None) -> RichTable:
    """The Rich table of a view's table; with ``width``, its columns sized to fit it."""
    out = RichTable(title=escape(table.title), title_justify="left", show_header=show_header)
    cells = [[fmt(v, c) for v, c in zip(row, table.columns, strict=True)] for row in table.rows]
    sizes = column_widths(table, width) if width is not None else None
    for j, col in enumerate(table.columns):
        numeric = col.kind in ("int", "float", "pct", "bool")
        widest = max((len(r[j]) for r in cells), default=0)
        # Numbers keep their width; text keeps up to TEXT_MIN_WIDTH and wraps beyond; headers wrap.
        out.add_column(
            escape(header(col)),
            justify="right" if numeric else "left",
            min_width=widest if numeric else min(widest, TEXT_MIN_WIDTH),
            width=sizes[j] if sizes is not None else None,
            overflow="fold",
            style="bold" if j == 0 and not numeric else None,
        )
    for r in cells:
        out.add_row(*(escape(x) for x in r))
    return out


def kpi_line(kpis: list[Kpi]) -> str:
    parts = []
    for k in kpis:
        if k.value is None:
            continue
        text = kpi_value(k)
        mark = {"pass": " [green]✓[/green]", "fail": " [red]✗[/red]"}.get(k.verdict, "")
        parts.append(f"{escape(k.label)} {escape(text)}{mark}")
    return " · ".join(parts)


def verdict_line(v: Verdict) -> str:
    return f"[{VERDICT_STYLE[v.status]}]{escape(v.label)}[/]: {escape(v.text)}"


def print_section(
    section: Section,
    console: Console | None = None,
    *,
    tables: list[str] | None = None,
    key_value: tuple[str, ...] = ("totals", "config", "workload", "flags", "offload"),
    kpis: bool = False,
    verdicts: bool = True,
    text: bool = True,
) -> None:
    """Print a view: its tables (all, or those named), verdicts and text lines."""
    console = console or Console()
    if kpis and section.kpis:
        console.print(kpi_line(section.kpis))
    for t in section.tables:
        if tables is not None and t.key not in tables:
            continue
        for part in split_columns(t, console.width):
            console.print(rich_table(part, show_header=t.key not in key_value, width=console.width))
            for note in part.notes:
                console.print(f"note: {escape(note)}")
    if verdicts:
        for v in section.verdicts:
            console.print(verdict_line(v))
    if text:
        for line in section.text:
            console.print(escape(line), soft_wrap=True)


__all__ = ["column_widths", "fmt", "print_section", "rich_table", "split_columns"]
