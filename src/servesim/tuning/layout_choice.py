"""Which layout to recommend, and how few GPUs would do: verdicts only beyond noise.

The layout search (``layouts.compare_layouts``) ranks every layout of the budget on one trace.
A lead there is not yet a finding: fresh seeds move goodput per GPU by a few percent, and the
step-time model's own error on it (``choice.model_tolerance``, about 13 %) is larger still. So:

* **contenders**: the search trace's lead; the *simplest* layout the lead does not beat there
  beyond the model's error (and that meets the SLO when the lead does); when the lead misses the
  SLO, the best layout that meets it; the best layout of the other kind (aggregated /
  disaggregated). Simpler means fewer GPUs, then lower TP, then
  aggregated, then fewer pool flags;
* each contender runs on the same fresh seeds, and a challenger replaces the incumbent only when
  it is better **beyond noise** (``noise.gap_verdict``: the mean per-seed gap in goodput per GPU
  exceeds the larger of the paired fresh-seed spread and the model's error) or when it meets the
  SLO on every seed and the incumbent does not; inside the noise the two are **equivalent** and
  the simpler is kept. Two layouts that both serve every request within the SLO on every seed
  are equivalent whatever the gap: their goodput per GPU then differs only by how fast the
  trace's tail drains. Without fresh seeds the search trace is the only pair (the floor alone);
* **fewest GPUs** (``fewest_gpus``): bisection over GPU counts up to the budget for the smallest
  whose simplest layout meeting the SLO on the search trace also meets it on every fresh seed
  ("3 GPUs suffice" when 4 were the budget).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from servesim.errors import InputError
from servesim.perf.errors import MemoryFitError
from servesim.tuning.choice import model_tolerance
from servesim.tuning.layout_models import (
    FewestGpus,
    FewestTry,
    Layout,
    LayoutChoice,
    LayoutComparison,
    LayoutPoint,
    LayoutRun,
    LayoutVerification,
    SeedCheck,
)
from servesim.tuning.noise import gap_verdict

if TYPE_CHECKING:
    from servesim.tuning.layout_runs import LayoutRunner

Fresh = Callable[[int], "LayoutRunner"]
Say = Callable[[str], None] | None

RULE = (
    "a layout replaces another only when its goodput per GPU is higher beyond noise (the mean per-seed "
    "gap exceeds the larger of the paired fresh-seed spread and the step-time model's error) or it "
    "meets the SLO where the other does not; otherwise they are equivalent and the simpler one (fewer "
    "GPUs, lower TP, aggregated) is recommended"
)


#: How much a kind of layout asks of its operator: replicas of one server, one server of DP ranks
#: in lockstep (``--data-parallel-size``), two pools and a KV link.
_KIND_RANK = {"agg": 0, "dpep": 1, "disagg": 2}


def simplicity(lay: Layout) -> tuple[int, int, int, int, str]:
    """Sort key: fewer GPUs, lower TP (a data-parallel layout's: its GPUs), aggregated (then
    data-parallel, then disaggregated), fewer pool flags, then the label."""
    # a data-parallel server's collectives span all its GPUs (the experts' all-gather): as TP of them
    tp = {"agg": lay.tp, "dpep": lay.gpus}.get(lay.kind, max(lay.prefill_tp, lay.decode_tp))
    flags = len(lay.prefill_config) + len(lay.decode_config)
    return (lay.gpus, tp, _KIND_RANK[lay.kind], flags, lay.label)


def model_floor() -> float:
    """The step-time model's measured error of goodput per GPU, as a relative gap."""
    return model_tolerance().objective_ratio - 1


def _run_of(p: LayoutPoint, seed: int | None) -> LayoutRun:
    return LayoutRun(
        seed=seed,
        label=p.label,
        goodput_per_gpu=p.goodput_per_gpu,
        good_requests=p.good_requests,
        num_requests=p.num_requests,
        meets_p99=p.meets_p99,
    )


def _serves_all(runs: Sequence[LayoutRun]) -> bool:
    return all(r.meets_p99 and r.good_requests == r.num_requests for r in runs)


def compare(challenger: list[LayoutRun], incumbent: list[LayoutRun], floor: float) -> LayoutComparison:
    """``challenger`` against ``incumbent`` on the same seeds: which one to keep (module docstring)."""
    a, b = challenger[0].label, incumbent[0].label
    v = gap_verdict(
        [r.goodput_per_gpu for r in challenger], [r.goodput_per_gpu for r in incumbent], floor=floor
    )
    all_served = _serves_all(challenger) and _serves_all(incumbent)
    meets_a, meets_b = all(r.meets_p99 for r in challenger), all(r.meets_p99 for r in incumbent)
    if meets_a != meets_b:
        keep = a if meets_a else b
        why = f"{keep} meets the SLO on every seed and the other does not"
    elif all_served:
        keep = ""
        why = "both serve every request within the SLO on every seed (the gap is how fast the tail drains)"
    elif v.winner == "equivalent":
        keep = ""
        why = f"the gap {v.gap:+.1%} is inside the noise (±{v.band:.1%})"
    else:
        keep = a if v.winner == "a" else b
        why = f"{keep} is better by {abs(v.gap):.1%}, beyond the noise (±{v.band:.1%})"
    return LayoutComparison(
        challenger=a,
        incumbent=b,
        verdict=v,
        both_serve_all=all_served,
        outcome=keep or "equivalent",
        note=f"{a} vs {b}: {v.a_mean:.3f} vs {v.b_mean:.3f} good requests/s per GPU; {why}",
    )


def _contenders(points: Sequence[LayoutPoint], lead: LayoutPoint, floor: float) -> list[LayoutPoint]:
    """The lead, the simplest layout it does not beat beyond the model's error on the search trace
    (or that serves every request within the SLO there, as the lead does), the best that meets the
    SLO when the lead does not, and the best of the other kind."""
    out = [lead]
    eligible = [p for p in points if p.meets_p99 or not lead.meets_p99]
    both_serve = _serves_all([_run_of(lead, None)])
    close = [
        p
        for p in eligible
        if (both_serve and _serves_all([_run_of(p, None)]))
        or gap_verdict([lead.goodput_per_gpu], [p.goodput_per_gpu], floor=floor).winner != "a"
    ]
    simple = min(close, key=lambda p: simplicity(p.layout), default=None)
    if simple is not None and simple.label != lead.label:
        out.append(simple)
    if not lead.meets_p99:  # the best layout that does meet the SLO, whatever its goodput
        meeting = [p for p in points if p.meets_p99]
        best_meeting = min(meeting, key=lambda p: (-p.goodput_per_gpu, simplicity(p.layout)), default=None)
        if best_meeting is not None and all(best_meeting.label != p.label for p in out):
            out.append(best_meeting)
    other = [p for p in points if p.layout.kind != lead.layout.kind]
    best_other = min(other, key=lambda p: (-p.goodput_per_gpu, p.ttft_p99_ms), default=None)
    if best_other is not None and all(best_other.label != p.label for p in out):
        out.append(best_other)
    return out


def seed_runs(
    contenders: Sequence[LayoutPoint], fresh: Fresh | None, seeds: Sequence[int], progress: Say = None
) -> dict[str, list[LayoutRun]]:
    """Each contender on each fresh seed (no seeds: its search-trace point)."""
    runs: dict[str, list[LayoutRun]] = {p.label: [] for p in contenders}
    if fresh is None or not seeds:
        for p in contenders:
            runs[p.label].append(_run_of(p, None))
        return runs
    for seed in seeds:
        if progress is not None:
            progress(f"fresh seed {seed}")
        runner = fresh(seed)
        for p in contenders:
            runs[p.label].append(_run_of(runner.point(p.layout), seed))
    return runs


def choose_layout(
    points: Sequence[LayoutPoint],
    lead: LayoutPoint,
    fresh: Fresh | None,
    seeds: Sequence[int],
    progress: Say = None,
) -> tuple[LayoutChoice, dict[str, list[LayoutRun]]]:
    """The recommendation by the rule (module docstring), and every contender's runs."""
    floor = model_floor()
    contenders = _contenders(points, lead, floor)
    runs = seed_runs(contenders, fresh, seeds if fresh is not None else (), progress)
    layout_of = {p.label: p.layout for p in contenders}
    current = lead.label
    comparisons: list[LayoutComparison] = []
    for p in contenders[1:]:
        c = compare(runs[p.label], runs[current], floor)
        if c.outcome == "equivalent":
            keep = min(current, p.label, key=lambda x: simplicity(layout_of[x]))
            c = c.model_copy(update={"outcome": keep, "note": f"{c.note}: equivalent, so the simpler {keep}"})
        comparisons.append(c)
        current = c.outcome
    choice = LayoutChoice(
        rule=RULE,
        lead=lead.label,
        recommended=current,
        floor=floor,
        seeds=list(seeds) if fresh is not None else [],
        runs=[r for rs in runs.values() for r in rs],
        comparisons=comparisons,
    )
    return choice, runs


def verification(
    lead: LayoutPoint, other: LayoutPoint, runs: dict[str, list[LayoutRun]], seeds: Sequence[int]
) -> LayoutVerification:
    """The search trace's lead against the other kind's best on the fresh seeds (the figures the
    ``fresh seeds`` table shows): does the lead hold there on average?"""
    mine, theirs = runs[lead.label], runs[other.label]
    checks = [
        SeedCheck(
            seed=int(a.seed or 0),
            recommended_per_gpu=a.goodput_per_gpu,
            against_per_gpu=b.goodput_per_gpu,
            recommended_meets_p99=a.meets_p99,
        )
        for a, b in zip(mine, theirs, strict=True)
    ]
    mean_a = sum(c.recommended_per_gpu for c in checks) / len(checks)
    mean_b = sum(c.against_per_gpu for c in checks) / len(checks)
    wins = sum(c.recommended_per_gpu >= c.against_per_gpu for c in checks)
    holds = mean_a >= mean_b
    seeds_txt = ", ".join(str(s) for s in seeds)
    if holds:
        note = (
            f"re-run on {len(checks)} fresh seeds ({seeds_txt}): {lead.label} {mean_a:.3f} vs "
            f"{other.label} {mean_b:.3f} good requests/s per GPU on average, at least as good on {wins} "
            f"of {len(checks)}"
        )
    else:
        note = (
            f"{lead.label} led on the search trace but not on {len(checks)} fresh seeds ({seeds_txt}): "
            f"{mean_a:.3f} vs {other.label} {mean_b:.3f} good requests/s per GPU on average (at least as "
            f"good on {wins} of {len(checks)}): the lead was the trace's, not the layout's"
        )
    return LayoutVerification(
        recommended=lead.label, against=other.label, checks=checks, holds=holds, wins=wins, note=note
    )


def fewest_gpus(
    runner: LayoutRunner,
    budget: int,
    kinds: Sequence[str],
    tps: Sequence[int],
    budget_meets: bool,
    fresh: Fresh | None,
    seeds: Sequence[int],
    progress: Say = None,
) -> FewestGpus:
    """The fewest GPUs (bisection between 0 and the budget) whose simplest layout meeting the SLO
    on the search trace meets it on every fresh seed too. Aggregated layouts when they were
    searched (the simpler kind), else disaggregated ones. ``budget_meets``: the recommendation
    of the full budget met the SLO on every seed it ran on."""
    from servesim.tuning.layouts import layout_space

    kind = [next(k for k in ("agg", "dpep", "disagg") if k in kinds)]
    tried: list[FewestTry] = []
    found: dict[int, str | None] = {}

    def meets(g: int) -> bool:
        try:
            space = sorted(layout_space(g, kind, tps=tps), key=simplicity)
        except InputError:  # no layout of this kind fits g GPUs
            found[g] = None
            return False
        for lay in space:
            if progress is not None:
                progress(f"fewest GPUs: {lay.label}")
            try:
                fits = runner.point(lay).meets_p99
            except MemoryFitError:  # the model does not fit this layout's GPUs
                fits = False
            if not fits:
                tried.append(FewestTry(gpus=g, layout=lay.label, meets_p99=False, fresh_meets=None))
                continue
            ok = fresh is None or all(fresh(s).point(lay).meets_p99 for s in seeds)
            tried.append(
                FewestTry(gpus=g, layout=lay.label, meets_p99=True, fresh_meets=ok if fresh else None)
            )
            if ok:
                found[g] = lay.label
                return True
        found[g] = None
        return False

    if not budget_meets:
        note = f"no layout of the {budget}-GPU budget meets the SLO on every seed: fewer GPUs were not tried"
        return FewestGpus(budget=budget, gpus=None, layout=None, tried=tried, note=note)
    lo, hi = 0, budget
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    what = {"agg": "aggregated", "dpep": "data-parallel", "disagg": "disaggregated"}[kind[0]]
    if hi == budget:
        note = (
            f"all {budget} GPU(s) are needed: no {what} layout of {budget - 1} meets the SLO on every seed"
            if budget > 1
            else "one GPU: nothing fewer to try"
        )
        return FewestGpus(budget=budget, gpus=budget, layout=None, tried=tried, note=note)
    label = found[hi]
    where = "the search trace and every fresh seed" if fresh is not None and seeds else "the search trace"
    fewer = f"; no {what} layout of {hi - 1} GPU(s) does" if hi > 1 else ""
    note = f"{hi} GPU(s) suffice: {label} meets the SLO on {where} ({budget} were the budget{fewer})"
    return FewestGpus(budget=budget, gpus=hi, layout=label, tried=tried, note=note)


__all__ = [
    "RULE",
    "choose_layout",
    "compare",
    "fewest_gpus",
    "model_floor",
    "seed_runs",
    "simplicity",
    "verification",
]
