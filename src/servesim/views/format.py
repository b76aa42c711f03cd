"""How a view's numbers are written as text, the same in every renderer (Rich, Markdown, HTML).

Why here: the CLI, the report and the web page must print ``1,234.5 ms`` the same way; formatting
from each column's kind and decimals is part of the view contract, not of one interface.
"""

from __future__ import annotations

from servesim.views.model import Cell, Column, Kpi

#: Python reprs a stored result may still hold in a text cell, as a reader writes them.
_PY_REPR = {"True": "on", "False": "off", "None": "-"}


def fmt(value: Cell, col: Column) -> str:
    """A cell as text: thousands separators, the column's decimals, '-' for missing values."""
    if value is None:
        return "-"
    if isinstance(value, bool) or col.kind == "bool":
        return "on" if value else "off"
    if col.kind == "str" or isinstance(value, str):
        return _PY_REPR.get(str(value), str(value))
    if col.kind == "int":
        return f"{int(value):,}"
    if col.kind == "pct":
        return f"{float(value):+,.1%}"
    x = float(value)
    if col.decimals >= 3:  # significant digits for rates and ratios
        return f"{x:,.{col.decimals}g}"
    return f"{x:,.{col.decimals}f}"


def header(col: Column) -> str:
    """A column's heading: its label and unit."""
    return f"{col.label} {col.unit}" if col.unit and col.kind != "pct" else col.label


def kpi_value(k: Kpi) -> str:
    """A KPI's value with its unit ('-' when it has none)."""
    if k.value is None:
        return "-"
    if k.unit == "%":
        return f"{k.value:,.{k.decimals}%}"
    return f"{k.value:,.{k.decimals}f}" + (f" {k.unit}" if k.unit else "")


def command_lines(command: str) -> str:
    """A shell command wrapped at flag boundaries (``\\`` continuations), never mid-word."""
    head, *flags = command.split(" --")
    return " \\\n    --".join([head, *flags])


__all__ = ["command_lines", "fmt", "header", "kpi_value"]
