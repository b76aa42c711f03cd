"""``servesim report INPUT... [--out DIR] [--format html,md,pdf]``: the schedule recommendation
report over saved ``--json`` results (which command wrote each is told from its shape); two
results of the same kind are compared first (``servesim report A B``)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer
from rich.console import Console

from servesim.cli.actions import note_output
from servesim.cli.common import fail, print_json
from servesim.errors import InputError, user_errors


def command_line() -> str:
    """What was typed, for the report's provenance (program name normalised to ``servesim``)."""
    return shlex.join(["servesim", *sys.argv[1:]])


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report_cmd(
        inputs: list[Path] = typer.Argument(
            ...,
            metavar="INPUT...",
            help="--json outputs of simulate, saturate, tune, cluster, recover, reschedule, advise, "
            "trace inspect (or a recommendation.json).",
        ),
        out: Path = typer.Option(
            Path("."),
            "--out",
            "-o",
            help="Folder for report.html / report.md / report.pdf (default: the current folder). A "
            "report already there is never replaced silently: the command stops and names it; give "
            "another --out, or --force.",
        ),
        force: bool = typer.Option(
            False, "--force", help="Replace the report.* files already in the --out folder."
        ),
        formats: str = typer.Option("html,md", "--format", "-f", help="Comma-separated: html, md, pdf."),
        compare: bool = typer.Option(
            True, "--compare/--no-compare", help="Two results of the same kind: show what changed first."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print {files, inputs} alone on stdout."),
    ) -> None:
        """Write the schedule recommendation report (HTML, Markdown, PDF) over saved results."""
        from servesim.report import (
            build_report,
            check_formats,
            existing_outputs,
            read_inputs,
            write_rendered,
        )

        try:
            fmts = check_formats(formats.split(","))
            there = [] if force else existing_outputs(out, fmts)
            if there:
                raise InputError(
                    f"{', '.join(p.name for p in there)} already in {out.resolve()} (a previous report): "
                    "not replaced; give --out NEW_FOLDER for this report, or --force to replace it"
                )
            docs = read_inputs(inputs)
            report = build_report(docs, command_line=command_line(), compare=compare)
            written = write_rendered(report, out, fmts)
        except user_errors() as exc:
            fail(exc)
        for p in written:
            note_output(p)
        if as_json:
            print_json(
                {
                    "files": [str(p) for p in written],
                    "inputs": [{"name": d.name, "kind": d.kind, "digest": d.digest} for d in docs],
                }
            )
            return
        console = Console()
        for d in docs:
            console.print(f"read {d.name}: {d.kind}")
        for p in written:
            console.print(f"written: {p}", soft_wrap=True)
