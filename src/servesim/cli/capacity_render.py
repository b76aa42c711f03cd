"""How ``servesim saturate`` and ``servesim tune`` show their answers to a person: the ``timed as``
and ``defaults`` lines, the views (``servesim.views``) as tables, the layouts' table, the
recommendation's files for review, and an error in the flags' words."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import optuna
import typer
from pydantic import ValidationError
from rich.console import Console

from servesim.cli.common import fail, print_timed_as, timed_as, write_text_atomic
from servesim.cli.tables import FitTable
from servesim.errors import shown, user_errors
from servesim.services.capacity import DeploymentFieldError
from servesim.services.deployment import DeploymentSpec
from servesim.services.layouts import LayoutAnswer
from servesim.services.tune import (
    DEFAULT_GPU,
    FixedHardware,
    Hardware,
    PerfHardware,
    SaturationReport,
    SchedulerRecommendation,
    TuneResult,
)
from servesim.views.selection import layout_choice_lines

#: What a capacity command reports as one line (exit 2): the user errors, and Optuna's (a study
#: storage that is locked, or holds another study); anything else is a bug (``common.report_bug``).
ERRORS: tuple[type[Exception], ...] = (*user_errors(), optuna.exceptions.OptunaError)
#: A deployment field's flag where it is not ``--`` + its name in kebab case.
FLAGS = {"tp": "--tp"}


#: The request fields (``SaturateRequest``, ``TuneRequest``, ``LayoutsRequest``) that are a flag
#: of the same name in kebab case on the commands that build them: refused, named as the flag.
REQUEST_FLAGS = frozenset(
    {
        "target_rate",
        "seeds",
        "rtol",
        "min_rate",
        "max_rate",
        "trials",
        "trial_seeds",
        "verify_seeds",
        "max_gpus",
        "gpu_hour_usd",
        "gpus",
        "short_prompt_tokens",
    }
)


def failed(exc: BaseException) -> NoReturn:
    """One line, exit 2; a deployment setting or a request's flag refused by the service named
    as its flag (``--target-rate nan: Input should be a finite number``)."""
    if isinstance(exc, DeploymentFieldError):
        fail(f"{FLAGS.get(exc.field, '--' + exc.field.replace('_', '-'))}: {exc.reason}")
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        loc = err["loc"]
        if len(loc) == 1 and loc[0] in REQUEST_FLAGS:
            value = err.get("input")
            said = f"{value:g}" if isinstance(value, float) else shown(value)
            msg = str(err["msg"]).removeprefix("Value error, ")
            fail(f"--{str(loc[0]).replace('_', '-')} {said}: {msg}")
    fail(exc)


def hardware_timed_as(hw: Hardware, model_given: bool, kv_cache_dtype: str = "auto") -> str:
    """The ``timed as`` line of a saturate/tune run's hardware (``kv_cache_dtype``: the
    deployment's, named as ``simulate`` names it)."""
    if isinstance(hw, PerfHardware):
        origin = (
            ""
            if model_given
            else " (the default deployment; --model/--gpu/--tp change it)"
            if hw.gpu == DEFAULT_GPU and hw.tensor_parallel_size == 1
            else " (no --model given: the default model)"
        )
        blocks = "KV blocks as given" if hw.num_gpu_blocks is not None else "KV blocks as vLLM sizes them"
        kv = "" if kv_cache_dtype == "auto" else f", {kv_cache_dtype} KV cache"
        return (
            f"{hw.model} on {hw.tensor_parallel_size} x {hw.gpu}{kv}, roofline step times; {blocks}{origin}"
        )
    if isinstance(hw, FixedHardware):
        from servesim.services.run import describe_model

        return timed_as(describe_model(hw.step_time), hw.num_gpu_blocks)
    return "a custom hardware model"


def defaults_line(applied: dict[str, Any], spec: DeploymentSpec) -> str:
    """``defaults: ...``: the vllm serve defaults a run started from (as ``simulate`` says it)."""
    values = ", ".join(f"{k} {v:,}" for k, v in applied.items())
    gpu = spec.timing_gpu
    where = f"on {gpu}" if gpu else "with no GPU timing the steps (small-GPU row)"
    return f"defaults: {values} (what vllm serve runs {where})"


def print_header(hw: Hardware, spec: DeploymentSpec, applied: dict[str, Any] | None = None) -> None:
    """The first lines of a human output: what times the steps, the defaults applied."""
    print_timed_as(hardware_timed_as(hw, spec.model is not None, spec.engine.get("kv_cache_dtype", "auto")))
    if applied:
        typer.echo(defaults_line(applied, spec))


def print_saturation(rep: SaturationReport) -> None:
    from servesim.cli.render import print_section
    from servesim.views.saturation import saturation_view

    print_section(saturation_view(rep))


def print_tune(res: TuneResult, top: int = 8) -> None:
    from servesim.cli.render import print_section
    from servesim.views.trials import trials_view

    print_section(trials_view(res, top), tables=["best_trials"] if res.ranked else ["infeasible"])


def print_recommendation(rec: SchedulerRecommendation) -> None:
    from servesim.cli.render import print_section
    from servesim.views.recommendation import recommendation_view

    shown = [
        "predicted",
        *(["error_bars"] if rec.error_bars else []),
        *(["baseline"] if rec.baseline else []),
        *(["changes"] if rec.changes else []),
        *(["capacity"] if rec.capacity else []),
        *(["selection"] if rec.selection else []),
    ]
    print_section(recommendation_view(rec), tables=shown)


def write_outbox(rec: SchedulerRecommendation, out_dir: Path) -> list[Path]:
    """The recommendation, its YAML, its command line and its Kubernetes manifest in a folder for
    review (nothing applied)."""
    from servesim.services.tune import recommendation_manifest

    note = "# Generated by servesim (simulation): review before use. One replica"
    note += f"; run {rec.replicas} behind the load balancer.\n" if rec.replicas > 1 else ".\n"
    commands = rec.deploy.commands if rec.deploy is not None else [rec.vllm_serve_command]
    return [
        write_text_atomic(out_dir / "recommendation.json", rec.model_dump_json(indent=2) + "\n"),
        write_text_atomic(out_dir / "vllm-config.yaml", rec.config_yaml),
        write_text_atomic(out_dir / "vllm-serve-command.txt", note + "\n".join(commands) + "\n"),
        write_text_atomic(out_dir / "vllm-k8s.yaml", recommendation_manifest(rec)),
    ]


def print_layouts(ans: LayoutAnswer, title: str) -> None:
    """The layouts compared (the Pareto front starred), the recommendation and its checks."""
    console = Console(highlight=False)
    console.print(title)
    caps = (
        ", ".join(f"{k} <= {v:g}" for k, v in ans.slo.items() if v is not None)
        or "none (every request counts)"
    )
    console.print(f"per-request SLO for goodput: {caps}; disaggregated over {ans.link}")
    if ans.engine:  # the checkpoint's format every layout ran with: the figures are of that
        kept = ", ".join(f"{k} {v}" for k, v in ans.engine.items())
        console.print(f"every layout runs {kept} (the deployment's, not searched)")
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
    for c in ans.commands:
        console.print(f"  {c}", soft_wrap=True)
    _print_checks(console, ans)


def _print_checks(console: Console, ans: LayoutAnswer) -> None:
    v = ans.verification
    if v is not None:
        seeds = ", ".join(
            f"{c.seed}: {c.recommended_per_gpu:.3f} vs {c.against_per_gpu:.3f}" for c in v.checks
        )
        console.print(f"fresh seeds ({v.recommended} vs {v.against}, goodput/GPU): {seeds}")
    for line in layout_choice_lines(ans, besides_reasons=True):  # the rule, what reasons do not say
        console.print(line)
    be = ans.break_even
    if be is not None and be.probes:
        probes = ", ".join(f"{g:.3g} Gbit/s -> {x:.3f}" for g, x in be.probes)
        console.print(f"  probes (goodput/GPU): {probes}")


__all__ = [
    "ERRORS",
    "defaults_line",
    "failed",
    "hardware_timed_as",
    "print_header",
    "print_layouts",
    "print_recommendation",
    "print_saturation",
    "print_tune",
    "write_outbox",
]
