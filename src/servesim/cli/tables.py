"""Rich tables that fit a terminal without cutting a number.

Rich shortens a too-wide table by cutting cells with "…" (``2,725…``). ``FitTable`` keeps every
cell whole: each column is at least as wide as its longest word (a number is one word) and
folds text at spaces; when even that is too wide for the terminal, the table's cells are shown
one record per block ("field: value" lines) instead of being cut.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text


def _plain(cell: Any) -> str:
    return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain


def _longest_word(cell: Any) -> int:
    return max((len(w) for w in _plain(cell).split()), default=0)


def fit_widths(lo: list[int], hi: list[int], width: int) -> list[int] | None:
    """Column widths (padding and border included) that fit ``width``: each column's minimum
    ``lo`` plus the room left, given first to the columns that need least to reach their natural
    width ``hi``; None when the minimums do not fit. Rich's own layout cut the last column of a
    table whose minimum was exactly the terminal's width, so servesim sizes the columns."""
    if sum(lo) + 1 > width:
        return None
    room = width - 1 - sum(lo)
    out = list(lo)
    for j in sorted(range(len(lo)), key=lambda j: (hi[j] - lo[j], j)):
        extra = min(room, max(0, hi[j] - lo[j]))
        out[j] += extra
        room -= extra
    return out


class FitTable(Table):
    """A ``rich.table.Table`` that never cuts a word (numbers included) to fit the width."""

    def add_column(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("overflow", "fold")
        super().add_column(*args, **kwargs)
        col = self.columns[-1]
        col.min_width = max(col.min_width or 0, _longest_word(col.header))

    def add_row(self, *cells: Any, **kwargs: Any) -> None:
        super().add_row(*cells, **kwargs)
        for col, cell in zip(self.columns, cells, strict=False):
            col.min_width = max(col.min_width or 0, _longest_word(cell))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lo = [(c.min_width or 1) + 3 for c in self.columns]
        hi = [max(len(_plain(x)) for x in (c.header, *c._cells)) + 3 for c in self.columns]
        sizes = fit_widths(lo, hi, options.max_width)
        if sizes is not None or not self.show_header:
            for c, w in zip(self.columns, sizes or [], strict=False):
                c.width = w - 3
            yield from super().__rich_console__(console, options)
            return
        if self.title:
            yield Text.from_markup(str(self.title), style="bold")
        headers = [Text.from_markup(str(c.header)).plain for c in self.columns]
        for i in range(self.row_count):
            parts = []
            for name, col in zip(headers, self.columns, strict=True):
                cell = col._cells[i]
                value = cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain
                parts.append(f"{name}: {value}")
            yield Text("  " + "; ".join(parts))
        if self.caption:
            yield Text.from_markup(str(self.caption), style="dim")


__all__ = ["FitTable", "fit_widths"]
