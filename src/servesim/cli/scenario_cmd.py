"""``servesim scenario FILE.json``: the seed files' two scenario shapes, answered.

A request list under a batch config (p90 TTFT, TPOT, advice), or a load (qps, mean lengths) on a
KV-block budget (STABLE / QUEUE_SATURATED, with what would make it stable); examples/inputs/.
``--json`` prints the result alone on stdout; errors are one line on stderr with exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from servesim.cli.capacity_render import ERRORS
from servesim.cli.common import emit, fail, out_option, print_timed_as, said_written
from servesim.cli.tables import FitTable
from servesim.tuning import load_scenario_file, run_scenario
from servesim.tuning.scenario import BatchScenarioResult


def register(app: typer.Typer) -> None:
    @app.command("scenario")
    def scenario_cmd(
        file: Path = typer.Argument(..., help="A scenario JSON file (either shape; see docs/tuning.md)."),
        out: Path | None = out_option(),
        as_json: bool = typer.Option(False, "--json", help="Print the result alone on stdout."),
    ) -> None:
        """Answer a question in a JSON file: a request list under a batch config (p90 TTFT, TPOT, advice),
        or a load (qps, mean lengths) on a KV-block budget (STABLE/QUEUE_SATURATED); examples/inputs/."""
        try:
            result = run_scenario(load_scenario_file(file))
        except ERRORS as exc:
            fail(exc)
        if emit(result.model_dump(mode="json"), as_json=as_json, out=out):
            return
        hw_info = result.details.get("hardware", {}) if result.details else {}
        if hw_info:
            # The memory model sizes the blocks when the scenario states none: the count it found.
            blocks = result.details.get("num_gpu_blocks") or hw_info.get("num_gpu_blocks")
            kv = f"{blocks:,} KV blocks" if isinstance(blocks, int) else "KV blocks as vLLM sizes them"
            print_timed_as(
                f"{hw_info.get('model')} on {hw_info.get('tensor_parallel_size', 1)} x {hw_info.get('gpu')}, "
                f"roofline step times; {kv}"
            )
        console = Console()
        t = FitTable(show_header=False, title=str(file), title_justify="left")
        t.add_column("field", style="bold")
        t.add_column("value")
        data: dict[str, Any] = result.model_dump(mode="json", exclude={"details"})
        if isinstance(result, BatchScenarioResult) and result.simulated_batch_count == 0:
            data = {k: ("no requests" if k.startswith("estimated_") else v) for k, v in data.items()}
        for k, v in data.items():
            t.add_row(k, f"{v:,.1f}" if isinstance(v, float) else str(v))
        console.print(t)
        if not isinstance(result, BatchScenarioResult) or result.details:
            d = result.details
            console.print(
                f"context: {d.get('hardware', {}).get('model')} on {d.get('hardware', {}).get('gpu')}, "
                f"{d.get('num_gpu_blocks'):,} KV blocks, max_model_len {d.get('max_model_len')}"
            )
        if not isinstance(result, BatchScenarioResult):
            from rich.markup import escape

            from servesim.views.reasons import reason_text

            for r in result.reasons:
                console.print(f"  - {escape(reason_text(r))}")
        sys.stdout.flush()
        said_written(out)
