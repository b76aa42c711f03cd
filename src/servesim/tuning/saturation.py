"""Saturation: how far the arrival rate can go before the SLOs break and before the queue does.

Rates live on a geometric lattice ``r_k = r_ref x (1 + rtol)^k`` around a reference rate (the
target rate, else the workload's own). Two thresholds are searched on it, sharing evaluations:

* the **SLO knee** (``goodput_knee_rps``): the highest rate at which the SLOs hold on *every*
  seed with a stable queue (``slo_holds``);
* the **unstable rate** (``saturation_rps``): the lowest rate at which the queue is unstable on
  most seeds (the slope test of ``stats.queue_trend``, or load shedding by the queue timeout).

**One capacity number.** ``find_saturation`` is the one code path of both: ``servesim saturate``,
the headroom of ``tune``'s recommendation (``recommend`` calls it with the runs it has just made at
the target rate), the demo, the web and the report all read these two figures from it, measured
on the fresh seeds (``workload.fresh_seeds``: traffic no search saw), so the same trace, SLO and
deployment give the same knee wherever it is asked.

Each search brackets by doubling (or halving) the rate from ``r_ref`` until the verdict flips,
then bisects the lattice indices, so each threshold is found to within one lattice step
(``rtol``, 2 % by default) with about ``log2(range) + log2(1/rtol)`` evaluations of a few seeds
each. The search assumes the verdict flips once as the rate grows; noise near a threshold can
make it flip back, which the reported brackets (last rate passing, first rate failing) and the
per-seed spreads show. Every evaluated rate is a point of the throughput-latency curve, plus a
few at fixed fractions of the saturation rate (``curve_fractions``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from servesim.errors import InputError
from servesim.tuning.deployment import Deployment, resolve_deployment
from servesim.tuning.evaluate import EvalSettings, RatePoint, RunMetrics, Status
from servesim.tuning.executors import Executor, ExecutorKind, LocalExecutor, make_executor
from servesim.tuning.hardware import Hardware
from servesim.tuning.jobs import EvalContext, RunJob
from servesim.tuning.slo import PercentileSLO
from servesim.tuning.workload import Workload, fresh_seeds

Progress = Callable[[int, int], None]


class SaturationSettings(BaseModel):
    """The rate search: lattice resolution, range, seeds, curve points."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seeds: list[int] = Field(
        default_factory=lambda: fresh_seeds(3),
        min_length=1,
        description="Replicate seeds (default: the three fresh seeds every capacity figure uses).",
    )
    rtol: float = Field(0.02, gt=0, le=0.5, description="Lattice step: relative resolution of the rates.")
    min_rate: float | None = Field(None, gt=0, description="Lowest rate tried (default reference / 256).")
    max_rate: float | None = Field(None, gt=0, description="Highest rate tried (default reference x 256).")
    curve_fractions: tuple[float, ...] = Field(
        (0.25, 0.5, 0.75, 0.9, 1.1, 1.25),
        description="Extra curve points, as fractions of the saturation rate.",
    )


class SaturationReport(BaseModel):
    """Both thresholds, the curve, and the status at the target rate."""

    workload: dict[str, Any]
    hardware: dict[str, Any]
    deployment: Deployment
    num_gpu_blocks: int = Field(description="KV blocks per replica.")
    slo: PercentileSLO | None
    settings: SaturationSettings
    reference_rate_rps: float = Field(description="r_ref of the lattice.")
    target_rate_rps: float | None
    goodput_knee_rps: float | None = Field(
        description="Highest rate meeting the SLOs on every seed with a stable queue."
    )
    knee_first_failing_rps: float | None = Field(description="The next lattice rate (fails).")
    saturation_rps: float | None = Field(description="Lowest rate at which the queue is unstable.")
    max_stable_rps: float | None = Field(description="The lattice rate below it (stable).")
    status_at_target: Status | None
    headroom: float | None = Field(description="saturation_rps / target - 1.")
    knee_headroom: float | None = Field(description="goodput_knee_rps / target - 1.")
    points: list[RatePoint] = Field(description="Every rate evaluated, by rate.")
    num_simulations: int
    notes: list[str] = Field(default_factory=list)
    speculation: SpeculationComparison | None = Field(
        None,
        description="With speculative decoding on: the same deployment with it off, rate by rate, "
        "and where speculation stops paying; left out when the deployment does not speculate.",
    )

    @model_serializer(mode="wrap")
    def _drop_absent_speculation(self, handler: Any) -> Any:
        """A deployment without speculation keeps its document byte for byte (no ``speculation``)."""
        d = handler(self)
        if isinstance(d, dict) and d.get("speculation", 0) is None:
            del d["speculation"]
        return d


class SpeculationComparison(BaseModel):
    """Speculation on against off on the same rates: TPOT, goodput, and the crossover load."""

    method: str
    num_speculative_tokens: int
    mean_acceptance_length: float | None = Field(
        None,
        description="Expected tokens per verifying step (1 + accepted drafts) under the config's "
        "acceptance rates (a trace's spec_accept_rate column overrides them per request).",
    )
    rates_rps: list[float] = Field(description="The rates both deployments ran at, ascending.")
    tpot_p50_on_ms: list[float] = Field(description="TPOT p50 with speculation (mean over seeds).")
    tpot_p50_off_ms: list[float] = Field(description="TPOT p50 without it (mean over seeds).")
    goodput_on_rps: list[float]
    goodput_off_rps: list[float]
    off_goodput_knee_rps: float | None = Field(description="The SLO knee with speculation off.")
    off_saturation_rps: float | None = Field(description="The saturation rate with speculation off.")
    crossover_rps: float | None = Field(
        description="The lowest rate compared at which speculation's TPOT p50 is no better than off's "
        "(None: it pays at every rate compared)."
    )
    pays_up_to_rps: float | None = Field(
        description="The highest rate below the crossover (every compared rate when it always pays); "
        "None when it pays at none."
    )
    num_simulations: int = Field(description="Simulations of the off deployment and the extra rates.")


SaturationReport.model_rebuild()


class RateSearch:
    """Evaluates rates of one deployment on a lattice, caching every point."""

    def __init__(
        self,
        workload: Workload,
        deployment: Deployment,
        hardware: Hardware,
        slo: PercentileSLO | None,
        settings: SaturationSettings,
        eval_settings: EvalSettings,
        executor: Executor,
        reference_rate: float,
        progress: Progress | None = None,
    ) -> None:
        self.workload = workload
        self.deployment = deployment
        self.hardware = hardware
        self.slo = slo
        self.settings = settings
        self.eval_settings = eval_settings
        self.executor = executor
        self.ref = reference_rate
        self.progress = progress
        self.step = math.log1p(settings.rtol)
        lo = settings.min_rate or reference_rate / 256
        hi = settings.max_rate or reference_rate * 256
        if lo > hi:
            raise InputError(f"min_rate {lo} > max_rate {hi}")
        self.kmin = math.ceil(math.log(lo / reference_rate) / self.step - 1e-9)
        self.kmax = math.floor(math.log(hi / reference_rate) / self.step + 1e-9)
        if self.kmin > 0 or self.kmax < 0:
            raise InputError(f"the reference rate {reference_rate:g} is outside [{lo:g}, {hi:g}]")
        self.jump = max(1, round(math.log(2.0) / self.step))
        self.points: dict[int, RatePoint] = {}
        self.simulations = 0

    def rate(self, k: int) -> float:
        return self.ref * math.exp(k * self.step)

    def index(self, rate: float) -> int:
        return round(math.log(rate / self.ref) / self.step)

    def point(self, k: int) -> RatePoint:
        if k not in self.points:
            rate = self.rate(k)
            jobs = [RunJob(self.deployment, rate, s) for s in self.settings.seeds]
            runs: list[RunMetrics] = self.executor.map(jobs)
            self.simulations += len(runs)
            self.points[k] = RatePoint.of(rate, runs, self.eval_settings, self.slo is not None)
            if self.progress is not None:
                self.progress(len(self.points), len(self.points) + self._remaining_estimate())
        return self.points[k]

    def _remaining_estimate(self) -> int:
        return 2 * max(1, math.ceil(math.log2(self.jump))) + len(self.settings.curve_fractions)

    def threshold(self, ok: Callable[[RatePoint], bool]) -> tuple[int | None, int | None]:
        """(highest index passing, lowest index failing) around the single flip of ``ok``;
        None where the range holds no such index."""
        if ok(self.point(0)):
            lo = 0
            while True:
                k = min(lo + self.jump, self.kmax)
                if k == lo:
                    return lo, None
                if ok(self.point(k)):
                    lo = k
                else:
                    hi = k
                    break
        else:
            hi = 0
            while True:
                k = max(hi - self.jump, self.kmin)
                if k == hi:
                    return None, hi
                if not ok(self.point(k)):
                    hi = k
                else:
                    lo = k
                    break
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(self.point(mid)):
                lo = mid
            else:
                hi = mid
        return lo, hi


def stable(p: RatePoint) -> bool:
    return not p.queue_saturated


def slo_holds(p: RatePoint) -> bool:
    """The SLO holds at a rate when its p99s meet the caps *and* the queue is stable: where the
    queue grows without bound the tail only reflects how long the run lasted, so a knee above the
    unstable rate would promise headroom that a longer burst takes away."""
    return bool(p.slo_ok) and stable(p)


def find_saturation(
    workload: Workload,
    deployment: Deployment,
    hardware: Hardware,
    slo: PercentileSLO | None = None,
    *,
    target_rate: float | None = None,
    settings: SaturationSettings | None = None,
    eval_settings: EvalSettings | None = None,
    executor: ExecutorKind | Executor = "local",
    n_jobs: int = 2,
    address: str | None = None,
    progress: Progress | None = None,
    compare_off: bool = True,
    known: Sequence[RunMetrics] = (),
) -> SaturationReport:
    """Search the SLO knee (with an SLO) and the unstable rate of ``deployment``. With
    speculative decoding on and ``compare_off``, the same search runs with it off, both run at
    every rate either evaluated, and ``speculation`` says where speculation stops paying.
    ``known``: runs of ``deployment`` already made at the reference rate on ``settings.seeds``
    (``recommend``'s verification runs), used as that rate's point instead of running it again."""
    st = settings or SaturationSettings()
    ev = eval_settings or EvalSettings()
    config, res = resolve_deployment(deployment, hardware)  # fail early, with the reason
    ref = target_rate or workload.base_rate
    if ref is None:
        raise InputError(f"{workload.name} has no arrival rate: give a target rate")
    if known and [r.seed for r in known] != list(st.seeds):
        raise InputError("the known runs must be the search's seeds, in order")
    ctx = EvalContext(workload, hardware, slo, ev)

    def run(ex: Executor) -> SaturationReport:
        search = RateSearch(workload, deployment, hardware, slo, st, ev, ex, ref, progress)
        if known:
            search.points[0] = RatePoint.of(ref, list(known), ev, slo is not None)
        rep = _search(
            search, workload, deployment, hardware, slo, st, target_rate, config.num_gpu_blocks, res
        )
        sc = deployment.speculative()
        if sc is None or not compare_off:
            return rep
        off_dep = deployment.model_copy(update={"num_speculative_tokens": 0})
        off = RateSearch(workload, off_dep, hardware, slo, st, ev, ex, ref, progress)
        off_rep = _search(off, workload, off_dep, hardware, slo, st, target_rate, config.num_gpu_blocks, res)
        before = search.simulations
        ks = sorted(set(search.points) | set(off.points))
        on_points = [search.point(k) for k in ks]
        off_points = [off.point(k) for k in ks]
        cmp = _compare(sc.method, sc.num_speculative_tokens, on_points, off_points, off_rep)
        cmp = cmp.model_copy(
            update={
                "num_simulations": off.simulations + search.simulations - before,
                "mean_acceptance_length": 1.0 + sc.mean_accepted(),
            }
        )
        return rep.model_copy(
            update={
                "points": [search.points[k] for k in sorted(search.points)],
                "num_simulations": search.simulations,
                "speculation": cmp,
            }
        )

    if not isinstance(executor, str):
        return run(executor)
    with make_executor(executor, ctx, n_jobs=n_jobs, address=address) as ex:
        return run(ex)


def _compare(
    method: str,
    k: int,
    on: Sequence[RatePoint],
    off: Sequence[RatePoint],
    off_rep: SaturationReport,
) -> SpeculationComparison:
    """Rate by rate: the crossover is the lowest rate whose TPOT p50 with speculation is no lower
    than without (speculation's extra verification work outweighs its extra tokens per step)."""
    rates = [p.rate_rps for p in on]
    t_on = [p.tpot_ms.p50.mean for p in on]
    t_off = [p.tpot_ms.p50.mean for p in off]
    cross = next((i for i, (a, b) in enumerate(zip(t_on, t_off, strict=True)) if a >= b), None)
    pays = rates[-1] if cross is None else (rates[cross - 1] if cross > 0 else None)
    return SpeculationComparison(
        method=method,
        num_speculative_tokens=k,
        rates_rps=rates,
        tpot_p50_on_ms=t_on,
        tpot_p50_off_ms=t_off,
        goodput_on_rps=[p.goodput_rps.mean for p in on],
        goodput_off_rps=[p.goodput_rps.mean for p in off],
        off_goodput_knee_rps=off_rep.goodput_knee_rps,
        off_saturation_rps=off_rep.saturation_rps,
        crossover_rps=None if cross is None else rates[cross],
        pays_up_to_rps=pays,
        num_simulations=0,
    )


def _search(
    search: RateSearch,
    workload: Workload,
    deployment: Deployment,
    hardware: Hardware,
    slo: PercentileSLO | None,
    st: SaturationSettings,
    target_rate: float | None,
    blocks: int,
    res: Any,
) -> SaturationReport:
    notes = list(res.notes)
    s_lo, s_hi = search.threshold(stable)
    k_lo = k_hi = None
    if slo is not None:
        k_lo, k_hi = search.threshold(slo_holds)
    if s_hi is not None:
        for f in st.curve_fractions:
            k = search.index(search.rate(s_hi) * f)
            if search.kmin <= k <= search.kmax:
                search.point(k)
    if s_hi is None:
        notes.append(
            f"the queue grew without bound at no rate tried, up to {search.rate(search.kmax):.3g} req/s"
        )
    if s_lo is None:
        notes.append(
            f"the queue was unstable down to the lowest rate tried ({search.rate(search.kmin):.3g} req/s)"
        )
    if slo is not None and k_lo is None:
        notes.append("the SLOs failed at every rate tried")
    sat = search.rate(s_hi) if s_hi is not None else None
    knee = search.rate(k_lo) if k_lo is not None else None
    target_point = search.points[0] if target_rate is not None else None
    return SaturationReport(
        workload=workload.describe(),
        hardware=hardware.describe(),
        deployment=deployment,
        num_gpu_blocks=blocks,
        slo=slo,
        settings=st,
        reference_rate_rps=search.ref,
        target_rate_rps=target_rate,
        goodput_knee_rps=knee,
        knee_first_failing_rps=search.rate(k_hi) if k_hi is not None else None,
        saturation_rps=sat,
        max_stable_rps=search.rate(s_lo) if s_lo is not None else None,
        status_at_target=target_point.status if target_point is not None else None,
        headroom=(sat / target_rate - 1.0) if sat is not None and target_rate else None,
        knee_headroom=(knee / target_rate - 1.0) if knee is not None and target_rate else None,
        points=[search.points[k] for k in sorted(search.points)],
        num_simulations=search.simulations,
        notes=notes,
    )


def scan_rates(
    workload: Workload,
    deployment: Deployment,
    hardware: Hardware,
    rates: Sequence[float],
    slo: PercentileSLO | None = None,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    eval_settings: EvalSettings | None = None,
) -> list[RatePoint]:
    """Brute force: every rate of ``rates`` on every seed (the reference the search is tested
    against, and a plain curve when you want one on your own grid)."""
    ev = eval_settings or EvalSettings()
    ex = LocalExecutor(EvalContext(workload, hardware, slo, ev))
    out = []
    for rate in rates:
        runs = ex.map([RunJob(deployment, rate, s) for s in seeds])
        out.append(RatePoint.of(rate, runs, ev, slo is not None))
    return out
