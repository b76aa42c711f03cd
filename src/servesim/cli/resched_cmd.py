"""``servesim reschedule``: order interrupted requests for re-admission and project their SLAs.

Reads the seeds' JSON object (``batch_capacity`` + ``interrupted_requests``, optional context)
or a bare list of requests with ``--batch-capacity``, and asks the rescheduling service
(``servesim.services.rescheduling``). Flags win over the file's context. ``--json`` prints the
document alone on stdout (deterministic); otherwise a Rich table.
"""

from __future__ import annotations

from pathlib import Path

import typer

from servesim.cli.common import emit, out_option, print_timed_as, said_written
from servesim.cli.engine_flags import hardware_flags
from servesim.services.deployment import DeploymentSpec
from servesim.services.recovery import read_json
from servesim.services.rescheduling import Policy, RescheduleRequest, reschedule

#: ``--model/--gpu/--tp`` as this command reads them (the input's context, else the default).
HELPS = {
    "model": "Model timing the steps (servesim perf models); default: the input's, else llama-3.1-8b.",
    "gpu": "GPU (servesim perf gpus); default: the input's, else h100.",
    "tp": "Tensor-parallel degree; default: the input's, else 1.",
}


@hardware_flags("model", "gpu", "tp", helps=HELPS)
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
        None, help="Every step takes this long (overrides --model/--gpu/--tp); checked as the input's is."
    ),
    out: Path | None = out_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the plan alone as JSON on stdout."),
    *,
    deployment: DeploymentSpec,
) -> None:
    """Re-admission order of interrupted requests, prefix-cache savings and projected SLA misses."""
    answer = reschedule(
        RescheduleRequest(
            data=read_json(file),
            policy=None if policy is None else policy.value,
            batch_capacity=batch_capacity,
            block_size=block_size,
            max_num_batched_tokens=max_num_batched_tokens,
            cache_survives=cache_survives,
            step_time_ms=step_time_ms,
            model=deployment.model,
            gpu=deployment.gpu,
            tp=deployment.tp,
        )
    )
    from servesim.report.documents import reschedule_document

    if emit(reschedule_document(answer), as_json=as_json, out=out):
        return
    print_timed_as(answer.timed_as)
    from servesim.cli.render import print_section
    from servesim.views.resched import resched_view

    plan = answer.plan
    print_section(resched_view(plan, f"{file.name}: re-admission order ({plan.policy.value})"))
    said_written(out)


def register(app: typer.Typer) -> None:
    app.command("reschedule")(reschedule_cmd)
