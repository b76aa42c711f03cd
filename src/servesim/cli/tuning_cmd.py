"""``servesim saturate`` and ``servesim tune``: capacity planning (``scenario``: ``scenario_cmd``).

* ``saturate TRACE --slo ttft_p99_ms=...,tpot_p99_ms=...``: scale the arrival rate and find the
  goodput knee and the saturation rate, with the throughput-latency curve and a status per rate.
* ``tune TRACE --slo ...``: an Optuna study over vLLM flags, TP and replicas (stored in SQLite so
  it resumes), then a re-verified ``SchedulerRecommendation`` with the ``vllm serve`` command.

Every command prints its result alone on stdout with ``--json``; errors are one line on stderr
with exit code 2. ``--out-dir`` writes the recommendation to a folder for review: nothing is
ever applied.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

import optuna
import typer
import yaml
from pydantic import ValidationError
from rich.console import Console

from servesim.cli.common import (
    cli_slo,
    emit,
    fail,
    json_bytes,
    print_json,
    print_timed_as,
    said_written,
    timed_as,
    write_text_atomic,
)
from servesim.cli.engine_flags import (
    cluster_deployment_flags,
    deployment_spec,
    engine_flags,
    file_settings,
)
from servesim.cli.progress import progress_bar
from servesim.cli.tables import FitTable
from servesim.cli.trace_input import hash_block_size_option, provenance_json, say_drops, strict_option
from servesim.cluster import RouterSpec
from servesim.cluster.config import RouterPolicy
from servesim.engine.config import SchedulingPolicy
from servesim.engine.simulate import describe_model
from servesim.engine.speculative import SpeculativeConfig
from servesim.errors import InputError, InternalError, user_errors
from servesim.paths import data_dir
from servesim.report.documents import stamped
from servesim.spec import DeploymentSpec, engine_values
from servesim.tuning import (
    Deployment,
    EvalContext,
    EvalSettings,
    FixedHardware,
    Hardware,
    SaturationReport,
    SaturationSettings,
    SchedulerRecommendation,
    SearchSpace,
    TuneResult,
    TuneSettings,
    Workload,
    find_saturation,
    make_executor,
    parse_space,
    recommend,
    space_from_mapping,
    tune,
)
from servesim.tuning.hardware import DEFAULT_GPU, DEFAULT_MODEL, PerfHardware
from servesim.tuning.hardware import hardware_of as study_hardware
from servesim.tuning.space import Knob

DEFAULT_STUDY_FILE = "servesim-tune.db"
TRACE_HELP = (
    "Trace file or bundled trace (its timeline is rescaled), or a generator preset / arrival name "
    "(its rate is replaced), e.g. default, poisson_10_rps, azure-conv."
)


class Executor(StrEnum):
    local = "local"
    process = "process"
    ray = "ray"


class ObjectiveChoice(StrEnum):
    goodput_per_gpu = "goodput_per_gpu"
    pareto = "pareto"


class Metric(StrEnum):
    ttft = "ttft"
    tpot = "tpot"
    e2e = "e2e"


# ---------------------------------------------------------------------- shared options
def hardware_timed_as(hw: Hardware, model_given: bool) -> str:
    """The ``timed as`` line of a saturate/tune run's hardware."""
    if isinstance(hw, PerfHardware):
        origin = (
            ""
            if model_given
            else " (the default deployment; --model/--gpu/--tp change it)"
            if hw.gpu == DEFAULT_GPU and hw.tensor_parallel_size == 1
            else " (no --model given: the default model)"
        )
        blocks = "KV blocks as given" if hw.num_gpu_blocks is not None else "KV blocks as vLLM sizes them"
        return f"{hw.model} on {hw.tensor_parallel_size} x {hw.gpu}, roofline step times; {blocks}{origin}"
    if isinstance(hw, FixedHardware):
        return timed_as(describe_model(hw.step_time), hw.num_gpu_blocks)
    return "a custom hardware model"


def hardware_from(
    model: str | None,
    gpu: str | None,
    tp: int,
    util: float,
    profile: str | None,
    num_gpu_blocks: int | None,
    step_time_ms: float | None,
    linear: bool,
) -> Hardware:
    """``PerfHardware`` (default), or ``FixedHardware`` with --step-time-ms / --linear-step-time."""
    try:
        spec = DeploymentSpec(
            model=model,
            gpu=gpu,
            tp=tp,
            gpu_memory_utilization=util,
            profile=profile,
            step_time_ms=step_time_ms,
            linear_step_time=linear,
            engine={} if num_gpu_blocks is None else {"num_gpu_blocks": num_gpu_blocks},
        )
    except ValidationError as e:  # the spec's bounds, in the flags' words
        flag = {"tp": "--tp", "gpu_memory_utilization": "--gpu-memory-utilization"}
        raise InputError(
            "; ".join(
                f"{flag.get(str(x['loc'][0]), '--' + str(x['loc'][0]).replace('_', '-'))}: {x['msg']}"
                for x in e.errors()
            )
        ) from None
    return hardware_of(spec)


def hardware_of(spec: DeploymentSpec) -> Hardware:
    """The tuner's hardware context of a deployment spec (``servesim.tuning.hardware_of``; its
    ``num_gpu_blocks`` overrides the memory model, as in every command), refused in the flags'
    words when the flags contradict each other."""
    if spec.fixed_timing:
        if spec.step_time_ms is not None and spec.linear_step_time:
            raise InputError("give --step-time-ms or --linear-step-time, not both")
        if spec.model is not None or spec.gpu is not None:
            raise InputError(
                "--model/--gpu choose roofline step times; --step-time-ms / --linear-step-time "
                "replace them: give one or the other"
            )
        if spec.engine.get("num_gpu_blocks") is None:
            raise InputError("a fixed step-time model needs --num-gpu-blocks (there is no memory model)")
    return study_hardware(spec)


def defaults_line(applied: dict[str, Any], spec: DeploymentSpec) -> str:
    """``defaults: ...``: the vllm serve defaults a run started from (as ``simulate`` says it)."""
    values = ", ".join(f"{k} {v:,}" for k, v in applied.items())
    gpu = spec.timing_gpu
    where = f"on {gpu}" if gpu else "with no GPU timing the steps (small-GPU row)"
    return f"defaults: {values} (what vllm serve runs {where})"


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.3g}"


def _fmt_ms(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


# ---------------------------------------------------------------------- rendering
def print_saturation(rep: SaturationReport) -> None:
    from servesim.cli.render import print_section
    from servesim.views.saturation import saturation_view

    print_section(saturation_view(rep))


def print_tune(res: TuneResult, top: int = 8) -> None:
    from servesim.cli.render import print_section
    from servesim.views.tuning import trials_view

    print_section(trials_view(res, top), tables=["best_trials"] if res.ranked else ["infeasible"])


def print_recommendation(rec: SchedulerRecommendation) -> None:
    from servesim.cli.render import print_section
    from servesim.views.tuning import recommendation_view

    shown = [
        "predicted",
        *(["error_bars"] if rec.error_bars else []),
        *(["baseline"] if rec.baseline else []),
        *(["changes"] if rec.changes else []),
        *(["capacity"] if rec.capacity else []),
    ]
    print_section(recommendation_view(rec), tables=shown)


def trial_deployments(
    res: TuneResult,
    numbers: list[int],
    max_model_len: int,
    policy: str,
    fixed: dict[str, Any] | None = None,
) -> list[Deployment]:
    """The study's trials ``numbers`` as deployments, for ``recommend`` to re-verify (``fixed``:
    the study's fields that were not searched, e.g. its speculative config)."""
    by_number = {r.number: r for r in res.trials}
    out = []
    for n in numbers:
        o = by_number[n].outcome
        if o is None:
            raise InternalError("invariant broken: o is None")
        out.append(
            Deployment.model_validate(
                {**(fixed or {}), "max_model_len": max_model_len, "policy": policy, **o.params}
            )
        )
    return out


def write_outbox(rec: SchedulerRecommendation, out_dir: Path) -> list[Path]:
    """The recommendation, its YAML and its command line in a folder for review (nothing applied)."""
    note = "# Generated by servesim (simulation): review before use. One replica"
    note += f"; run {rec.replicas} behind the load balancer.\n" if rec.replicas > 1 else ".\n"
    commands = rec.deploy.commands if rec.deploy is not None else [rec.vllm_serve_command]
    return [
        write_text_atomic(out_dir / "recommendation.json", rec.model_dump_json(indent=2) + "\n"),
        write_text_atomic(out_dir / "vllm-config.yaml", rec.config_yaml),
        write_text_atomic(out_dir / "vllm-serve-command.txt", note + "\n".join(commands) + "\n"),
    ]


def read_space(items: list[str], space_file: Path | None) -> SearchSpace:
    base = SearchSpace()
    if space_file is not None:
        try:
            data = yaml.safe_load(space_file.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            raise InputError(f"{space_file}: cannot read the search space: {e}") from e
        base = space_from_mapping(data)
    return parse_space(items, base)


def _storage(text: str | None) -> str | None:
    """The study's RDB URL: the given one, None for 'memory', else SQLite in the data folder."""
    if text is None:
        return f"sqlite:///{data_dir() / DEFAULT_STUDY_FILE}"
    if text.strip().lower() in ("memory", "none", ""):
        return None
    return text


#: What a tuning command reports as one line (exit 2): the user errors, and Optuna's (a study
#: storage that is locked, or holds another study); anything else is a bug (``common.report_bug``).
ERRORS: tuple[type[Exception], ...] = (*user_errors(), optuna.exceptions.OptunaError)


def _int_list(text: str | None, flag: str) -> list[int | None]:
    if text is None:
        return [None]
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{flag} {text!r}: use whole numbers separated by commas, e.g. 2048,8192") from None
    if not vals or min(vals) < 1:
        raise InputError(f"{flag} {text!r}: use positive whole numbers separated by commas")
    return list(dict.fromkeys(vals))


def run_layouts(
    trace: str,
    *,
    layouts: str | None,
    gpus: int | None,
    slo: str | None,
    model: str | None,
    gpu: str | None,
    step_time_ms: float | None,
    linear_step_time: bool,
    link: str,
    short_prompt_tokens: int,
    prefill_batched_tokens: str | None,
    decode_max_seqs: str | None,
    break_even: bool,
    seed: int,
    num_requests: int | None,
    strict: bool,
    hash_block_size: int | None,
    out: Path | None,
    as_json: bool,
    verify_seeds: int = 3,
) -> None:
    """``servesim tune --layouts agg,disagg --gpus N``: servesim.tuning.layouts, printed; the
    recommendation re-verified on ``verify_seeds`` fresh seeds of the same traffic."""
    from servesim.cli.trace_input import read_trace
    from servesim.cluster.pd import link_preset
    from servesim.tuning.layouts import LayoutRunner, compare_layouts

    if gpus is None:
        raise InputError("--layouts needs --gpus N: the GPU budget every layout spends")
    kinds = [x.strip() for x in (layouts or "agg,disagg").split(",") if x.strip()]
    if (step_time_ms is not None or linear_step_time) and (model is not None or gpu is not None):
        raise InputError(
            "--model/--gpu choose roofline step times; --step-time-ms / --linear-step-time replace them: "
            "give one or the other"
        )
    link_preset(link)  # an unknown link is refused before anything runs
    goal = cli_slo(slo)
    ttft = getattr(goal, "ttft_p99_ms", None) if goal is not None else None
    tpot = getattr(goal, "tpot_p99_ms", None) if goal is not None else None
    pbt = _int_list(prefill_batched_tokens, "--prefill-batched-tokens")
    dms = _int_list(decode_max_seqs, "--decode-max-seqs")
    tr = read_trace(
        trace, seed=seed, num_requests=num_requests, strict=strict, hash_block_size=hash_block_size
    )
    runner = LayoutRunner(
        tr,
        model=model or "llama-3.1-8b",
        gpu=gpu,
        step_time_ms=step_time_ms,
        linear_step_time=linear_step_time,
        link=link,
        short_prompt_tokens=short_prompt_tokens,
        ttft_ms=ttft,
        tpot_ms=tpot,
    )
    from servesim.tuning.workload import FRESH_SEED_BASE, Workload

    workload = Workload.from_source(
        trace, seed=seed, num_requests=num_requests, strict=strict, hash_block_size=hash_block_size
    )
    ans = compare_layouts(
        runner,
        gpus,
        kinds,
        prefill_batched_tokens=pbt,
        decode_max_seqs=dms,
        break_even=break_even,
        fresh=lambda s: runner.with_trace(workload.trace(None, s)),
        verify_seeds=[FRESH_SEED_BASE + i for i in range(verify_seeds)],
    )
    if emit(stamped("layouts", {"layouts": ans.model_dump(mode="json")}), as_json=as_json, out=out):
        return
    print_layouts(ans, f"{trace}: {len(tr):,} requests, {gpus} GPUs")
    said_written(out)


def print_layouts(ans: Any, title: str) -> None:
    console = Console(highlight=False)
    console.print(title)
    caps = (
        ", ".join(f"{k} <= {v:g}" for k, v in ans.slo.items() if v is not None)
        or "none (every request counts)"
    )
    console.print(f"per-request SLO for goodput: {caps}; disaggregated over {ans.link}")
    t = FitTable(title="layouts (* on the Pareto front)", title_justify="left")
    for col in ("layout", "GPUs", "goodput/GPU", "good", "TTFT p99", "TPOT p99"):
        t.add_column(col)
    for p in sorted(ans.points, key=lambda p: -p.goodput_per_gpu):
        tpot = "-" if p.tpot_p99_ms is None else f"{p.tpot_p99_ms:.1f} ms"
        t.add_row(
            ("* " if p.pareto else "  ") + p.label,
            str(p.gpus),
            f"{p.goodput_per_gpu:.3f}",
            f"{p.good_requests}/{p.num_requests}",
            f"{p.ttft_p99_ms:.1f} ms",
            tpot,
        )
    console.print(t)
    console.print(f"recommended: {ans.recommended}")
    for r in ans.reasons:
        console.print(f"  - {r}")
    v = ans.verification
    if v is not None:
        seeds = ", ".join(
            f"{c.seed}: {c.recommended_per_gpu:.3f} vs {c.against_per_gpu:.3f}" for c in v.checks
        )
        console.print(f"fresh seeds ({v.recommended} vs {v.against}, goodput/GPU): {seeds}")
    be = ans.break_even
    if be is not None:
        probes = ", ".join(f"{g:.3g} Gbit/s -> {v:.3f}" for g, v in be.probes)
        console.print(
            f"break-even bandwidth: {'-' if be.gbps is None else f'{be.gbps:.3g} Gbit/s per TP rank'}"
        )
        console.print(f"  probes (goodput/GPU): {probes}")


def register(app: typer.Typer) -> None:
    @app.command("saturate")
    @cluster_deployment_flags
    @engine_flags
    def saturate_cmd(
        trace: str = typer.Argument(..., help=TRACE_HELP),
        slo: str | None = typer.Option(
            None, help="Percentile SLOs, e.g. ttft_p99_ms=500,tpot_p99_ms=50[,e2e_p99_ms=...][,good=0.95]."
        ),
        target_rate: float | None = typer.Option(
            None, help="Load to judge headroom at (default: the trace's rate)."
        ),
        config: Path | None = typer.Option(None, "--config", "-c", help="YAML/JSON file of vLLM keys."),
        seed: int = typer.Option(0, min=0, help="Seed of generated traces (seeds are offsets from it)."),
        num_requests: int | None = typer.Option(
            None, "--num-requests", "-n", help="Requests to generate (presets)."
        ),
        strict: bool = strict_option(),
        hash_block_size: int | None = hash_block_size_option(),
        seeds: int = typer.Option(3, min=1, help="Seeds (replicates) per rate."),
        rtol: float = typer.Option(0.02, help="Relative resolution of the rate search."),
        min_rate: float | None = typer.Option(None, help="Lowest rate to try."),
        max_rate: float | None = typer.Option(None, help="Highest rate to try."),
        executor: Executor = typer.Option(
            Executor.local, help="Where simulations run (a search takes seconds: local by default)."
        ),
        jobs: int = typer.Option(2, min=1, help="Workers (process pool or Ray CPUs)."),
        address: str | None = typer.Option(None, help="Ray cluster address (with --executor ray)."),
        compare_off: bool = typer.Option(
            True,
            "--compare-off/--no-compare-off",
            help="With --speculative-config: also search the deployment with speculation off and "
            "state the load where speculation stops paying (doubles the simulations).",
        ),
        out: Path | None = typer.Option(None, help="Write the JSON report here."),
        as_json: bool = typer.Option(False, "--json", help="Print the JSON report alone on stdout."),
        *,
        flags: dict[str, Any],
        deployment: DeploymentSpec,
    ) -> None:
        """Scale the arrival rate: goodput knee, saturation rate, curve and status per rate."""
        try:
            goal = cli_slo(slo)
            spec = deployment_spec(deployment, config, flags)
            hw = hardware_of(spec)
            wl = Workload.from_source(
                trace, seed=seed, num_requests=num_requests, strict=strict, hash_block_size=hash_block_size
            )
            say_drops(wl.provenance)
            _, applied = engine_values(spec, wl.default_max_model_len())
            dep = Deployment.from_spec(spec, wl.default_max_model_len())
            st = SaturationSettings(seeds=list(range(seeds)), rtol=rtol, min_rate=min_rate, max_rate=max_rate)
            ev = EvalSettings(router=RouterSpec(policy=spec.router))
            with progress_bar(not as_json, "rates") as hook:
                rep = find_saturation(
                    wl,
                    dep,
                    hw,
                    goal,
                    target_rate=target_rate or wl.base_rate,
                    settings=st,
                    eval_settings=ev,
                    executor=executor.value,
                    n_jobs=jobs,
                    address=address,
                    progress=hook,
                    compare_off=compare_off,
                )
            doc = stamped(
                "saturate",
                {**rep.model_dump(mode="json"), "trace_provenance": provenance_json(wl.provenance)},
            )
            if out is not None:
                write_text_atomic(out, json_bytes(doc).decode() + "\n")
            if as_json:
                print_json(doc)
            else:
                print_timed_as(hardware_timed_as(hw, spec.model is not None))
                if applied:
                    typer.echo(defaults_line(applied, spec))
                print_saturation(rep)
        except ERRORS as exc:
            fail(exc)

    @app.command("tune")
    def tune_cmd(
        trace: str = typer.Argument(..., help=TRACE_HELP),
        slo: str | None = typer.Option(
            None, help="Percentile SLOs, e.g. ttft_p99_ms=500,tpot_p99_ms=50[,e2e_p99_ms=...][,good=0.95]."
        ),
        target_rate: float | None = typer.Option(None, help="Load to plan for (default: the trace's rate)."),
        objective: ObjectiveChoice = typer.Option(
            ObjectiveChoice.goodput_per_gpu, help="goodput_per_gpu (TPE) or pareto (NSGA-II)."
        ),
        latency_metric: Metric = typer.Option(
            Metric.ttft, help="Latency objective of the Pareto front (p99)."
        ),
        trials: int = typer.Option(
            40, "--trials", "--n-trials", min=1, help="Trials this run adds to the study."
        ),
        space: list[str] = typer.Option(
            [],
            "--space",
            help="Override a knob: name=a,b,c | name=lo..hi[:step|:log] | name=value (repeatable).",
        ),
        space_file: Path | None = typer.Option(
            None, help="YAML/JSON search space (knob: choices or {low, high})."
        ),
        max_gpus: int | None = typer.Option(None, min=1, help="GPU budget: replicas x TP at most this."),
        config: Path | None = typer.Option(
            None,
            "--config",
            "-c",
            help="Your current vLLM config (YAML/JSON of vLLM keys): evaluated first, and the answer is "
            "never worse than it (default: vllm serve's defaults).",
        ),
        max_model_len: int | None = typer.Option(
            None, help="vLLM --max-model-len (default: longest request + 1)."
        ),
        policy: SchedulingPolicy = typer.Option("fcfs", help="Waiting-queue order (not searched)."),
        speculative_config: str | None = typer.Option(
            None,
            "--speculative-config",
            metavar="JSON",
            help="vLLM's --speculative-config (method, k, acceptance_rates...): searched as "
            "num_speculative_tokens in {0, its k} unless --space names that knob (0 = off).",
        ),
        router: RouterPolicy = typer.Option("least_outstanding", help="Router policy for several replicas."),
        model: str | None = typer.Option(
            None, help=f"Model (servesim perf catalog); default {DEFAULT_MODEL}."
        ),
        gpu: str | None = typer.Option(None, help=f"GPU (servesim perf catalog); default {DEFAULT_GPU}."),
        tp: int = typer.Option(1, "--tp", "--tensor-parallel-size", min=1, help="TP of a fixed step model."),
        gpu_memory_utilization: float = typer.Option(0.9, help="Memory share of a fixed step model."),
        profile: str | None = typer.Option(None, help="Calibration profile of the step-time model."),
        num_gpu_blocks: int | None = typer.Option(
            None, help="KV blocks per replica (override the memory model)."
        ),
        step_time_ms: float | None = typer.Option(None, help="Constant step time instead of the roofline."),
        linear_step_time: bool = typer.Option(
            False, help="servesim's linear step model instead of the roofline."
        ),
        seed: int = typer.Option(0, min=0, help="Seed of the sampler and of generated traces."),
        num_requests: int | None = typer.Option(
            None, "--num-requests", "-n", help="Requests to generate (presets)."
        ),
        strict: bool = strict_option(),
        hash_block_size: int | None = hash_block_size_option(),
        trial_seeds: int = typer.Option(2, min=1, help="Seeds (replicates) per trial."),
        verify_seeds: int = typer.Option(3, min=1, help="Fresh seeds re-verifying the recommendation."),
        storage: str | None = typer.Option(
            None,
            metavar="URL",
            help="Optuna RDB URL (resumable, shareable); 'memory' for none "
            "(default: SQLite servesim-tune.db in servesim's data folder).",
        ),
        study_name: str | None = typer.Option(None, help="Study name (default: derived from the settings)."),
        executor: Executor = typer.Option(Executor.process, help="Where trials run."),
        jobs: int = typer.Option(2, min=1, help="Workers and trials per round (process pool or Ray CPUs)."),
        address: str | None = typer.Option(None, help="Ray cluster address (with --executor ray)."),
        do_recommend: bool = typer.Option(
            True,
            "--recommend/--no-recommend",
            help="Verify and explain the best trial (off: only run trials).",
        ),
        out_dir: Path | None = typer.Option(
            None, help="Write the recommendation (JSON, YAML, command) here."
        ),
        gpu_hour_usd: float | None = typer.Option(
            None,
            min=0.0,
            help="$ per GPU-hour: the plan's $ a day and $ per 1M tokens (none: GPU-hours only).",
        ),
        out: Path | None = typer.Option(
            None, help="Write {study, recommendation} (the --json document, the report's input) here."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print {study, recommendation} alone on stdout."),
        layouts: str | None = typer.Option(
            None,
            help="Aggregated vs disaggregated at equal GPUs instead of the flag search: agg, disagg or "
            "agg,disagg (with --gpus).",
        ),
        gpus: int | None = typer.Option(None, min=1, max=64, help="GPU budget of every layout (--layouts)."),
        link: str = typer.Option("rdma-400g", help="KV-transfer link of disaggregated layouts (--layouts)."),
        short_prompt_tokens: int = typer.Option(
            0, min=0, help="Disaggregated layouts: prompts shorter than this prefill on the decode replica."
        ),
        prefill_batched_tokens: str | None = typer.Option(
            None, help="Prefill pool max_num_batched_tokens values to try, e.g. 2048,8192 (--layouts)."
        ),
        decode_max_seqs: str | None = typer.Option(
            None, help="Decode pool max_num_seqs values to try, e.g. 256,512 (--layouts)."
        ),
        break_even: bool = typer.Option(
            True,
            "--break-even/--no-break-even",
            help="Bisect the link bandwidth where disaggregation stops paying.",
        ),
    ) -> None:
        """Search vLLM flags, TP and replicas with Optuna; recommend, re-verified on fresh seeds.
        With --layouts/--gpus: aggregated vs disaggregated layouts of one GPU budget instead."""
        if layouts is not None or gpus is not None:
            try:
                run_layouts(
                    trace,
                    layouts=layouts,
                    gpus=gpus,
                    slo=slo,
                    model=model,
                    gpu=gpu,
                    step_time_ms=step_time_ms,
                    linear_step_time=linear_step_time,
                    link=link,
                    short_prompt_tokens=short_prompt_tokens,
                    prefill_batched_tokens=prefill_batched_tokens,
                    decode_max_seqs=decode_max_seqs,
                    break_even=break_even,
                    seed=seed,
                    num_requests=num_requests,
                    strict=strict,
                    hash_block_size=hash_block_size,
                    out=out,
                    as_json=as_json,
                    verify_seeds=verify_seeds,
                )
            except ERRORS as exc:
                fail(exc)
            return
        url = _storage(storage)
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is too much
        try:
            goal = cli_slo(slo)
            hw = hardware_from(
                model,
                gpu,
                tp,
                gpu_memory_utilization,
                profile,
                num_gpu_blocks,
                step_time_ms,
                linear_step_time,
            )
            wl = Workload.from_source(
                trace, seed=seed, num_requests=num_requests, strict=strict, hash_block_size=hash_block_size
            )
            say_drops(wl.provenance)
            sp = read_space(space, space_file)
            spec_cfg = SpeculativeConfig.model_validate(speculative_config) if speculative_config else None
            settings = TuneSettings(
                objective=objective.value,
                n_trials=trials,
                seed=seed,
                seeds=list(range(trial_seeds)),
                latency_metric=latency_metric.value,
                max_gpus=max_gpus,
            )
            ev = EvalSettings(router=RouterSpec(policy=router))
            mml = max_model_len or wl.default_max_model_len()
            current = None
            if config is not None:
                current_spec = DeploymentSpec(
                    gpu=gpu,
                    step_time_ms=step_time_ms,
                    linear_step_time=linear_step_time,
                    tp=tp,
                    gpu_memory_utilization=gpu_memory_utilization,
                    engine={**file_settings(config), "max_model_len": mml, "policy": policy},
                )
                current = Deployment.from_spec(current_spec, mml)
            if spec_cfg is None and current is not None:
                spec_cfg = current.speculative_config
            fixed: dict[str, Any] = {"policy": policy}
            if spec_cfg is not None:
                fixed["speculative_config"] = spec_cfg.model_dump(mode="json")
                if sp.num_speculative_tokens.choices == [0]:  # the knob left at off: search {0, k}
                    k = spec_cfg.num_speculative_tokens
                    sp = sp.with_overrides({"num_speculative_tokens": Knob(choices=[0, k])})
            ctx = EvalContext(wl, hw, goal, ev)
            rec: SchedulerRecommendation | None = None
            with make_executor(executor.value, ctx, n_jobs=jobs, address=address) as ex:
                with progress_bar(not as_json, "trials") as hook:
                    res = tune(
                        wl,
                        hw,
                        goal,
                        target_rate=target_rate,
                        space=sp,
                        settings=settings,
                        eval_settings=ev,
                        max_model_len=max_model_len,
                        fixed=fixed,
                        executor=ex,
                        n_jobs=jobs,
                        storage=url,
                        study_name=study_name,
                        progress=hook,
                        baseline=current,
                    )
                if do_recommend:
                    picks = res.shortlist(3) or ([res.nearest_miss.number] if res.nearest_miss else [])
                    if not picks:
                        raise InputError(
                            f"no trial of study {res.study_name} could run ({res.n_trials} trials, all "
                            "invalid): widen the search space (more replicas, --max-gpus)"
                        )
                    candidates = trial_deployments(res, picks, mml, policy, fixed)
                    with progress_bar(not as_json, "verifying") as hook:
                        rec = recommend(
                            wl,
                            hw,
                            goal,
                            candidates,
                            target_rate=res.target_rate_rps,
                            verify_seeds=[1000 + i for i in range(verify_seeds)],
                            eval_settings=ev,
                            executor=ex,
                            source={
                                "study": res.study_name,
                                "storage": url,
                                "objective": res.objective,
                                "trials": picks,
                                "baseline_trial": res.baseline.number if res.baseline else None,
                                "baseline_origin": "config" if current is not None else "vllm defaults",
                            },
                            progress=hook,
                            baseline=Deployment.model_validate(
                                {"max_model_len": mml, **fixed, **res.baseline.params}
                            )
                            if res.baseline is not None
                            else current,
                            add_capacity=True,
                            usd_per_gpu_hour=gpu_hour_usd,
                        )
            files = write_outbox(rec, out_dir) if (rec is not None and out_dir is not None) else []
            if url is not None and as_json:
                typer.echo(f"study {res.study_name} stored in {url}", err=True)
            document = stamped(
                "tune",
                {
                    "study": res.model_dump(mode="json"),
                    "recommendation": rec.model_dump(mode="json") if rec is not None else None,
                    "trace_provenance": provenance_json(wl.provenance),
                },
            )
            if out is not None:
                write_text_atomic(out, json_bytes(document).decode() + "\n")
                files.append(out)
            if as_json:
                print_json(document)
            else:
                print_timed_as(hardware_timed_as(hw, model is not None))
                print_tune(res)
                if rec is not None:
                    print_recommendation(rec)
                for f in files:
                    Console().print(f"written for review: {f}")
        except KeyboardInterrupt:
            where = f"in {url} as {study_name or 'the derived study name'}" if url else "in memory (lost)"
            typer.echo(
                f"interrupted; the finished trials are stored {where}: run the same command to resume",
                err=True,
            )
            raise typer.Exit(130) from None
        except ERRORS as exc:
            fail(exc)
