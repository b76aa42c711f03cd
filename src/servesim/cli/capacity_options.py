"""The options of ``servesim saturate`` and ``servesim tune``, declared once and handed to the
command as a few values (as ``engine_flags`` hands it the engine settings).

Why: the two commands share the trace's options (seed, size, strictness), where their runs go and
the SLO; ``tune`` adds a study's options and the layouts question's. Declared here as groups
(``trace_options``, ``run_options``, ``study_options``, ``layout_options``), each collected
into one frozen value, so a command's function is its flags' meaning (the request it builds)
and not forty declarations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from servesim import tune_defaults
from servesim.bounds import MAX_SEED
from servesim.cli.engine_flags import option, with_options
from servesim.cli.trace_input import HASH_BLOCK_HELP, STRICT_HELP
from servesim.errors import InputError
from servesim.services.capacity import Execution
from servesim.services.cluster import RouterPolicy
from servesim.services.deployment import DeploymentSpec
from servesim.services.inputs import TraceInput

F = TypeVar("F", bound=Callable[..., Any])

TRACE_HELP = (
    "Trace file or bundled trace (its timeline is rescaled), or a generator preset / arrival name "
    "(its rate is replaced), e.g. default, poisson_10_rps, azure-conv."
)
SLO_HELP = "Percentile SLOs, e.g. ttft_p99_ms=500,tpot_p99_ms=50[,e2e_p99_ms=...][,good=0.95]."

TraceArg = Annotated[str, typer.Argument(help=TRACE_HELP)]
SloOpt = Annotated[str | None, typer.Option(help=SLO_HELP)]
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML/JSON file of vLLM keys.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the JSON document alone on stdout.")]


class ExecutorKind(StrEnum):
    local = "local"
    process = "process"
    ray = "ray"


class ObjectiveChoice(StrEnum):
    goodput_per_gpu = "goodput_per_gpu"
    pareto = "pareto"


class PruningChoice(StrEnum):
    rungs = "rungs"
    none = "none"


class Metric(StrEnum):
    ttft = "ttft"
    tpot = "tpot"
    e2e = "e2e"


def _group(name: str, options: dict[str, tuple[Any, Any]], make: Callable[..., Any]) -> Callable[[F], F]:
    """A decorator giving a command ``options`` and passing them as ``make(**values)`` in ``name``."""

    def decorate(func: F) -> F:
        return with_options(func, dict(options), name, lambda values: make(**values), "config")

    return decorate


# ------------------------------------------------------------------------------ the trace
@dataclass(frozen=True)
class TraceFlags:
    """How to read the TRACE argument: generated traces' size and seed, skipped rows, hash blocks."""

    seed: int
    num_requests: int | None
    strict: bool
    hash_block_size: int | None

    def input(self, source: str) -> TraceInput:
        return TraceInput(
            source=source,
            seed=self.seed,
            num_requests=self.num_requests,
            strict=self.strict,
            hash_block_size=self.hash_block_size,
        )


def trace_options(seed_help: str) -> Callable[[F], F]:
    """``--seed``, ``-n/--num-requests``, ``--strict``, ``--hash-block-size`` as ``source: TraceFlags``."""
    return _group(
        "source",
        {
            "seed": (int, typer.Option(0, "--seed", min=0, max=MAX_SEED, help=seed_help)),
            "num_requests": (
                int | None,
                typer.Option(None, "--num-requests", "-n", help="Requests to generate (presets)."),
            ),
            "strict": (bool, typer.Option(False, "--strict", help=STRICT_HELP)),
            "hash_block_size": (
                int | None,
                typer.Option(
                    None, "--hash-block-size", min=1, max=1 << 20, metavar="TOKENS", help=HASH_BLOCK_HELP
                ),
            ),
        },
        TraceFlags,
    )


# ------------------------------------------------------------------------------ the runs
def run_options(default: ExecutorKind, executor_help: str, jobs_help: str) -> Callable[[F], F]:
    """``--executor``, ``--jobs``, ``--address`` as ``run: Execution``."""

    def make(executor: ExecutorKind, jobs: int, address: str | None) -> Execution:
        return Execution(executor=executor.value, jobs=jobs, address=address)

    return _group(
        "run",
        {
            "executor": (ExecutorKind, typer.Option(default, help=executor_help)),
            "jobs": (int, typer.Option(2, min=1, max=1024, help=jobs_help)),
            "address": (str | None, typer.Option(None, help="Ray cluster address (with --executor ray).")),
        },
        make,
    )


# ------------------------------------------------------------------------------ the study
@dataclass(frozen=True)
class StudyFlags:
    """``tune``'s study: objective, budget, space, seeds, storage, what to write."""

    objective: ObjectiveChoice
    latency_metric: Metric
    trials: int
    space: list[str]
    space_file: Path | None
    max_gpus: int | None
    max_rejection_rate: float
    trial_seeds: int
    pruning: PruningChoice
    verify_seeds: int
    storage: str | None
    study_name: str | None
    recommend: bool
    out_dir: Path | None
    gpu_hour_usd: float | None
    gpu_types: str | None
    gpu_price: str | None
    gpu_prices: Path | None
    router: RouterPolicy


_STUDY: dict[str, tuple[Any, Any]] = {
    "objective": (
        ObjectiveChoice,
        typer.Option(ObjectiveChoice.goodput_per_gpu, help="goodput_per_gpu (TPE) or pareto (NSGA-II)."),
    ),
    "latency_metric": (
        Metric,
        typer.Option(Metric.ttft, help="Latency objective of the Pareto front (p99)."),
    ),
    "trials": (
        int,
        typer.Option(
            tune_defaults.TRIALS, "--trials", "--n-trials", min=1, help="Trials this run adds to the study."
        ),
    ),
    "space": (
        list[str],
        typer.Option(
            [],
            "--space",
            help="Override a knob: name=a,b,c | name=lo..hi[:step|:log] | name=value (repeatable).",
        ),
    ),
    "space_file": (
        Path | None,
        typer.Option(None, help="YAML/JSON search space (knob: choices or {low, high})."),
    ),
    "max_gpus": (int | None, typer.Option(None, min=1, help="GPU budget: replicas x TP x PP at most this.")),
    "max_rejection_rate": (
        float,
        typer.Option(
            0.0,
            min=0.0,
            max=1.0,
            help="Fraction of requests a trial may answer HTTP 503 (--max-num-queued-reqs/-tokens) and "
            "stay feasible: the budget within which rejections may buy TTFT. Default 0: none.",
        ),
    ),
    "trial_seeds": (
        int,
        typer.Option(tune_defaults.TRIAL_SEEDS, min=1, max=20, help="Seeds (replicates) per trial."),
    ),
    "pruning": (
        PruningChoice,
        typer.Option(
            PruningChoice.none,
            help="rungs: stop a trial early when a GPU bound, the first quarter of the trace or its capacity "
            "probe proves it cannot be the recommendation (docs/tuning.md); none: every trial in full.",
        ),
    ),
    "verify_seeds": (
        int,
        typer.Option(
            tune_defaults.VERIFY_SEEDS,
            min=1,
            max=20,
            help="Fresh seeds re-verifying the recommendation (and its headroom).",
        ),
    ),
    "storage": (
        str | None,
        typer.Option(
            None,
            metavar="FILE|URL",
            help="Where the study is kept (resumable, shareable): a journal file, or an Optuna RDB "
            "URL such as sqlite:///study.db; 'memory' for none "
            "(default: the journal servesim-tune.journal in servesim's data folder).",
        ),
    ),
    "study_name": (str | None, typer.Option(None, help="Study name (default: derived from the settings).")),
    "recommend": (
        bool,
        typer.Option(
            True,
            "--recommend/--no-recommend",
            help="Verify and explain the best trial (off: only run trials).",
        ),
    ),
    "out_dir": (Path | None, typer.Option(None, help="Write the recommendation (JSON, YAML, command) here.")),
    "gpu_hour_usd": (
        float | None,
        typer.Option(
            None,
            help="$ per GPU-hour of the plan's $ an hour, a day and per 1M tokens (default: the GPU's list "
            "price, servesim.perf.prices).",
        ),
    ),
    "gpu_types": (
        str | None,
        typer.Option(
            None,
            help="Compare GPU types, e.g. h100,h200,l40s: one study each (memory fit checked first), the "
            "cheapest meeting the SLO recommended.",
        ),
    ),
    "gpu_price": (
        str | None,
        typer.Option(None, help="$ per GPU-hour over the list prices, e.g. h100=2.5,l40s=0.9."),
    ),
    "gpu_prices": (
        Path | None,
        typer.Option(None, help="YAML file of $ per GPU-hour by GPU (gpu: price), over the list prices."),
    ),
    "router": option("router", DeploymentSpec.model_fields["router"], keep_default=True),
}


def study_options(func: F) -> F:
    """``tune``'s study options as ``study: StudyFlags``."""
    return _group("study", _STUDY, StudyFlags)(func)


# ------------------------------------------------------------------------------ the layouts
@dataclass(frozen=True)
class LayoutFlags:
    """``tune --layouts agg,disagg --gpus N``: the layouts question instead of the flag search."""

    layouts: str | None
    gpus: int | None
    link: str
    short_prompt_tokens: int
    prefill_batched_tokens: str | None
    decode_max_seqs: str | None
    break_even: bool

    @property
    def asked(self) -> bool:
        return self.layouts is not None or self.gpus is not None


_LAYOUTS: dict[str, tuple[Any, Any]] = {
    "layouts": (
        str | None,
        typer.Option(
            None,
            help="Aggregated vs disaggregated at equal GPUs instead of the flag search: agg, disagg or "
            "agg,disagg (with --gpus); dpep adds a MoE model's --data-parallel-size x TP with "
            "--enable-expert-parallel. Every layout runs --quantization / --kv-cache-dtype as given "
            "(the checkpoint's).",
        ),
    ),
    "gpus": (int | None, typer.Option(None, min=1, max=64, help="GPU budget of every layout (--layouts).")),
    "link": (str, typer.Option("rdma-400g", help="KV-transfer link of disaggregated layouts (--layouts).")),
    "short_prompt_tokens": (
        int,
        typer.Option(
            0, min=0, help="Disaggregated layouts: prompts shorter than this prefill on the decode replica."
        ),
    ),
    "prefill_batched_tokens": (
        str | None,
        typer.Option(
            None, help="Prefill pool max_num_batched_tokens values to try, e.g. 2048,8192 (--layouts)."
        ),
    ),
    "decode_max_seqs": (
        str | None,
        typer.Option(None, help="Decode pool max_num_seqs values to try, e.g. 256,512 (--layouts)."),
    ),
    "break_even": (
        bool,
        typer.Option(
            True,
            "--break-even/--no-break-even",
            help="Bisect the link bandwidth where disaggregation stops paying.",
        ),
    ),
}


def layout_options(func: F) -> F:
    """``tune``'s layouts options as ``layout: LayoutFlags``."""
    return _group("layout", _LAYOUTS, LayoutFlags)(func)


def _given(flags: object, table: dict[str, tuple[Any, Any]], keep: frozenset[str]) -> list[str]:
    """The flags of ``table`` given a value other than their default (``--no-x`` for a switch
    turned off), less ``keep``: what a mode that does not read them must refuse."""
    out = []
    for name, (_, opt) in table.items():
        value, default = getattr(flags, name), opt.default
        if name in keep or value == default:
            continue
        decl = next((d for d in opt.param_decls if d.startswith("--")), f"--{name.replace('_', '-')}")
        on, _, off = decl.partition("/")
        if off:  # a switch: its name says its value
            out.append(off if value is False else on)
            continue
        shown_value = ",".join(map(str, value)) if isinstance(value, list) else getattr(value, "value", value)
        out.append(f"{on} {shown_value}")
    return out


def study_flags_given(study: StudyFlags) -> list[str]:
    """The flag search's flags given to ``tune --layouts`` (it reads only --verify-seeds)."""
    return _given(study, _STUDY, frozenset({"verify_seeds"}))


def layout_flags_given(layout: LayoutFlags) -> list[str]:
    """The layouts question's flags given to the flag search (which reads none of them)."""
    return _given(layout, _LAYOUTS, frozenset())


# ------------------------------------------------------------------------------ checks
def check_timing(spec: DeploymentSpec, *, needs_blocks: bool = True) -> None:
    """Step-time flags that contradict each other, refused in the flags' words before any work."""
    if not spec.fixed_timing:
        return
    if spec.step_time_ms is not None and spec.linear_step_time:
        raise InputError("give --step-time-ms or --linear-step-time, not both")
    if spec.model is not None or spec.gpu is not None:
        raise InputError(
            "--model/--gpu choose roofline step times; --step-time-ms / --linear-step-time replace them: "
            "give one or the other"
        )
    if needs_blocks and spec.engine.get("num_gpu_blocks") is None:
        raise InputError("a fixed step-time model needs --num-gpu-blocks (there is no memory model)")


__all__ = [
    "TRACE_HELP",
    "ConfigOpt",
    "ExecutorKind",
    "JsonOpt",
    "LayoutFlags",
    "Metric",
    "ObjectiveChoice",
    "SloOpt",
    "StudyFlags",
    "TraceArg",
    "TraceFlags",
    "check_timing",
    "layout_options",
    "run_options",
    "study_options",
    "trace_options",
]
