"""Rich rendering of the views (``servesim.views``): the CLI's one way to print a result.

Numbers are formatted from each column's kind and decimals; a numeric column is never narrower
than its widest value (Rich wraps text columns and headers instead), so at 80 columns a table
wraps words but never cuts a number.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from servesim.views.model import Cell, Column, Kpi, Section, Table, Verdict

VERDICT_STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "info": "cyan"}


def fmt(value: Cell, col: Column) -> str:
    """A cell as text: thousands separators, the column's decimals, '-' for missing values."""
    if value is None:
        return "-"
    if isinstance(value, bool) or col.kind == "bool":
        return "on" if value else "off"
    if col.kind == "str" or isinstance(value, str):
        return str(value)
    if col.kind == "int":
        return f"{int(value):,}"
    if col.kind == "pct":
        return f"{float(value):+.1%}"
    x = float(value)
    if col.decimals >= 3:  # significant digits for rates and ratios
        return f"{x:,.{col.decimals}g}"
    return f"{x:,.{col.decimals}f}"


def header(col: Column) -> str:
    return f"{col.label} {col.unit}" if col.unit and col.kind != "pct" else col.label


def rich_table(table: Table, *, show_header: bool = True) -> RichTable:
    out = RichTable(title=escape(table.title), title_justify="left", show_header=show_header)
    cells = [[fmt(v, c) for v, c in zip(row, table.columns, strict=True)] for row in table.rows]
    for j, col in enumerate(table.columns):
        numeric = col.kind in ("int", "float", "pct")
        widest = max((len(r[j]) for r in cells), default=0)
        out.add_column(
            escape(header(col)),
            justify="right" if numeric else "left",
            no_wrap=numeric,
            min_width=widest if numeric else None,
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
        if k.unit == "%":
            text = f"{k.value:.{k.decimals}%}"
        else:
            text = f"{k.value:,.{k.decimals}f}" + (f" {k.unit}" if k.unit else "")
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
    key_value: tuple[str, ...] = ("totals", "config", "workload", "flags"),
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
        console.print(rich_table(t, show_header=t.key not in key_value))
        for note in t.notes:
            console.print(f"note: {escape(note)}")
    if verdicts:
        for v in section.verdicts:
            console.print(verdict_line(v))
    if text:
        for line in section.text:
            console.print(escape(line), soft_wrap=True)


__all__ = ["fmt", "print_section", "rich_table"]
