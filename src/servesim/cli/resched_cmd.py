"""``servesim reschedule``: order interrupted requests for re-admission and project their SLAs.

Reads the seeds' JSON object (``batch_capacity`` + ``interrupted_requests``, optional context)
or a bare list of requests with ``--batch-capacity``. Flags win over the file's context.
``--json`` prints the plan alone on stdout (deterministic); otherwise a Rich table.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from servesim.cli.common import emit, out_option, print_timed_as, said_written, timed_as
from servesim.errors import InputError
from servesim.report.documents import stamped
from servesim.resched import Policy, parse_input, reschedule


def register(app: typer.Typer) -> None:
    @app.command("reschedule")
    def reschedule_cmd(
        file: Path = typer.Argument(..., help="JSON: {batch_capacity, interrupted_requests} or a list."),
        policy: Policy | None = typer.Option(None, help="Re-admission order (default: sla-aware)."),
        batch_capacity: int | None = typer.Option(None, help="Batch slots (required for a bare list)."),
        block_size: int | None = typer.Option(None, help="Tokens per KV block (default 16)."),
        max_num_batched_tokens: int | None = typer.Option(
            None, help="Token budget of one step (default max(2048, batch capacity))."
        ),
        cache_survives: bool | None = typer.Option(
            None,
            "--cache-survives/--no-cache-survives",
            help="Assume the requests' KV blocks are still cached (default) or all evicted.",
        ),
        step_time_ms: float | None = typer.Option(
            None, help="Every step takes this long (overrides --model/--gpu/--tp)."
        ),
        model: str | None = typer.Option(
            None, help="Model timing the steps (servesim perf models; default llama-3.1-8b)."
        ),
        gpu: str | None = typer.Option(None, help="GPU (servesim perf gpus; default h100)."),
        tp: int | None = typer.Option(None, help="Tensor-parallel degree (default 1)."),
        out: Path | None = out_option(),
        as_json: bool = typer.Option(False, "--json", help="Print the plan alone as JSON on stdout."),
    ) -> None:
        """Re-admission order of interrupted requests, prefix-cache savings and projected SLA misses."""
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputError(f"{file}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        inp = parse_input(
            data,
            policy=policy,
            batch_capacity=batch_capacity,
            block_size=block_size,
            max_num_batched_tokens=max_num_batched_tokens,
            cache_survives=cache_survives,
            step_time_ms=step_time_ms,
            model=model,
            gpu=gpu,
            tp=tp,
        )
        plan = reschedule(inp)
        if emit(stamped("reschedule", plan.model_dump(mode="json")), as_json=as_json, out=out):
            return
        print_timed_as(timed_as(plan.step_time_model))
        from servesim.cli.render import print_section
        from servesim.views.resched import resched_view

        print_section(resched_view(plan, f"{file.name}: re-admission order ({plan.policy.value})"))
        said_written(out)
