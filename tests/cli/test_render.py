"""At 80 columns the CLI wraps words and splits wide tables, but never cuts a number."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from servesim.cli.render import fmt, print_section
from servesim.views.model import Column, Section, Table


def _render(section: Section, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    print_section(section, console)
    return console.export_text()


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 14),
    st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=1, max_size=60),
    st.sampled_from([60, 80, 120]),
)
def test_every_number_is_shown_whole(ncols: int, values: list[float], width: int) -> None:
    cols = [Column(key="id", label="request id", kind="str")] + [
        Column(key=f"c{j}", label=f"metric number {j}", unit="ms", decimals=1) for j in range(ncols)
    ]
    rows = [[f"req-{i}", *(values[(i + j) % len(values)] for j in range(ncols))] for i in range(4)]
    table = Table(key="t", title="a wide table", columns=cols, rows=rows)
    text = _render(Section(key="s", title="s", tables=[table]), width)
    assert max(len(line) for line in text.splitlines()) <= width
    for row in rows:
        for v, c in zip(row, cols, strict=True):
            assert fmt(v, c) in text  # whole, on one line


def test_missing_values_show_as_a_dash() -> None:
    t = Table(
        key="t",
        title="t",
        columns=[Column(key="a", label="a"), Column(key="b", label="b")],
        rows=[[None, 1.25]],
    )
    text = _render(Section(key="s", title="s", tables=[t]), 80)
    assert "-" in text and "1.2" in text
