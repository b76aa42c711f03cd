"""Measured runs against servesim's: a ``vllm bench serve`` result or a sim2real experiment,
re-run through the simulator as its client saw it.

* ``read_measured(data, name)``: an uploaded file checked at the door (its workload can be
  re-created; a benchmark reports some latency statistic), with the summary a list shows;
* ``replay_bench(bench, deployment, seed)``: the benchmark's own workload (its lengths, rate,
  burstiness and client concurrency, the send times seeded as vllm bench draws them) replayed
  under the deployment ``servesim.spec.resolve`` makes (closed loop, async-scheduling lag,
  front-end latency: ``servesim.perf.replay``);
* ``replay_experiment(data)``: a sim2real experiment re-run exactly as ``servesim sim2real`` does.

The comparison's view is ``servesim.views.measured``: the interface draws it from these answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servesim.errors import InputError
from servesim.perf.bench_io import BenchServeResult, bench_samples, parse_bench_result

if TYPE_CHECKING:
    from servesim.perf.replay import ReplayOutcome, RequestSet
    from servesim.perf.sim2real import Sim2RealExperiment
    from servesim.spec import DeploymentSpec, ResolvedDeployment


class TooManyRequests(InputError):
    """A benchmark with more requests than the server re-runs."""


class NoLatencyStatistic(InputError):
    """A benchmark result that reports no latency to compare with."""


@dataclass(frozen=True)
class MeasuredRun:
    """An uploaded measured run, checked: what it is and what a list shows of it."""

    format: str  # "vllm-bench" | "sim2real"
    summary: dict[str, Any]


def _experiment(data: Any, name: str) -> MeasuredRun:
    from servesim.perf.sim2real import experiment_stats, parse_experiment

    exp = parse_experiment(data, name)
    exp.model_spec(), exp.gpu_spec(), exp.spec  # the deployment and workload can be re-created
    summary = {
        "format": "sim2real",
        "model_id": exp.model,
        "experiment": exp.id,
        "num_prompts": None,
        "request_rate": None,
        "detailed": False,
        "stats": experiment_stats(exp),
    }
    return MeasuredRun("sim2real", summary)


def bench_summary(result: BenchServeResult) -> dict[str, Any]:
    """What a list shows of a stored benchmark (the statistics it reports, the workload's shape)."""
    return {
        "format": "vllm-bench",
        "model_id": result.model_id,
        "num_prompts": result.num_prompts,
        "completed": result.completed,
        "failed": result.failed,
        "request_rate": result.request_rate,
        "burstiness": result.burstiness,
        "max_concurrency": result.max_concurrency,
        "detailed": result.detailed,
        "stats": result.stats(),
    }


def read_measured(data: Any, name: str, *, max_requests: int) -> MeasuredRun:
    """A sim2real experiment or a ``vllm bench serve --save-result`` file, checked: the workload
    can be re-created, a benchmark has at most ``max_requests`` requests (``TooManyRequests``,
    checked before its requests are made) and reports a latency (``NoLatencyStatistic``)."""
    from servesim.perf.bench_io import bench_requests
    from servesim.perf.sim2real import is_experiment

    if is_experiment(data):
        return _experiment(data, name)
    result = parse_bench_result(data, name)
    n = len(result.input_lens or ()) or result.num_prompts or result.completed or 0
    if n > max_requests:
        raise TooManyRequests(f"{name}: {n:,} requests; this server re-runs at most {max_requests:,}")
    bench_requests(result, name)  # the workload can be re-created (lengths, count)
    if len(result.stats()) == 0:
        raise NoLatencyStatistic(f"{name}: no latency statistic to compare (mean_ttft_ms, p99_e2el_ms, ...)")
    return MeasuredRun("vllm-bench", bench_summary(result))


def is_experiment(data: Any) -> bool:
    """A sim2real experiment (else a benchmark result)."""
    from servesim.perf.sim2real import is_experiment as check

    return check(data)


@dataclass(frozen=True)
class BenchReplay:
    """A benchmark's workload replayed on a deployment."""

    requests: RequestSet
    setup: ResolvedDeployment
    outcome: ReplayOutcome


def replay_bench(bench: BenchServeResult, deployment: DeploymentSpec, seed: int) -> BenchReplay:
    """The benchmark's requests (send times seeded ``seed``) replayed as its client saw them on
    ``deployment`` (its KV cache sized for the longest request)."""
    from servesim.perf.bench_io import bench_requests
    from servesim.perf.profile import HardwareProfile
    from servesim.perf.replay import replay
    from servesim.spec import resolve

    rs = bench_requests(bench, "the benchmark", seed=seed)
    longest = int((rs.prompt_len + rs.output_len).max()) + 1
    setup = resolve(deployment, max_model_len=longest)
    profile = getattr(setup.step_time, "profile", None)
    out = replay(
        rs,
        setup.config,
        setup.step_time,
        profile if isinstance(profile, HardwareProfile) else HardwareProfile(),
    )
    return BenchReplay(requests=rs, setup=setup, outcome=out)


@dataclass(frozen=True)
class ExperimentReplay:
    """A sim2real experiment re-run: its predictions, the replay, and how it was set up."""

    experiment: Sim2RealExperiment
    prediction: dict[str, Any]
    outcome: ReplayOutcome
    info: dict[str, Any]
    measured: dict[str, dict[str, float]]


def replay_experiment(data: Any) -> ExperimentReplay:
    """The experiment's workload and deployment re-created as ``servesim sim2real`` does (its
    model, GPU, TP, limits, the same default profile)."""
    from servesim.perf.sim2real import (
        default_experiment_profile,
        experiment_stats,
        parse_experiment,
        run_experiment,
    )

    exp = parse_experiment(data, "the experiment")
    pred, out, info = run_experiment(exp, default_experiment_profile([exp]))
    return ExperimentReplay(
        experiment=exp, prediction=pred, outcome=out, info=info, measured=experiment_stats(exp)
    )


__all__ = [
    "BenchReplay",
    "BenchServeResult",
    "ExperimentReplay",
    "MeasuredRun",
    "NoLatencyStatistic",
    "TooManyRequests",
    "bench_samples",
    "bench_summary",
    "is_experiment",
    "parse_bench_result",
    "read_measured",
    "replay_bench",
    "replay_experiment",
]
