"""``servesim advise``: Claude (or the rules advisor) proposes, the simulator checks, you review.

INPUT is a trace / preset (batching advice), a reschedule input (``interrupted_requests``) or a
recovery record (``active_jobs``): the task follows from it unless ``--task`` says otherwise.
``--apply`` only writes the advice to an outbox folder for human review.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from servesim.advisor import (
    DEFAULT_MODEL,
    ActionLogEntry,
    AdviceResult,
    BatchingCase,
    ClaudeAdvisor,
    FallbackCase,
    RescheduleCase,
    advise,
    infer_task,
    write_outbox,
)
from servesim.advisor.cases import Case
from servesim.advisor.optimize import optimizer_best
from servesim.bounds import MAX_REPLICAS
from servesim.cli.actions import note_advisor, note_output
from servesim.cli.common import (
    emit,
    out_option,
    print_json,
    print_timed_as,
    request_slo,
    said_written,
    timed_as,
)
from servesim.cli.engine_flags import file_settings
from servesim.cli.tables import FitTable
from servesim.cli.trace_input import hash_block_size_option, provenance_json, read_trace, strict_option
from servesim.cluster.recovery import plan_recovery
from servesim.engine import ConstantStepTime
from servesim.engine.simulate import describe_model
from servesim.errors import InputError, shown
from servesim.paths import data_dir
from servesim.report.documents import stamped
from servesim.resched import parse_input, reschedule
from servesim.spec import DeploymentSpec, resolve


def _read_json(path: str) -> Any:
    p = Path(path)
    if p.suffix.lower() not in (".json", ".yaml", ".yml") or not p.exists():
        return None
    import yaml

    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{path}: {e}") from e


def build_case(
    source: str,
    task: str | None,
    *,
    config: Path | None,
    replicas: int,
    slo: str | None,
    step_time_ms: float | None,
    seed: int,
    num_requests: int | None,
    strict: bool = False,
    hash_block_size: int | None = None,
) -> Case:
    data = _read_json(source)
    kind = task or (infer_task(data) if data is not None else "batching")
    if kind == "reschedule":
        if data is None:
            raise InputError(f"{source}: a reschedule input must be a JSON/YAML file")
        model = ConstantStepTime(step_time_s=step_time_ms / 1000.0) if step_time_ms is not None else None
        return RescheduleCase(parse_input(data), model)
    if kind == "fallback":
        if data is None:
            raise InputError(f"{source}: a recovery record must be a JSON/YAML file")
        record = data[0] if isinstance(data, list) else data
        return FallbackCase(plan_recovery(record))
    if kind != "batching":
        raise InputError(f"unknown task {shown(kind)}: use batching, reschedule or fallback")
    trace = read_trace(
        source, seed=seed, num_requests=num_requests, strict=strict, hash_block_size=hash_block_size
    )
    spec = DeploymentSpec(step_time_ms=step_time_ms, engine=file_settings(config))
    setup = resolve(spec, max_model_len=trace.default_max_model_len())
    for note in setup.notes:
        typer.echo(f"warning: {note}", err=True)
    return BatchingCase(
        trace,
        setup.config,
        setup.step_time,
        slo=request_slo(slo),
        replicas=replicas,
        hardware=setup.timed_as,
    )


def note_advice(result: AdviceResult, written: list[Path]) -> None:
    """The action log's advisor usage (which advisor answered, Claude's model and tokens) and files."""
    calls = [e for e in result.action_log if e.advisor == result.advisor]
    model = next((e.model for e in calls if e.model), None)
    tokens = (
        (sum(e.input_tokens for e in calls), sum(e.output_tokens for e in calls)) if model else (None, None)
    )
    note_advisor(result.advisor, model, *tokens)
    for p in written:
        note_output(p)


def result_table(result: AdviceResult) -> Table:
    from servesim.views.advisor import verdict_words

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


def compile_cmd(model: str, timeout_s: float, optimizer: str, max_demos: int, as_json: bool) -> None:
    """``servesim advise compile``: the DSPy optimiser with the simulator as metric."""
    from servesim.advisor.program import NO_KEY, compile_program, make_lm

    if not ClaudeAdvisor.available():
        raise InputError(f"advise compile: {NO_KEY.replace(' (or use --advisor rules)', '')}")
    if optimizer not in ("bootstrap", "mipro"):
        raise InputError(f"--optimizer {shown(optimizer)}: use bootstrap or mipro")
    lm = make_lm(model, timeout_s=timeout_s)
    say = (lambda m: typer.echo(m, err=True)) if not as_json else None
    path, saved = compile_program(
        lm, model_name=model, optimizer=optimizer, max_demos=max_demos, path=None, progress=say
    )
    note_output(path)
    if as_json:
        print_json({"kind": "advise-compile", "path": str(path), **saved.model_dump(exclude={"state"})})
        return
    typer.echo(
        f"compiled with {saved.optimizer} on {saved.train_scenarios} scenarios: validation score "
        f"{saved.val_score_before:.3f} uncompiled -> {saved.val_score_after:.3f} compiled "
        f"({saved.val_scenarios} scenarios); saved {path}"
    )


def register(app: typer.Typer) -> None:
    @app.command("advise")
    def advise_cmd(
        source: str = typer.Argument(
            ..., metavar="INPUT", help="Trace/preset, reschedule input or recovery record."
        ),
        task: str | None = typer.Option(None, help="batching | reschedule | fallback (default: from INPUT)."),
        advisor: str = typer.Option(
            "auto",
            help="dspy | claude | rules | auto (with ANTHROPIC_API_KEY: the compiled DSPy program if one "
            "is saved, else the uncompiled one; without: rules). claude: the pydantic-ai agent.",
        ),
        optimizer: str = typer.Option(
            "bootstrap", help="`advise compile`: bootstrap (BootstrapFewShot) | mipro (MIPROv2 light)."
        ),
        max_demos: int = typer.Option(3, min=0, max=16, help="`advise compile`: few-shot demos per task."),
        claude_model: str = typer.Option(DEFAULT_MODEL, help="Anthropic model name."),
        rounds: int = typer.Option(3, min=1, max=10, help="Propose-simulate-refine rounds with Claude."),
        timeout_s: float = typer.Option(60.0, min=1, help="Per Claude call."),
        config: Path | None = typer.Option(None, "--config", "-c", help="Current vLLM keys (batching)."),
        replicas: int = typer.Option(1, min=1, max=MAX_REPLICAS, help="Current replicas (batching)."),
        slo: str | None = typer.Option(
            None,
            help="p99 caps, also per-request goodput thresholds: ttft_p99_ms=500,tpot_p99_ms=50 (batching).",
        ),
        step_time_ms: float | None = typer.Option(
            None, help="Every step takes this long instead of the default model's (llama-3.1-8b on h100)."
        ),
        optimize: int = typer.Option(
            12, min=0, help="Optuna trials for the optimizer's best setting (batching; 0: none)."
        ),
        seed: int = typer.Option(0, help="Seed for generated traces and the optimizer."),
        num_requests: int | None = typer.Option(None, "--num-requests", "-n", help="Requests (presets)."),
        strict: bool = strict_option(),
        hash_block_size: int | None = hash_block_size_option(),
        apply: bool = typer.Option(False, "--apply", help="Write the advice to --outbox for review."),
        outbox: Path | None = typer.Option(
            None,
            metavar="DIR",
            help="Where --apply writes (default: outbox/ in servesim's data folder; nothing is sent).",
        ),
        action_log: Path | None = typer.Option(None, help="Append one JSON line per advisor call here."),
        out_file: Path | None = out_option(),
        as_json: bool = typer.Option(False, "--json", help="Print the checked advice as JSON only."),
    ) -> None:
        """Get scheduling, rescheduling or fallback advice, re-checked by simulation.

        `servesim advise compile` compiles the DSPy advisor against the simulator instead (needs
        ANTHROPIC_API_KEY) and saves it in servesim's data folder."""
        if source == "compile":
            compile_cmd(claude_model, timeout_s, optimizer, max_demos, as_json)
            return
        case = build_case(
            source,
            task,
            config=config,
            replicas=replicas,
            slo=slo,
            step_time_ms=step_time_ms,
            seed=seed,
            num_requests=num_requests,
            strict=strict,
            hash_block_size=hash_block_size,
        )
        if isinstance(case, BatchingCase) and optimize > 0:
            case.optimizer_best = optimizer_best(case, optimize, seed)
        claude = ClaudeAdvisor(claude_model, timeout_s=timeout_s) if advisor == "claude" else None
        program = None
        if advisor == "dspy" or (advisor == "auto" and ClaudeAdvisor.available()):
            from servesim.advisor.program import DSPyAdvisor

            program = DSPyAdvisor(claude_model, timeout_s=timeout_s)
        log_file = action_log.open("a", encoding="utf-8") if action_log is not None else None

        def log_entry(entry: ActionLogEntry) -> None:
            if log_file is not None:
                log_file.write(entry.model_dump_json() + "\n")

        try:
            result = advise(case, advisor, claude=claude, program=program, rounds=rounds, on_log=log_entry)
        finally:
            if log_file is not None:
                log_file.close()
        written = write_outbox(result, case, outbox or data_dir() / "outbox") if apply else []
        note_advice(result, written)
        invalid = case.plan.invalid_jobs if isinstance(case, FallbackCase) else []
        for j in invalid:  # as `recover` lists them: excluded from the advice, never dropped silently
            typer.echo(
                f"warning: invalid job {j.index} ({j.job_id or 'no job_id'}) excluded: {j.reason}", err=True
            )
        if as_json or out_file is not None:
            out = result.model_dump(mode="json")
            out["outbox_files"] = [str(p) for p in written]
            if isinstance(case, FallbackCase):
                out["invalid_jobs"] = [j.model_dump(mode="json") for j in invalid]
            if isinstance(case, BatchingCase):
                out["trace_provenance"] = provenance_json(case.trace.provenance)
            if emit(stamped("advise", out), as_json=as_json, out=out_file):
                return
        if isinstance(case, BatchingCase):
            print_timed_as(case.hardware)
        elif isinstance(case, RescheduleCase):
            model = describe_model(case.step_time) if case.step_time is not None else None
            print_timed_as(timed_as(model or reschedule(case.problem).step_time_model))
        elif isinstance(case, FallbackCase):
            c = case.plan.context
            print_timed_as(f"{c.model} on {c.tp} x {c.gpu}, roofline step times")
        console = Console()
        if result.notice:
            console.print(f"[bold yellow]notice:[/] {result.notice}")
        from servesim.views.advisor import answered_by, score_words

        console.print(f"answered by: {answered_by(result)}", highlight=False)
        if (score := score_words(result)) is not None:
            console.print(score, highlight=False)
        console.print(result_table(result))
        console.print_json(json.dumps(result.advice.model_dump(mode="json")))
        for p in written:
            console.print(f"written for review: {p}")
        said_written(out_file)
