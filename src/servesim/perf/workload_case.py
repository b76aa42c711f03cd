"""A measured benchmark run as a calibration case, and re-simulating cases under a profile.

``WorkloadCase`` holds a run's workload (``RequestSet``), server settings and measured latency
statistics; ``CaseEvaluator`` re-simulates every case for a profile (client closed loops,
async-scheduling lag and front-end latency included, see ``servesim.perf.replay``), optionally in
worker processes; ``workload_residuals`` turns predictions into the fit's ln errors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servesim.engine import EngineConfig
from servesim.errors import InternalError
from servesim.perf.catalog import GPUSpec, ModelSpec
from servesim.perf.profile import HardwareProfile
from servesim.perf.replay import ReplayOutcome, RequestSet, replay, summarize_latencies
from servesim.perf.roofline import RooflineStepTime


@dataclass
class WorkloadCase:
    """One measured benchmark run: its workload, server settings and measured metrics (ms).

    ``targets`` keys are ``metric`` or ``stage:metric`` (stage = index in ``requests.stage``),
    metrics as ``summarize_latencies`` names them (``ttft_mean``, ``tpot_mean``, ``itl_mean``,
    ``itl_pooled_mean``, ``e2e_mean``, ...). ``counted_output_tokens`` (keys ``"-1"`` for the
    whole run, else the stage) is the client's mean output count where it is not what the engine
    generated (``summarize_latencies``).
    """

    name: str
    requests: RequestSet
    config: EngineConfig
    model: ModelSpec
    gpu: GPUSpec
    tp: int
    targets: dict[str, float]
    weight: float = 1.0
    max_rounds: int = 12
    info: dict[str, Any] = field(default_factory=dict)
    counted_output_tokens: dict[str, float] = field(default_factory=dict)

    def step_model(self, profile: HardwareProfile) -> RooflineStepTime:
        return RooflineStepTime(
            self.model,
            self.gpu,
            self.tp,
            profile,
            max_num_seqs=self.config.max_num_seqs,
            max_num_batched_tokens=self.config.max_num_batched_tokens,
        )

    def run(self, profile: HardwareProfile, warm: np.ndarray | None = None) -> ReplayOutcome:
        return replay(
            self.requests,
            self.config,
            self.step_model(profile),
            profile,
            max_rounds=self.max_rounds,
            initial_duration=warm,
        )

    def metrics(self, out: ReplayOutcome) -> dict[str, float]:
        res: dict[str, float] = {}
        stages = {k.split(":", 1)[0] for k in self.targets if ":" in k}
        counted = self.counted_output_tokens
        base = summarize_latencies(out, counted_output_tokens=counted.get("-1"))
        for k in self.targets:
            if ":" not in k and k in base:
                res[k] = base[k]
        for s in stages:
            if self.requests.stage is None:
                raise InternalError(f"{self.name}: stage targets need requests.stage")
            sm = summarize_latencies(out, self.requests.stage == int(s), counted_output_tokens=counted.get(s))
            for k in self.targets:
                st, _, metric = k.partition(":")
                if st == s and metric in sm:
                    res[k] = sm[metric]
        return res


def _evaluate_case(
    args: tuple[WorkloadCase, HardwareProfile, np.ndarray | None],
) -> tuple[dict[str, float], np.ndarray]:
    case, profile, warm = args
    out = case.run(profile, warm)
    return case.metrics(out), out.e2e


class CaseEvaluator:
    """Evaluates all cases for a profile. Closed-loop cases start from ``warm`` (client-side
    latencies of an earlier replay), which saves most fixed-point rounds."""

    def __init__(self, cases: Sequence[WorkloadCase], workers: int = 1) -> None:
        self.cases = list(cases)
        self.warm: list[np.ndarray | None] = [None] * len(self.cases)
        self._pool: Any = None
        if workers > 1 and len(self.cases) > 1:
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(max_workers=min(workers, len(self.cases)))

    def __call__(self, profile: HardwareProfile) -> tuple[list[dict[str, float]], list[np.ndarray | None]]:
        jobs = [(c, profile, w) for c, w in zip(self.cases, self.warm, strict=True)]
        results = (
            list(self._pool.map(_evaluate_case, jobs)) if self._pool else [_evaluate_case(j) for j in jobs]
        )
        closed = [
            c.requests.predecessor is not None or c.requests.max_concurrency is not None for c in self.cases
        ]
        durations = [e2e if cl else None for cl, (_, e2e) in zip(closed, results, strict=True)]
        return [m for m, _ in results], durations

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


#: A metric the replay could not produce (no finished request) counts as a factor 10 off.
MISSING_PENALTY = math.log(10.0)


def workload_residuals(cases: Sequence[WorkloadCase], preds: Sequence[Mapping[str, float]]) -> np.ndarray:
    """``weight / sqrt(n targets) x ln(predicted / measured)`` per case and target."""
    out: list[float] = []
    for c, p in zip(cases, preds, strict=True):
        w = c.weight / math.sqrt(max(len(c.targets), 1))
        for k in sorted(c.targets):
            v = p.get(k)
            t = c.targets[k]
            if v is None or not math.isfinite(v) or v <= 0:
                out.append(w * MISSING_PENALTY)
            else:
                out.append(w * math.log(v / t))
    return np.asarray(out, dtype=np.float64)


def predict_workloads(
    cases: Sequence[WorkloadCase], profile: HardwareProfile, workers: int = 1
) -> list[dict[str, float]]:
    """Each case's predicted metrics (ms) under ``profile``."""
    ev = CaseEvaluator(cases, workers)
    try:
        return ev(profile)[0]
    finally:
        ev.close()
