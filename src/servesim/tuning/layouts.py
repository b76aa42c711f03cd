"""Aggregated or disaggregated? Layouts of one GPU budget, simulated and compared.

For ``gpus`` GPUs the space (``layout_space``) holds every aggregated layout (``r`` replicas of
TP ``t``, ``r x t = gpus``), with ``dpep`` every data-parallel one of a MoE model (one ``vllm serve
--data-parallel-size d --enable-expert-parallel`` of ``d >= 2`` ranks of TP ``t``, ``d x t =
gpus``: the ranks in lockstep, ``servesim.spec.data_parallel``) and every disaggregated one
(``x`` prefill replicas of TP ``tp`` and ``y`` decode replicas of TP ``td``, ``x tp + y td =
gpus``), each pool with its own vLLM flags (``prefill_batched_tokens`` / ``decode_max_seqs``
values; None: vllm serve's default). Every layout runs the same trace: aggregated ones on
``servesim.cluster``'s simulator (no failures), data-parallel ones as ``simulate
--data-parallel-size`` runs them, disaggregated ones on ``PDCluster`` over the chosen link
(``evaluate``).

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

from pydantic import BaseModel, Field

from servesim.errors import InputError
from servesim.perf.errors import MemoryFitError
from servesim.tuning.layout_choice import choose_layout, fewest_gpus, verification
from servesim.tuning.layout_models import (
    BreakEven,
    FewestGpus,
    Layout,
    LayoutChoice,
    LayoutPoint,
    LayoutRun,
    LayoutVerification,
    SeedCheck,
)
from servesim.tuning.layout_runs import DEPLOYMENT_KEYS, LayoutRunner

TPS = (1, 2, 4, 8)


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
    bad = set(layouts) - {"agg", "disagg", "dpep"}
    if bad or not layouts:
        raise InputError(
            f"--layouts: use agg, disagg, dpep or a list of them (got {','.join(layouts) or 'nothing'})"
        )
    out: list[Layout] = []
    if "agg" in layouts:
        out += [Layout(kind="agg", replicas=gpus // t, tp=t) for t in tps if gpus % t == 0]
    if "dpep" in layouts:
        out += [Layout(kind="dpep", dp=gpus // t, tp=t) for t in tps if gpus % t == 0 and gpus // t >= 2]
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


class LayoutAnswer(BaseModel):
    gpus: int
    engine: dict[str, str] = Field(
        default_factory=dict,
        description="The deployment's own vLLM keys every layout ran with (quantization, "
        "kv_cache_dtype: the checkpoint's weight format and the KV dtype, not searched).",
    )
    commands: list[str] = Field(
        default_factory=list,
        description="The recommended layout's vllm serve lines, one per pool (none: a fixed step time).",
    )
    slo: dict[str, float | None]
    link: str
    points: list[LayoutPoint]
    best_agg: str | None
    best_disagg: str | None
    recommended: str
    reasons: list[str]
    break_even: BreakEven | None
    verification: LayoutVerification | None = Field(
        None, description="Fresh-seed re-runs of the search trace's lead against the other kind's best."
    )
    choice: LayoutChoice | None = Field(
        None, description="How the recommendation was chosen: a winner only beyond noise, else the simpler."
    )
    fewest_gpus: FewestGpus | None = Field(
        None, description="The fewest GPUs whose layout meets the SLO on every seed (None: no SLO)."
    )
    break_even_note: str | None = Field(
        None, description="Why no break-even bandwidth is given (not probed, or the probe found none)."
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


def _versus(rec: LayoutPoint, other: LayoutPoint) -> str:
    return (
        f"vs {other.label}: {other.goodput_per_gpu:.3f} per GPU; TTFT p99 {_ms(rec.ttft_p99_ms)} vs "
        f"{_ms(other.ttft_p99_ms)}, TPOT p99 {_ms(rec.tpot_p99_ms)} vs {_ms(other.tpot_p99_ms)}"
    )


def _explain(
    rec: LayoutPoint, agg: LayoutPoint | None, dis: LayoutPoint | None, dpep: LayoutPoint | None = None
) -> list[str]:
    out = [
        f"{rec.label}: {rec.goodput_per_gpu:.3f} good requests/s per GPU "
        f"({rec.good_requests} of {rec.num_requests} within the SLO)"
    ]
    if rec.layout.kind == "dpep" or agg is None or dis is None:
        # not aggregated against disaggregated: weighed against the best of each other kind
        others = [p for p in (agg, dpep, dis) if p is not None and p.layout.kind != rec.layout.kind]
        if not others:
            out.append("only one kind of layout was searched: nothing to weigh it against")
        out += [_versus(rec, p) for p in others]
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
    if dpep is not None:
        out.append(
            f"the best data-parallel layout, {dpep.label}, gets {dpep.goodput_per_gpu:.3f} per GPU; "
            f"TTFT p99 {_ms(dpep.ttft_p99_ms)}, TPOT p99 {_ms(dpep.tpot_p99_ms)}"
        )
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
    fewest_search: bool = True,
) -> LayoutAnswer:
    """Every layout of the budget simulated; the front, the recommendation and the break-even.

    The search trace's lead is recommended only if nothing simpler is as good within the noise
    (``layout_choice``): with ``fresh`` (a runner on the traffic of a seed) and ``verify_seeds``
    the contenders are re-run on each seed and compared there, else on the search trace with the
    model's error alone. With an SLO, the fewest GPUs meeting it are searched (``fewest``)."""
    if runner.timed:
        tps = (1,)  # a fixed step time does not change with TP
    space = layout_space(
        gpus, layouts, tps=tps, prefill_batched_tokens=prefill_batched_tokens, decode_max_seqs=decode_max_seqs
    )
    points = []
    skipped: list[str] = []
    for lay in space:
        if progress is not None:
            progress(lay.label)
        try:
            points.append(runner.point(lay))
        except MemoryFitError as e:  # a big model on too few GPUs per replica: not a layout
            skipped.append(f"{lay.label} skipped: {e}")
    if not points:
        raise InputError(f"no layout of {gpus} GPUs fits: " + "; ".join(skipped))
    front = pareto_front(points)
    points = [p.model_copy(update={"pareto": i in front}) for i, p in enumerate(points)]
    agg, dis = _best(points, "agg"), _best(points, "disagg")
    on_front = [points[i] for i in front]
    lead = min(on_front, key=lambda p: (-p.goodput_per_gpu, p.ttft_p99_ms))
    seeds = list(verify_seeds) if fresh is not None else []
    choice, runs = choose_layout(points, lead, fresh, seeds, progress)
    rec = next(p for p in points if p.label == choice.recommended)
    check = None
    # the best layout of another kind, as the contenders have it (``layout_choice._contenders``)
    other = [p for p in points if p.layout.kind != lead.layout.kind]
    best_other = min(other, key=lambda p: (-p.goodput_per_gpu, p.ttft_p99_ms), default=None)
    if seeds and best_other is not None:
        check = verification(lead, best_other, runs, seeds)
    fewest = _fewest(runner, gpus, layouts, tps, rec, runs, fresh, seeds, fewest_search, progress)
    be = None
    if break_even and agg is not None and dis is not None:
        be = break_even_bandwidth(runner, dis.layout, agg.goodput_per_gpu, agg.label, lo_gbps=lo_gbps)
    why_none = _break_even_why(be, break_even, agg, dis)
    reasons = _explain(rec, agg, dis, _best(points, "dpep")) + skipped
    reasons += [c.note for c in choice.comparisons]
    reasons += [x.note for x in (check, fewest, be) if x is not None]
    return LayoutAnswer(
        gpus=gpus,
        engine={k: str(v) for k, v in runner.engine.items()},
        commands=runner.commands(rec.layout),
        slo={"ttft_ms": runner.ttft_ms, "tpot_ms": runner.tpot_ms},
        link=runner.link,
        points=points,
        best_agg=agg.label if agg else None,
        best_disagg=dis.label if dis else None,
        recommended=rec.label,
        reasons=reasons,
        break_even=be,
        verification=check,
        choice=choice,
        fewest_gpus=fewest,
        break_even_note=why_none,
    )


def _fewest(
    runner: LayoutRunner,
    gpus: int,
    layouts: Sequence[str],
    tps: Sequence[int],
    rec: LayoutPoint,
    runs: dict[str, list[LayoutRun]],
    fresh: Callable[[int], LayoutRunner] | None,
    seeds: Sequence[int],
    search: bool,
    progress: Callable[[str], None] | None,
) -> FewestGpus | None:
    """The fewest GPUs meeting the SLO (None: not searched, or no SLO to meet)."""
    if not search or (runner.ttft_ms is None and runner.tpot_ms is None):
        return None
    meets = rec.meets_p99 and all(r.meets_p99 for r in runs.get(rec.label, []))
    return fewest_gpus(runner, gpus, layouts, tps, meets, fresh, seeds, progress)


def _break_even_why(
    be: BreakEven | None, asked: bool, agg: LayoutPoint | None, dis: LayoutPoint | None
) -> str | None:
    """Why there is no break-even bandwidth to show (None: there is one)."""
    if be is not None:
        return None if be.gbps is not None else be.note
    if not asked:  # --no-break-even: nothing to say
        return None
    if dis is None:
        return "not probed: no disaggregated layout was searched"
    return "not probed: no aggregated layout to beat" if agg is None else None


__all__ = [
    "DEPLOYMENT_KEYS",
    "TPS",
    "BreakEven",
    "FewestGpus",
    "Layout",
    "LayoutAnswer",
    "LayoutChoice",
    "LayoutPoint",
    "LayoutRun",
    "LayoutRunner",
    "LayoutVerification",
    "SeedCheck",
    "break_even_bandwidth",
    "compare_layouts",
    "layout_space",
    "pareto_front",
]
