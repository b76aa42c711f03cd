"""``servesim scenario FILE.json``: the seed files' two scenario shapes, answered.

The scenario service (``servesim.services.scenario``) reads and runs the file; ``--json`` prints the
result alone on stdout; otherwise what timed the steps, a table of the answers
(``servesim.views.scenario``), the context and the reasons as sentences.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from servesim.cli.common import emit, out_option, print_timed_as, said_written
from servesim.cli.tables import FitTable
from servesim.services.scenario import read_scenario, run_scenario


def scenario_cmd(
    file: Path = typer.Argument(..., help="A scenario JSON file (either shape; see docs/tuning.md)."),
    out: Path | None = out_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the result alone on stdout."),
) -> None:
    """Answer a question in a JSON file: a request list under a batch config (p90 TTFT, TPOT, advice),
    or a load (qps, mean lengths) on a KV-block budget (STABLE/QUEUE_SATURATED); examples/inputs/."""
    answer = run_scenario(read_scenario(file))
    if emit(answer.result.model_dump(mode="json"), as_json=as_json, out=out):
        return
    from servesim.views.scenario import reason_lines, scenario_rows

    if answer.timed_as is not None:
        print_timed_as(answer.timed_as)
    console = Console()
    t = FitTable(show_header=False, title=str(file), title_justify="left")
    t.add_column("field", style="bold")
    t.add_column("value")
    for k, v in scenario_rows(answer.result):
        t.add_row(k, escape(v))
    console.print(t)
    if answer.context_line is not None:
        console.print(answer.context_line)
    for line in reason_lines(answer.result):
        console.print(f"  - {escape(line)}")
    sys.stdout.flush()
    said_written(out)


def register(app: typer.Typer) -> None:
    app.command("scenario")(scenario_cmd)
