"""``servesim demo``: the whole workflow end to end, on bundled real traces and synthetic ones.

Why: before a platform engineer trusts a recommendation they want to see every step work on
data they can check. The demo runs, through the library (no subprocesses): ingest and inspect
(Azure's 2023 conversation trace, a synthetic bursty trace), one simulation of the real hour on
the default deployment (Llama-3.1-8B, one H100), a saturation sweep, a small tuning study with
its re-verified recommendation, a three-replica cluster with a node failure and the recovery
decisions for its interrupted requests, the rescheduling of those requests (aging the
repeatedly preempted ones), the advisor (rules, or Claude when ANTHROPIC_API_KEY is set) and the
report. Every result is written as the matching command's ``--json`` document, so
``servesim report`` reads them back; seeds are fixed, so the JSON and Markdown are byte-identical
from run to run (what ``make examples`` commits).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from servesim.cli.actions import current_action, note_output
from servesim.cli.common import fail, print_json
from servesim.errors import shown
from servesim.paths import data_dir

DEMO_DIR = "demo"
SLO_TEXT = "ttft_p99_ms=1000,tpot_p99_ms=100"


def default_out() -> Path:
    return data_dir() / DEMO_DIR


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo_cmd(
        out: Path | None = typer.Option(
            None, "--out", "-o", help="Folder for every output (default: the data folder's demo/)."
        ),
        advisor: str = typer.Option(
            "auto", help="claude | rules | auto (Claude if ANTHROPIC_API_KEY is set, else the rules)."
        ),
        formats: str = typer.Option("html,md", "--format", help="Report formats: html, md, pdf."),
        as_json: bool = typer.Option(
            False, "--json", help="Print {out_dir, files, headline} alone on stdout."
        ),
    ) -> None:
        """The whole workflow end to end on bundled data (Azure 2023 + synthetic traces): ingest,
        simulate, saturate, tune, a node failure and its recovery, rescheduling, the advisor and
        the report. Prints where everything went."""
        from servesim.cli.demo_steps import STEPS, run_demo
        from servesim.errors import user_errors
        from servesim.report import check_formats

        if advisor not in ("auto", "claude", "rules"):
            fail(f"--advisor {shown(advisor)}: use claude, rules or auto")
        try:
            fmts = check_formats(formats.split(","))
        except user_errors() as exc:
            fail(exc)
        folder = out or default_out()
        t0 = time.perf_counter()
        try:
            with progress(len(STEPS), show=not as_json) as on_step:
                run = run_demo(folder, advisor=advisor, formats=fmts, on_step=on_step)
        except user_errors() as exc:
            fail(exc)
        handle = current_action()
        for p in run.files.values():
            note_output(p)
        if handle is not None and run.advisor_usage is not None:
            handle.advisor = run.advisor_usage
        elapsed = time.perf_counter() - t0
        if as_json:
            print_json(
                {
                    "out_dir": str(folder),
                    "files": {k: str(v) for k, v in run.files.items()},
                    "headline": run.headline,
                }
            )
            return
        console = Console()
        for line in run.lines:
            console.print(line, soft_wrap=True)
        console.print(f"\n[bold]done in {elapsed:,.0f} s[/bold]; everything is under {folder}:")
        width = max(len(k) for k in run.files)
        for key, path in run.files.items():
            console.print(f"  {key.ljust(width)}  {path}", soft_wrap=True)
        report = run.files.get("report.html")
        if report is not None:
            console.print(f"\nopen the report: file://{report.resolve()}", soft_wrap=True)


@contextmanager
def progress(total: int, *, show: bool) -> Iterator[Callable[[str], None] | None]:
    """A progress bar over the steps on stderr (only for a person at a terminal)."""
    if not show or not sys.stderr.isatty():
        yield None
        return
    with Progress(
        TextColumn("[bold]{task.description:<40}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task("demo", total=total)
        started = False

        def on_step(label: str) -> None:
            nonlocal started
            if started:
                bar.advance(task)
            started = True
            bar.update(task, description=label)

        yield on_step
        bar.update(task, completed=total, description="done")
