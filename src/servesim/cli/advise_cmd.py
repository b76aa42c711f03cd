"""``servesim advise``: Claude (or the rules advisor) proposes, the simulator checks, you review.

INPUT is a trace / preset (batching advice), a reschedule input (``interrupted_requests``) or a
recovery record (``active_jobs``): the task follows from it unless ``--task`` says otherwise. The
advice service (``servesim.services.advice``) builds the case and asks; ``--apply`` only writes
the advice to an outbox folder for human review.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from servesim.bounds import MAX_REPLICAS
from servesim.cli.actions import note_advisor, note_output
from servesim.cli.common import (
    cli_slo,
    emit,
    out_option,
    print_json,
    print_timed_as,
    request_slo,
    said_written,
)
from servesim.cli.engine_flags import deployment_spec, hardware_flags
from servesim.cli.tables import FitTable
from servesim.cli.trace_input import hash_block_size_option, seed_option, strict_option
from servesim.paths import data_dir
from servesim.services.advice import (
    ActionLogEntry,
    AdviseAnswer,
    AdviseRequest,
    PreparedAdvice,
    compile_advisor,
    prepare,
    read_input,
)
from servesim.services.deployment import DeploymentSpec
from servesim.services.inputs import TraceInput

HELPS = {
    "step_time_ms": "Every step takes this long instead of the model's (batching, rescheduling).",
}

Task = Annotated[str | None, typer.Option(help="batching | reschedule | fallback (default: from INPUT).")]
Advisor = Annotated[
    str,
    typer.Option(
        help="dspy | claude | rules | auto (with ANTHROPIC_API_KEY: the compiled DSPy program if one "
        "is saved, else the uncompiled one; without: rules). claude: the pydantic-ai agent."
    ),
]
Optimizer = Annotated[
    str, typer.Option(help="`advise compile`: bootstrap (BootstrapFewShot) | mipro (MIPROv2 light).")
]
MaxDemos = Annotated[int, typer.Option(min=0, max=16, help="`advise compile`: few-shot demos per task.")]
ClaudeModel = Annotated[str | None, typer.Option(help="Anthropic model name (default: the advisor's).")]
Rounds = Annotated[int, typer.Option(min=1, max=10, help="Propose-simulate-refine rounds with Claude.")]
TimeoutS = Annotated[float, typer.Option(min=1, help="Per Claude call.")]
Config = Annotated[Path | None, typer.Option("--config", "-c", help="Current vLLM keys (batching).")]
Replicas = Annotated[int, typer.Option(min=1, max=MAX_REPLICAS, help="Current replicas (batching).")]
Slo = Annotated[
    str | None,
    typer.Option(
        help="p99 caps, also per-request goodput thresholds: ttft_p99_ms=500,tpot_p99_ms=50 (batching)."
    ),
]
Optimize = Annotated[
    int,
    typer.Option(min=0, max=1000, help="Optuna trials for the optimizer's best setting (batching; 0: none)."),
]
NumRequests = Annotated[int | None, typer.Option("--num-requests", "-n", min=0, help="Requests (presets).")]
Apply = Annotated[bool, typer.Option("--apply", help="Write the advice to --outbox for review.")]
Outbox = Annotated[
    Path | None,
    typer.Option(
        metavar="DIR",
        help="Where --apply writes (default: outbox/ in servesim's data folder; nothing is sent).",
    ),
]
ActionLog = Annotated[Path | None, typer.Option(help="Append one JSON line per advisor call here.")]


@hardware_flags("model", "gpu", "tp", "step_time_ms", helps=HELPS)
def advise_cmd(
    source: str = typer.Argument(
        ..., metavar="INPUT", help="Trace/preset, reschedule input or recovery record."
    ),
    task: Task = None,
    advisor: Advisor = "auto",
    optimizer: Optimizer = "bootstrap",
    max_demos: MaxDemos = 3,
    claude_model: ClaudeModel = None,
    rounds: Rounds = 3,
    timeout_s: TimeoutS = 60.0,
    config: Config = None,
    replicas: Replicas = 1,
    slo: Slo = None,
    optimize: Optimize = 12,
    seed: int = seed_option("Seed for generated traces and the optimizer."),
    num_requests: NumRequests = None,
    strict: bool = strict_option(),
    hash_block_size: int | None = hash_block_size_option(),
    apply: Apply = False,
    outbox: Outbox = None,
    action_log: ActionLog = None,
    out_file: Path | None = out_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the checked advice as JSON only."),
    *,
    deployment: DeploymentSpec,
) -> None:
    """Get scheduling, rescheduling or fallback advice, re-checked by simulation.

    `servesim advise compile` compiles the DSPy advisor against the simulator instead (needs
    ANTHROPIC_API_KEY) and saves it in servesim's data folder."""
    if source == "compile":
        compile_cmd(claude_model, timeout_s, optimizer, max_demos, as_json)
        return
    request_slo(slo)  # --slo's wording, and good= refused for a single run, before any work
    request = AdviseRequest(
        task=task,
        trace=TraceInput(
            source=source,
            seed=seed,
            num_requests=num_requests,
            strict=strict,
            hash_block_size=hash_block_size,
        ),
        data=read_input(source),
        deployment=deployment_spec(deployment, config, {}).model_copy(update={"replicas": replicas}),
        slo=cli_slo(slo),
        optimize=optimize,
        seed=seed,
        advisor=advisor,
        claude_model=claude_model,
        rounds=rounds,
        timeout_s=timeout_s,
    )
    prepared = prepare(request)
    for line in prepared.warnings:
        typer.echo(line, err=True)
    answer = _ask(prepared, action_log)
    written = answer.write_outbox(outbox or data_dir() / "outbox") if apply else []
    note_advice(answer, written)
    for line in answer.invalid_job_lines:  # as `recover` lists them: excluded, never dropped silently
        typer.echo(line, err=True)
    if as_json or out_file is not None:
        from servesim.report.documents import advise_document

        doc = advise_document(answer, [str(p) for p in written])
        if emit(doc, as_json=as_json, out=out_file):
            return
    print_timed_as(answer.timed_as)
    show_advice(answer, written)
    said_written(out_file)


def _ask(prepared: PreparedAdvice, action_log: Path | None) -> AdviseAnswer:
    """The answer, each advisor call appended to ``action_log`` as one JSON line."""
    if action_log is None:
        return prepared.run()
    with action_log.open("a", encoding="utf-8") as log_file:

        def log_entry(entry: ActionLogEntry) -> None:
            log_file.write(entry.model_dump_json() + "\n")

        return prepared.run(on_log=log_entry)


def note_advice(answer: AdviseAnswer, written: list[Path]) -> None:
    """The action log's advisor usage (which advisor answered, Claude's model and tokens) and files."""
    usage = answer.usage()
    note_advisor(usage.advisor, usage.model, usage.input_tokens, usage.output_tokens)
    for p in written:
        note_output(p)


def show_advice(answer: AdviseAnswer, written: list[Path]) -> None:
    """Who answered, the simulator's score, the candidates' table, the advice, the files written."""
    from servesim.views.advisor import answered_by, score_words

    result = answer.result
    console = Console()
    if result.notice:
        console.print(f"[bold yellow]notice:[/] {result.notice}")
    console.print(f"answered by: {answered_by(result)}", highlight=False)
    if (score := score_words(result)) is not None:
        console.print(score, highlight=False)
    console.print(result_table(answer))
    console.print_json(json.dumps(result.advice.model_dump(mode="json")))
    for p in written:
        console.print(f"written for review: {p}")


def result_table(answer: AdviseAnswer) -> Table:
    from servesim.views.advisor import verdict_words

    result = answer.result
    v = result.verification
    table = FitTable(
        title=f"{result.task} advice by {result.advisor}: {verdict_words(v)[0].upper()}",
        title_justify="left",
        caption=v.reason,
    )
    names = list(v.candidates[0].metrics) if v.candidates else []
    table.add_column("candidate", style="bold")
    for n in names:
        table.add_column(n, justify="right")
    for c in v.candidates:
        table.add_row(c.label, *("-" if c.metrics[n] is None else f"{c.metrics[n]:,}" for n in names))
    return table


def compile_cmd(model: str | None, timeout_s: float, optimizer: str, max_demos: int, as_json: bool) -> None:
    """``servesim advise compile``: the DSPy optimiser with the simulator as metric."""
    say = (lambda m: typer.echo(m, err=True)) if not as_json else None
    compiled = compile_advisor(model, timeout_s=timeout_s, optimizer=optimizer, max_demos=max_demos, say=say)
    note_output(compiled.path)
    s: dict[str, Any] = compiled.summary
    if as_json:
        print_json({"kind": "advise-compile", "path": str(compiled.path), **s})
        return
    typer.echo(
        f"compiled with {s['optimizer']} on {s['train_scenarios']} scenarios: validation score "
        f"{s['val_score_before']:.3f} uncompiled -> {s['val_score_after']:.3f} compiled "
        f"({s['val_scenarios']} scenarios); saved {compiled.path}"
    )


def register(app: typer.Typer) -> None:
    app.command("advise")(advise_cmd)
