"""When no scheduler setting meets the SLO on the given hardware: how much capacity does.

``find_capacity`` keeps the deployment's flags and adds replicas (GPUs = replicas x TP): it doubles
the count until the fresh-seed runs meet the SLO with a stable queue, then bisects between the
last count that failed and the first that held, so the answer is the fewest replicas that meet
it (to one replica, assuming more replicas never hurt). Every count tried is reported.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from servesim.tuning.deployment import Deployment
from servesim.tuning.evaluate import RunMetrics
from servesim.tuning.executors import Executor
from servesim.tuning.jobs import RunJob
from servesim.tuning.slo import PercentileSLO


class CapacityTry(BaseModel):
    replicas: int
    gpus: int
    meets: bool = Field(description="Every fresh seed met the SLO with a stable queue.")
    saturated_runs: int
    ttft_p99_ms: float = Field(description="Worst seed.")
    e2e_p99_ms: float = Field(description="Worst seed.")


class CapacityAnswer(BaseModel):
    """The target load is beyond these flags on this many GPUs; this many replicas meet the SLO."""

    flags_replicas: int = Field(description="Replicas of the deployment that missed.")
    flags_gpus: int
    replicas: int | None = Field(description="Fewest replicas that meet the SLO (None: none up to the cap).")
    gpus: int | None
    max_replicas: int
    tried: list[CapacityTry]


def runs_meet(runs: Sequence[RunMetrics], slo: PercentileSLO | None) -> bool:
    """Every run has a stable queue and (with an SLO) meets it."""
    return not any(r.queue_saturated for r in runs) and (slo is None or all(r.slo_ok for r in runs))


def find_capacity(
    ex: Executor,
    d: Deployment,
    rate: float,
    seeds: Sequence[int],
    slo: PercentileSLO | None,
    *,
    max_replicas: int = 64,
) -> tuple[CapacityAnswer, Deployment | None, list[RunMetrics] | None]:
    """The fewest replicas of ``d``'s flags that meet the SLO at ``rate`` (and their runs)."""
    tried: dict[int, tuple[bool, list[RunMetrics]]] = {}

    def check(n: int) -> bool:
        if n not in tried:
            v = d.model_copy(update={"replicas": n})
            runs: list[RunMetrics] = ex.map([RunJob(v, rate, s) for s in seeds])
            tried[n] = (runs_meet(runs, slo), runs)
        return tried[n][0]

    lo, hi = d.replicas, None
    n = d.replicas
    while n < max_replicas:
        n = min(max_replicas, max(n + 1, 2 * n))
        if check(n):
            hi = n
            break
        lo = n
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if check(mid):
                hi = mid
            else:
                lo = mid
    answer = CapacityAnswer(
        flags_replicas=d.replicas,
        flags_gpus=d.gpus,
        replicas=hi,
        gpus=None if hi is None else hi * d.gpus_per_replica,
        max_replicas=max_replicas,
        tried=[
            CapacityTry(
                replicas=k,
                gpus=k * d.gpus_per_replica,
                meets=ok,
                saturated_runs=sum(r.queue_saturated for r in runs),
                ttft_p99_ms=max(r.ttft_ms.p99 for r in runs),
                e2e_p99_ms=max(r.e2e_ms.p99 for r in runs),
            )
            for k, (ok, runs) in sorted(tried.items())
        ],
    )
    if hi is None:
        return answer, None, None
    return answer, d.model_copy(update={"replicas": hi}), tried[hi][1]
