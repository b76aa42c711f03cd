"""Aggregated or disaggregated? Layouts of one GPU budget, simulated and compared.

For ``gpus`` GPUs the space (``layout_space``) holds every aggregated layout (``r`` replicas of
TP ``t``, ``r x t = gpus``) and every disaggregated one (``x`` prefill replicas of TP ``tp`` and
``y`` decode replicas of TP ``td``, ``x tp + y td = gpus``), each pool with its own vLLM flags
(``prefill_batched_tokens`` / ``decode_max_seqs`` values; None: vllm serve's default). Every
layout runs the same trace: aggregated ones on ``servesim.cluster``'s simulator (no failures),
disaggregated ones on ``PDCluster`` over the chosen link (``evaluate``).

Each point is scored by **goodput per GPU**: requests that met the per-request thresholds (TTFT
<= the SLO's TTFT cap, TPOT <= its TPOT cap, the trace's own SLAs: ``engine.results.good_mask``,
the test of every run) per second of the run (``per_second``), over the GPUs; next to it
TTFT p99 and TPOT p99. The Pareto front keeps the points no other beats on all three
(``pareto_front``). The recommendation is the front's best goodput per GPU (ties: lower TTFT
p99), explained against the best layout of the other kind: which SLO disaggregation buys, or why
aggregated wins.

**Break-even bandwidth** (``break_even_bandwidth``): the link bandwidth below which the best
disaggregated layout's goodput per GPU falls under the best aggregated one's. Transfers only get
slower as bandwidth falls, so goodput is taken as monotone in it and bisected (in log space,
between ``lo`` and the link's bandwidth), each probe a full simulation, as the recovery planner's
break-even gives the bandwidth where migrating stops paying.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import InputError
from servesim.traces.schema import Trace

TPS = (1, 2, 4, 8)


class Layout(BaseModel):
    """One way to spend the GPU budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["agg", "disagg"]
    replicas: int = Field(0, ge=0, description="Aggregated: replicas.")
    tp: int = Field(1, ge=1, description="Aggregated: TP of a replica.")
    prefill_replicas: int = Field(0, ge=0)
    prefill_tp: int = Field(1, ge=1)
    decode_replicas: int = Field(0, ge=0)
    decode_tp: int = Field(1, ge=1)
    prefill_config: dict[str, int] = Field(default_factory=dict, description="vLLM keys of the prefill pool.")
    decode_config: dict[str, int] = Field(default_factory=dict, description="vLLM keys of the decode pool.")

    @property
    def gpus(self) -> int:
        if self.kind == "agg":
            return self.replicas * self.tp
        return self.prefill_replicas * self.prefill_tp + self.decode_replicas * self.decode_tp

    @property
    def label(self) -> str:
        if self.kind == "agg":
            return f"agg {self.replicas}xTP{self.tp}"
        flags = "".join(f" P.{k}={v}" for k, v in self.prefill_config.items())
        flags += "".join(f" D.{k}={v}" for k, v in self.decode_config.items())
        return (
            f"{self.prefill_replicas}P{self.decode_replicas}D TP{self.prefill_tp}/TP{self.decode_tp}{flags}"
        )


def layout_space(
    gpus: int,
    layouts: Sequence[str] = ("agg", "disagg"),
    *,
    tps: Sequence[int] = TPS,
    prefill_batched_tokens: Sequence[int | None] = (None,),
    decode_max_seqs: Sequence[int | None] = (None,),
) -> list[Layout]:
    """Every layout of exactly ``gpus`` GPUs (see the module docstring), aggregated first."""
    if gpus < 1:
        raise InputError(f"--gpus must be >= 1, got {gpus}")
    bad = set(layouts) - {"agg", "disagg"}
    if bad or not layouts:
        raise InputError(f"--layouts: use agg, disagg or agg,disagg (got {','.join(layouts) or 'nothing'})")
    out: list[Layout] = []
    if "agg" in layouts:
        out += [Layout(kind="agg", replicas=gpus // t, tp=t) for t in tps if gpus % t == 0]
    if "disagg" in layouts:
        for tp_p in tps:
            for tp_d in tps:
                for x in range(1, gpus // tp_p + 1):
                    rest = gpus - x * tp_p
                    if rest < tp_d or rest % tp_d:
                        continue
                    for mbt in prefill_batched_tokens:
                        for mns in decode_max_seqs:
                            out.append(
                                Layout(
                                    kind="disagg",
                                    prefill_replicas=x,
                                    prefill_tp=tp_p,
                                    decode_replicas=rest // tp_d,
                                    decode_tp=tp_d,
                                    prefill_config={} if mbt is None else {"max_num_batched_tokens": mbt},
                                    decode_config={} if mns is None else {"max_num_seqs": mns},
                                )
                            )
    if not out:
        raise InputError(f"no {' or '.join(layouts)} layout fits {gpus} GPUs with TP in {list(tps)}")
    return out


class LayoutPoint(BaseModel):
    label: str
    layout: Layout
    gpus: int
    good_requests: int
    num_requests: int
    goodput_rps: float
    goodput_per_gpu: float
    ttft_p99_ms: float
    tpot_p99_ms: float | None
    e2e_p99_ms: float
    meets_p99: bool = Field(description="TTFT p99 and TPOT p99 within the SLO's caps.")
    pareto: bool = False


class BreakEven(BaseModel):
    layout: str = Field(description="The disaggregated layout bisected.")
    against: str = Field(description="The aggregated layout it has to beat.")
    link: str
    link_gbps: float
    gbps: float | None = Field(description="Below this bandwidth per TP rank it stops beating it.")
    note: str
    probes: list[tuple[float, float]] = Field(description="(Gbit/s, goodput per GPU) simulated.")


class SeedCheck(BaseModel):
    seed: int
    recommended_per_gpu: float
    against_per_gpu: float
    recommended_meets_p99: bool


class LayoutVerification(BaseModel):
    """The recommendation and the best layout of the other kind, re-run on fresh seeds: traffic
    the comparison never saw (``Workload``'s seeds: redrawn arrivals, or circular shifts of a
    recorded trace), as every other ``tune`` recommendation is re-verified."""

    recommended: str = Field(description="The layout the search trace ranked first.")
    against: str = Field(description="The best layout of the other kind on the search trace.")
    checks: list[SeedCheck]
    holds: bool = Field(description="Its mean goodput per GPU over the fresh seeds is at least the other's.")
    wins: int = Field(description="Fresh seeds on which it was at least as good.")
    note: str


class LayoutAnswer(BaseModel):
    gpus: int
    slo: dict[str, float | None]
    link: str
    points: list[LayoutPoint]
    best_agg: str | None
    best_disagg: str | None
    recommended: str
    reasons: list[str]
    break_even: BreakEven | None
    verification: LayoutVerification | None = Field(
        None, description="Fresh-seed re-runs of the recommendation against the other kind's best."
    )


# ---------------------------------------------------------------------------------------- runs
class LayoutRunner:
    """Runs a layout on the trace: the pools resolved as ``servesim cluster`` resolves them
    (vllm serve's defaults on the GPU, KV sized for the trace)."""

    def __init__(
        self,
        trace: Trace,
        *,
        model: str,
        gpu: str | None,
        step_time_ms: float | None = None,
        linear_step_time: bool = False,
        link: str = "rdma-400g",
        short_prompt_tokens: int = 0,
        ttft_ms: float | None = None,
        tpot_ms: float | None = None,
    ) -> None:
        self.trace = trace
        self.model = model
        self.gpu = gpu
        self.step_time_ms = step_time_ms
        self.linear = linear_step_time
        self.link = link
        self.short = short_prompt_tokens
        self.ttft_ms = ttft_ms
        self.tpot_ms = tpot_ms

    def with_trace(self, trace: Trace) -> LayoutRunner:
        """The same layouts' runner on other traffic (a fresh seed's)."""
        other = LayoutRunner.__new__(LayoutRunner)
        other.__dict__.update(self.__dict__)
        other.trace = trace
        return other

    @property
    def timed(self) -> bool:
        return self.step_time_ms is not None or self.linear

    def _replicas(self, tag: str, n: int, tp: int, keys: dict[str, Any]) -> list[Any]:
        from servesim.spec import DeploymentSpec, resolve_replicas

        base = DeploymentSpec(
            model=None if self.timed else self.model,
            gpu=self.gpu,
            tp=None if self.timed else tp,
            step_time_ms=self.step_time_ms,
            linear_step_time=self.linear,
        )
        return [
            rep
            for rep, _ in resolve_replicas(base, [(f"{tag}{i}", dict(keys)) for i in range(n)], self.trace)
        ]

    def _spec(self, lay: Layout) -> Any:
        from servesim.cluster.pd import DisaggSpec, PoolSpec

        return DisaggSpec(
            prefill=PoolSpec(
                replicas=lay.prefill_replicas, tp=lay.prefill_tp, config=dict(lay.prefill_config)
            ),
            decode=PoolSpec(replicas=lay.decode_replicas, tp=lay.decode_tp, config=dict(lay.decode_config)),
            link=self.link,
            short_prompt_tokens=self.short,
            model=self.model,
        )

    def link_gbps(self, lay: Layout) -> float:
        return float(self._spec(lay).context().bandwidth_gbps)

    def latencies(self, lay: Layout, bandwidth_gbps: float | None = None) -> tuple[pd.DataFrame, float]:
        """Each request's outcome and TTFT/TPOT/E2E in ms (TPOT NaN: one output token), in trace
        order, as ``engine.results.good_mask`` reads them, the same in seconds (``*_s``: the
        p99s are taken of those), and the run's span in seconds."""
        if lay.kind == "agg":
            from servesim.cluster import simulate_cluster

            reps = self._replicas("n", lay.replicas, lay.tp, {})
            df = simulate_cluster(self.trace, reps, pooled_itl=False, replica_summaries=False).requests
            span = float(df["finish_s"].max() - df["arrival_s"].min()) if len(df) else 0.0
            out = df[["outcome", "ttft_ms", "tpot_ms", "e2e_ms"]].reset_index(drop=True)
            for m in ("ttft", "tpot", "e2e"):
                out[f"{m}_s"] = out[f"{m}_ms"].to_numpy(dtype=np.float64) / 1000.0
            return out, span
        from servesim.cluster.pd import PDCluster
        from servesim.engine.results import OUTCOME_FINISHED

        spec = self._spec(lay)
        ctx = spec.context()
        if bandwidth_gbps is not None:
            ctx = ctx.with_bandwidth(bandwidth_gbps)
        p = self._replicas("p", lay.prefill_replicas, lay.prefill_tp, lay.prefill_config)
        d = self._replicas("d", lay.decode_replicas, lay.decode_tp, lay.decode_config)
        run = PDCluster(self.trace, p, d, ctx, short_prompt_tokens=self.short).run()
        reqs = [run.decode_req[i] for i in sorted(run.decode_req)]  # every one finished (no failures)
        ttft = np.array([r.first_token - r.arrival for r in reqs], dtype=np.float64)
        tpot = np.array(
            [
                (r.finish_time - r.first_token) / (r.num_output - 1) if r.num_output > 1 else math.nan
                for r in reqs
            ],
            dtype=np.float64,
        )
        e2e = np.array([r.finish_time - r.arrival for r in reqs], dtype=np.float64)
        frame = pd.DataFrame(
            {
                "outcome": [OUTCOME_FINISHED] * len(reqs),
                "ttft_ms": ttft * 1000.0,
                "tpot_ms": tpot * 1000.0,
                "e2e_ms": e2e * 1000.0,
                "ttft_s": ttft,
                "tpot_s": tpot,
                "e2e_s": e2e,
            }
        )
        span = max(r.finish_time for r in reqs) - min(r.arrival for r in reqs) if reqs else 0.0
        return frame, span

    def point(self, lay: Layout, bandwidth_gbps: float | None = None) -> LayoutPoint:
        """The layout scored: good requests by the engine's own test (``good_mask``: finished,
        within the TTFT/TPOT thresholds and the trace's per-request SLAs) per second of the run
        (``per_second``), over its GPUs; and the p99s."""
        from servesim.engine.results import SLO, good_mask, per_second

        frame, span = self.latencies(lay, bandwidth_gbps)
        sla = self.trace.df
        slo = (
            SLO(ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms)
            if self.ttft_ms is not None or self.tpot_ms is not None
            else None
        )
        good = good_mask(
            frame,
            slo,
            sla["sla_ttft_ms"].to_numpy(dtype=np.float64),
            sla["sla_e2e_ms"].to_numpy(dtype=np.float64),
        )
        n_good = int(good.sum())
        rate = per_second(n_good, span)
        ttft = frame["ttft_s"].to_numpy(dtype=np.float64)
        ttft = ttft[~np.isnan(ttft)]
        tpot = frame["tpot_s"].to_numpy(dtype=np.float64)
        e2e = frame["e2e_s"].to_numpy(dtype=np.float64)
        e2e = e2e[~np.isnan(e2e)]
        tp = tpot[~np.isnan(tpot)]
        t99 = float(np.percentile(ttft, 99) * 1000.0) if len(ttft) else 0.0
        o99 = float(np.percentile(tp, 99) * 1000.0) if len(tp) else None
        meets = (self.ttft_ms is None or t99 <= self.ttft_ms) and (
            self.tpot_ms is None or o99 is None or o99 <= self.tpot_ms
        )
        return LayoutPoint(
            label=lay.label,
            layout=lay,
            gpus=lay.gpus,
            good_requests=n_good,
            num_requests=len(frame),
            goodput_rps=rate,
            goodput_per_gpu=rate / lay.gpus,
            ttft_p99_ms=t99,
            tpot_p99_ms=o99,
            e2e_p99_ms=float(np.percentile(e2e, 99) * 1000.0) if len(e2e) else 0.0,
            meets_p99=meets,
        )


def pareto_front(points: Sequence[LayoutPoint]) -> list[int]:
    """Indices of the points no other dominates (goodput per GPU up, TTFT p99 and TPOT p99 down)."""

    def key(p: LayoutPoint) -> tuple[float, float, float]:
        return (-p.goodput_per_gpu, p.ttft_p99_ms, p.tpot_p99_ms if p.tpot_p99_ms is not None else 0.0)

    keys = [key(p) for p in points]
    front = []
    for i, a in enumerate(keys):
        dominated = any(
            all(b[j] <= a[j] for j in range(3)) and any(b[j] < a[j] for j in range(3))
            for k, b in enumerate(keys)
            if k != i
        )
        if not dominated:
            front.append(i)
    return front


def _best(points: Sequence[LayoutPoint], kind: str) -> LayoutPoint | None:
    pts = [p for p in points if p.layout.kind == kind]
    return min(pts, key=lambda p: (-p.goodput_per_gpu, p.ttft_p99_ms), default=None)


def break_even_bandwidth(
    runner: LayoutRunner,
    disagg: Layout,
    agg_goodput_per_gpu: float,
    against: str,
    *,
    lo_gbps: float = 0.1,
    iterations: int = 7,
) -> BreakEven:
    """The bandwidth per TP rank below which ``disagg`` stops beating ``agg_goodput_per_gpu``
    (bisection between ``lo_gbps`` and the link's bandwidth; module docstring)."""
    hi = runner.link_gbps(disagg)
    probes: list[tuple[float, float]] = []

    def wins(gbps: float) -> bool:
        g = runner.point(disagg, gbps).goodput_per_gpu
        probes.append((gbps, g))
        return g > agg_goodput_per_gpu

    common = {"layout": disagg.label, "against": against, "link": runner.link, "link_gbps": hi}
    if not wins(hi):
        return BreakEven(
            **common,
            gbps=None,
            note=f"{disagg.label} does not beat {against} even at {hi:g} Gbit/s",
            probes=probes,
        )
    if wins(lo_gbps):
        return BreakEven(
            **common,
            gbps=None,
            note=(
                f"{disagg.label} still beats {against} at {lo_gbps:g} Gbit/s: the link is not what limits it"
            ),
            probes=probes,
        )
    a, b = math.log(lo_gbps), math.log(hi)  # loses at a, wins at b
    for _ in range(iterations):
        mid = 0.5 * (a + b)
        if wins(math.exp(mid)):
            b = mid
        else:
            a = mid
    gbps = math.exp(b)
    return BreakEven(
        **common,
        gbps=gbps,
        note=(
            f"below about {gbps:.3g} Gbit/s per TP rank ({math.exp(a):.3g}-{gbps:.3g} bracketed) "
            f"{disagg.label} no longer beats {against} on goodput per GPU"
        ),
        probes=probes,
    )


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} ms"


def _explain(rec: LayoutPoint, agg: LayoutPoint | None, dis: LayoutPoint | None) -> list[str]:
    out = [
        f"{rec.label}: {rec.goodput_per_gpu:.3f} good requests/s per GPU "
        f"({rec.good_requests} of {rec.num_requests} within the SLO)"
    ]
    if agg is None or dis is None:
        out.append("only one kind of layout was searched: nothing to weigh it against")
        return out
    other = agg if rec.layout.kind == "disagg" else dis
    out.append(
        f"vs {other.label}: {other.goodput_per_gpu:.3f} per GPU; TTFT p99 {_ms(rec.ttft_p99_ms)} vs "
        f"{_ms(other.ttft_p99_ms)}, TPOT p99 {_ms(rec.tpot_p99_ms)} vs {_ms(other.tpot_p99_ms)}"
    )
    d_tpot, a_tpot = dis.tpot_p99_ms or 0.0, agg.tpot_p99_ms or 0.0
    buys = []
    if d_tpot < a_tpot:
        buys.append(f"TPOT p99 ({_ms(a_tpot)} -> {_ms(d_tpot)}: decodes no longer share steps with prefills)")
    if dis.ttft_p99_ms < agg.ttft_p99_ms:
        buys.append(
            f"TTFT p99 ({_ms(agg.ttft_p99_ms)} -> {_ms(dis.ttft_p99_ms)}: "
            "prefills no longer queue behind decodes)"
        )
    costs = []
    if d_tpot > a_tpot:
        costs.append("TPOT p99")
    if dis.ttft_p99_ms > agg.ttft_p99_ms:
        costs.append("TTFT p99 (the transfer and the hand-off are on every request's path)")
    if rec.layout.kind == "disagg":
        out.append("disaggregation buys " + (" and ".join(buys) if buys else "goodput only, not a lower p99"))
        if costs:
            out.append("at the cost of " + " and ".join(costs))
    else:
        why = (
            f"the best disaggregated layout, {dis.label}, gets {dis.goodput_per_gpu:.3f} per GPU"
            + (f"; it would buy {' and '.join(buys)}" if buys else "")
            + (f" but costs {' and '.join(costs)}" if costs else "")
        )
        out.append(f"aggregated wins: {why}; splitting the GPUs leaves each pool idle part of the time")
    return out


def compare_layouts(
    runner: LayoutRunner,
    gpus: int,
    layouts: Sequence[str] = ("agg", "disagg"),
    *,
    tps: Sequence[int] = TPS,
    prefill_batched_tokens: Sequence[int | None] = (None,),
    decode_max_seqs: Sequence[int | None] = (None,),
    break_even: bool = True,
    lo_gbps: float = 0.1,
    progress: Callable[[str], None] | None = None,
    fresh: Callable[[int], LayoutRunner] | None = None,
    verify_seeds: Sequence[int] = (),
) -> LayoutAnswer:
    """Every layout of the budget simulated; the front, the recommendation and the break-even.

    With ``fresh`` (a runner on the traffic of a seed) and ``verify_seeds``, the recommendation is
    re-run against the best layout of the other kind on each seed (``verify_layouts``); if it does
    not hold there on average, the other one is recommended instead, and the reasons say why."""
    if runner.timed:
        tps = (1,)  # a fixed step time does not change with TP
    space = layout_space(
        gpus, layouts, tps=tps, prefill_batched_tokens=prefill_batched_tokens, decode_max_seqs=decode_max_seqs
    )
    points = []
    for lay in space:
        if progress is not None:
            progress(lay.label)
        points.append(runner.point(lay))
    front = pareto_front(points)
    points = [p.model_copy(update={"pareto": i in front}) for i, p in enumerate(points)]
    agg, dis = _best(points, "agg"), _best(points, "disagg")
    on_front = [points[i] for i in front]
    rec = min(on_front, key=lambda p: (-p.goodput_per_gpu, p.ttft_p99_ms))
    check = None
    if fresh is not None and verify_seeds and agg is not None and dis is not None:
        other = dis if rec.layout.kind == "agg" else agg
        check = verify_layouts(fresh, rec, other, verify_seeds, progress)
        if not check.holds:
            rec = other
    be = None
    if break_even and agg is not None and dis is not None:
        be = break_even_bandwidth(runner, dis.layout, agg.goodput_per_gpu, agg.label, lo_gbps=lo_gbps)
    reasons = _explain(rec, agg, dis)
    if check is not None:
        reasons.append(check.note)
    if be is not None:
        reasons.append(be.note)
    return LayoutAnswer(
        gpus=gpus,
        slo={"ttft_ms": runner.ttft_ms, "tpot_ms": runner.tpot_ms},
        link=runner.link,
        points=points,
        best_agg=agg.label if agg else None,
        best_disagg=dis.label if dis else None,
        recommended=rec.label,
        reasons=reasons,
        break_even=be,
        verification=check,
    )


def verify_layouts(
    fresh: Callable[[int], LayoutRunner],
    rec: LayoutPoint,
    other: LayoutPoint,
    seeds: Sequence[int],
    progress: Callable[[str], None] | None = None,
) -> LayoutVerification:
    """``rec`` and ``other`` on each seed's traffic: does the search trace's ranking hold?"""
    checks = []
    for seed in seeds:
        if progress is not None:
            progress(f"fresh seed {seed}")
        runner = fresh(seed)
        a, b = runner.point(rec.layout), runner.point(other.layout)
        checks.append(
            SeedCheck(
                seed=seed,
                recommended_per_gpu=a.goodput_per_gpu,
                against_per_gpu=b.goodput_per_gpu,
                recommended_meets_p99=a.meets_p99,
            )
        )
    mean_a = sum(c.recommended_per_gpu for c in checks) / len(checks)
    mean_b = sum(c.against_per_gpu for c in checks) / len(checks)
    wins = sum(c.recommended_per_gpu >= c.against_per_gpu for c in checks)
    holds = mean_a >= mean_b
    seeds_txt = ", ".join(str(s) for s in seeds)
    if holds:
        note = (
            f"re-run on {len(checks)} fresh seeds ({seeds_txt}): {rec.label} {mean_a:.3f} vs "
            f"{other.label} {mean_b:.3f} good requests/s per GPU on average, at least as good on {wins} "
            f"of {len(checks)}"
        )
    else:
        note = (
            f"{rec.label} led on the search trace but not on {len(checks)} fresh seeds ({seeds_txt}): "
            f"{mean_a:.3f} vs {other.label} {mean_b:.3f} good requests/s per GPU on average (at least as "
            f"good on {wins} of {len(checks)}), so {other.label} is recommended: the lead was the "
            "trace's, not the layout's"
        )
    return LayoutVerification(
        recommended=rec.label, against=other.label, checks=checks, holds=holds, wins=wins, note=note
    )


__all__ = [
    "TPS",
    "BreakEven",
    "Layout",
    "LayoutAnswer",
    "LayoutPoint",
    "LayoutRunner",
    "LayoutVerification",
    "SeedCheck",
    "break_even_bandwidth",
    "compare_layouts",
    "layout_space",
    "pareto_front",
    "verify_layouts",
]
