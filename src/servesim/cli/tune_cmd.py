"""``servesim tune TRACE --slo ...``: an Optuna study over vLLM flags, TP and replicas (stored in
SQLite so it resumes), then a re-verified ``SchedulerRecommendation`` with the ``vllm serve``
command; with ``--layouts agg,disagg --gpus N``, aggregated against disaggregated layouts of one
GPU budget instead.

The command builds a ``TuneRequest`` (or a ``LayoutsRequest``) from its flags and calls the
service (``servesim.services.tune`` / ``.layouts``), which the web's Tune job and the demo's study
call too; ``--json`` prints the answer's document (``report.capacity``) alone on stdout.
The deployment flags are the spec's own (``cli.engine_flags``): ``--model/--gpu/--tp`` and the
rest, and every vLLM key, which with ``--config`` states the configuration to beat (the study's
baseline). ``--out-dir`` writes the recommendation to a folder for review: nothing is applied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import optuna
import typer
import yaml

from servesim.cli.capacity_options import (
    ConfigOpt,
    ExecutorKind,
    JsonOpt,
    LayoutFlags,
    SloOpt,
    StudyFlags,
    TraceArg,
    TraceFlags,
    check_timing,
    layout_flags_given,
    layout_options,
    run_options,
    study_flags_given,
    study_options,
    trace_options,
)
from servesim.cli.capacity_render import (
    ERRORS,
    failed,
    print_header,
    print_layouts,
    print_recommendation,
    print_tune,
    write_outbox,
)
from servesim.cli.common import cli_slo, emit, said_written
from servesim.cli.engine_flags import deployment_flags, deployment_spec, engine_flags
from servesim.cli.progress import progress_sink
from servesim.cli.trace_input import say_drops
from servesim.errors import InputError
from servesim.paths import data_dir
from servesim.services.capacity import Execution
from servesim.services.deployment import DeploymentSpec, PercentileSLO
from servesim.services.layouts import LAYOUT_KINDS, LayoutKind, LayoutsRequest, refused_keys
from servesim.services.tune import SearchSpace, TuneAnswer, TuneRequest, parse_space, space_from_mapping

#: The study journal (Optuna's JournalStorage; servesim.tuning.storage says why not SQLite).
DEFAULT_STUDY_FILE = "servesim-tune.journal"

TargetOpt = Annotated[float | None, typer.Option(help="Load to plan for (default: the trace's rate).")]
OutOpt = Annotated[Path | None, typer.Option(help="Write the --json document (the report's input) here.")]


def read_space(items: list[str], space_file: Path | None) -> SearchSpace:
    """``--space`` items over a ``--space-file`` (each refused in its own words)."""
    base = SearchSpace()
    if space_file is not None:
        try:
            data = yaml.safe_load(space_file.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            raise InputError(f"{space_file}: cannot read the search space: {e}") from e
        base = space_from_mapping(data)
    return parse_space(items, base)


def storage_url(text: str | None) -> str | None:
    """Where the study lives: the given RDB URL or journal file, None for 'memory', else the journal
    file in the data folder."""
    if text is None:
        return str(data_dir() / DEFAULT_STUDY_FILE)
    if text.strip().lower() in ("memory", "none", ""):
        return None
    return text


def tune_request(
    trace: str,
    spec: DeploymentSpec,
    slo: PercentileSLO | None,
    target_rate: float | None,
    source: TraceFlags,
    run: Execution,
    study: StudyFlags,
) -> TuneRequest:
    """The study the flags ask for (``--seed`` seeds both the sampler and generated traces)."""
    check_timing(spec)
    return TuneRequest(
        trace=source.input(trace),
        deployment=spec.model_copy(update={"router": study.router}),
        slo=slo,
        target_rate=target_rate,
        objective=study.objective.value,
        latency_metric=study.latency_metric.value,
        trials=study.trials,
        seed=source.seed,
        trial_seeds=study.trial_seeds,
        pruning=study.pruning.value,
        verify_seeds=study.verify_seeds,
        max_gpus=study.max_gpus,
        max_rejection_rate=study.max_rejection_rate,
        space=read_space(study.space, study.space_file),
        gpu_hour_usd=study.gpu_hour_usd,
        gpu_prices=gpu_prices(study),
        gpu_types=[g.strip() for g in (study.gpu_types or "").split(",") if g.strip()],
        recommend=study.recommend,
        storage=storage_url(study.storage),
        study_name=study.study_name,
        execution=run,
    )


def gpu_prices(study: StudyFlags) -> dict[str, float]:
    """``--gpu-prices FILE`` then ``--gpu-price`` pairs over it (each checked, naming its flag)."""
    from servesim.services.perf import load_prices, parse_price_overrides, read_price_file

    given = read_price_file(study.gpu_prices) if study.gpu_prices is not None else {}
    flagged = parse_price_overrides(study.gpu_price)
    load_prices().with_overrides(given, "--gpu-prices").with_overrides(flagged)  # unknown GPUs, named
    out = {**given, **flagged}
    if study.gpu_types is not None:
        if not study.gpu_types.strip():
            raise InputError("--gpu-types: name at least one GPU, e.g. --gpu-types h100,l40s")
        if not study.recommend:
            raise InputError("--gpu-types compares verified recommendations: drop --no-recommend")
    return out


def _int_list(text: str | None, flag: str) -> list[int]:
    if text is None:
        return []
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{flag} {text!r}: use whole numbers separated by commas, e.g. 2048,8192") from None
    if not vals or min(vals) < 1:
        raise InputError(f"{flag} {text!r}: use positive whole numbers separated by commas")
    return vals


def _kinds(text: str | None) -> list[LayoutKind]:
    names = [x.strip() for x in ("agg,disagg" if text is None else text).split(",") if x.strip()]
    kinds = [k for k in LAYOUT_KINDS if k in names]
    if not names or set(names) - set(LAYOUT_KINDS):
        raise InputError(
            "--layouts: use agg, disagg, dpep or a list of them, e.g. agg,disagg "
            f"(got {','.join(names) or 'nothing'})"
        )
    return kinds


def layouts_request(
    trace: str,
    spec: DeploymentSpec,
    slo: PercentileSLO | None,
    source: TraceFlags,
    lay: LayoutFlags,
    seeds: int,
) -> LayoutsRequest:
    """The layouts question the flags ask for; the flag search's own flags are refused with it."""
    if lay.layouts is None:
        raise InputError(
            "--gpus N is the GPU budget of --layouts: give --layouts agg,disagg with it (the flag "
            "search's GPU budget is --max-gpus)"
        )
    if lay.gpus is None:
        raise InputError("--layouts needs --gpus N: the GPU budget every layout spends")
    given = [f"--{k.replace('_', '-')}" for k in refused_keys(spec)]
    if given:
        raise InputError(
            f"--layouts searches TP and runs every pool at vllm serve's defaults (tune the pools with "
            f"--prefill-batched-tokens / --decode-max-seqs; --quantization and --kv-cache-dtype, the "
            f"checkpoint's, are kept): drop {', '.join(given)}"
        )
    check_timing(spec, needs_blocks=False)
    return LayoutsRequest(
        trace=source.input(trace),
        deployment=spec,
        gpus=lay.gpus,
        layouts=_kinds(lay.layouts),
        slo=slo,
        link=lay.link,
        short_prompt_tokens=lay.short_prompt_tokens,
        prefill_batched_tokens=_int_list(lay.prefill_batched_tokens, "--prefill-batched-tokens"),
        decode_max_seqs=_int_list(lay.decode_max_seqs, "--decode-max-seqs"),
        break_even=lay.break_even,
        verify_seeds=seeds,
    )


def _layouts(request: LayoutsRequest, out: Path | None, as_json: bool) -> None:
    from servesim.report.capacity import layouts_document
    from servesim.services.layouts import compare

    answer = compare(request)
    if emit(layouts_document(answer), as_json=as_json, out=out):
        return
    print_layouts(answer.answer, answer.title)
    said_written(out)


def _tune(request: TuneRequest, out_dir: Path | None, out: Path | None, as_json: bool) -> None:
    """Run the study (Ctrl-C says where its finished trials are kept) and report the answer."""
    from servesim.services.tune import prepare

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is too much
    prepared = prepare(request)
    say_drops(prepared.workload.provenance)
    try:
        with progress_sink(not as_json) as sink:
            answer = prepared.run(progress=sink)
    except KeyboardInterrupt:
        url = request.storage
        where = f"in {url} as {prepared.study_name}" if url else "in memory (lost)"
        typer.echo(
            f"interrupted; the finished trials are stored {where}: run the same command to resume", err=True
        )
        raise typer.Exit(130) from None
    _report(answer, out_dir, out, as_json)


def _gpu_types(request: TuneRequest, out_dir: Path | None, out: Path | None, as_json: bool) -> None:
    """One study per GPU type, the comparison, then the chosen type's answer as ``_report`` gives it."""
    from rich.console import Console

    from servesim.cli.render import print_section
    from servesim.report.capacity import gpu_types_document
    from servesim.services.gpu_types import compare_gpu_types
    from servesim.views.gpu_types import gpu_types_view

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with progress_sink(not as_json) as sink:
        result = compare_gpu_types(request, progress=sink)
    if not as_json:
        print_section(gpu_types_view(result.answer))
    shown = result.chosen or next(iter(result.answers.values()), None)
    if shown is None:
        gpu_types_document(result)  # no type can run: refused with each type's reason
    rec = shown.recommendation if shown is not None else None
    files = write_outbox(rec, out_dir) if (rec is not None and out_dir is not None) else []
    if emit(gpu_types_document(result), as_json=as_json, out=out):
        return
    if shown is None:
        return
    typer.echo(
        f"\nthe {'chosen' if result.chosen else 'first'} GPU type's study ({shown.hardware.base.gpu}):"
    )
    files += [out] if out is not None else []
    print_header(shown.hardware, shown.request.deployment)
    print_tune(shown.study)
    if rec is not None:
        print_recommendation(rec)
    for f in files:
        Console().print(f"written for review: {f}")


def _report(answer: TuneAnswer, out_dir: Path | None, out: Path | None, as_json: bool) -> None:
    from rich.console import Console

    from servesim.report.capacity import tune_document

    rec = answer.recommendation
    files = write_outbox(rec, out_dir) if (rec is not None and out_dir is not None) else []
    url = answer.request.storage
    if url is not None and as_json:
        typer.echo(f"study {answer.study.study_name} stored in {url}", err=True)
    if emit(tune_document(answer), as_json=as_json, out=out):
        return
    files += [out] if out is not None else []
    print_header(answer.hardware, answer.request.deployment)
    print_tune(answer.study)
    if rec is not None:
        print_recommendation(rec)
    for f in files:
        Console().print(f"written for review: {f}")


def register(app: typer.Typer) -> None:
    @app.command("tune")
    @deployment_flags
    @engine_flags
    @trace_options("Seed of the sampler and of generated traces.")
    @run_options(
        ExecutorKind.process, "Where trials run.", "Workers and trials per round (process pool or Ray CPUs)."
    )
    @study_options
    @layout_options
    def tune_cmd(
        trace: TraceArg,
        slo: SloOpt = None,
        target_rate: TargetOpt = None,
        config: ConfigOpt = None,
        out: OutOpt = None,
        as_json: JsonOpt = False,
        *,
        flags: dict[str, Any],
        deployment: DeploymentSpec,
        source: TraceFlags,
        run: Execution,
        study: StudyFlags,
        layout: LayoutFlags,
    ) -> None:
        """Search vLLM flags, TP and replicas with Optuna; recommend, re-verified on fresh seeds.
        With --layouts/--gpus: aggregated vs disaggregated layouts of one GPU budget instead."""
        try:
            spec = deployment_spec(deployment, config, flags)
            goal = cli_slo(slo)
            if layout.asked and study.gpu_types is not None:
                raise InputError("--gpu-types searches the flag study's GPU type: drop --layouts/--gpus")
            if spec.gpu is not None and study.gpu_types is not None:
                raise InputError("--gpu sets one GPU, --gpu-types compares several: give one of them")
            if layout.asked:
                unread = study_flags_given(study) + (
                    [f"--target-rate {target_rate:g}"] if target_rate is not None else []
                )
                if unread:
                    raise InputError(
                        f"{', '.join(unread)}: the flag search's, which tune --layouts does not run; "
                        "drop them (--out FILE writes the layouts' document)"
                    )
                _layouts(layouts_request(trace, spec, goal, source, layout, study.verify_seeds), out, as_json)
                return
            if given := layout_flags_given(layout):
                raise InputError(
                    f"{', '.join(given)}: the layouts question's; give --layouts and --gpus with them"
                )
            request = tune_request(trace, spec, goal, target_rate, source, run, study)
            if request.gpu_types:
                _gpu_types(request, study.out_dir, out, as_json)
                return
            _tune(request, study.out_dir, out, as_json)
        except ERRORS as exc:
            failed(exc)
