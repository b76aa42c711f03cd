"""The fewest-changes rule (issue 46.1) and verdicts only beyond noise (46.3), on scripted runs.

A scripted executor answers each run with figures a test states per deployment (and seed), so
the rule itself is what is checked: which candidate is chosen from which figures, not what the
simulator predicts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from servesim.engine import LinearStepTime
from servesim.tuning import Deployment, FixedHardware, PercentileSLO
from servesim.tuning.choice import model_tolerance
from servesim.tuning.evaluate import Percentiles, RunMetrics
from servesim.tuning.jobs import Job, RunJob
from servesim.tuning.noise import ab_verdict, gap_verdict, metric_floor, relative_spread
from servesim.tuning.selection import changes_of, distance, knob_choices, select
from servesim.tuning.space import KNOBS, OFF_WHEN_ABSENT, Knob, SearchSpace, space_from_mapping
from servesim.tuning.stats import QueueTrend

SLO = PercentileSLO.parse("ttft_p99_ms=500,tpot_p99_ms=50")
HW = FixedHardware(LinearStepTime(), 3000)
RATE = 10.0
SEEDS = [1000, 1001, 1002]
BASE = Deployment(max_model_len=4096, max_num_seqs=256, max_num_batched_tokens=2048)

#: (good fraction, TTFT p99 ms, queue saturated) of a deployment on a seed.
Figures = tuple[float, float, bool]


def _run(seed: int, good: float, ttft: float, saturated: bool) -> RunMetrics:
    pct = Percentiles(mean=ttft / 2, p50=ttft / 2, p90=ttft, p99=ttft)
    tpot = Percentiles(mean=10, p50=10, p90=12, p99=20)
    trend = QueueTrend(
        slope=0.5 if saturated else 0.0, growth_per_s=0.0, t_stat=0.0, p_value=1.0, batches=10,
        growth=0.0, unstable=saturated,
    )  # fmt: skip
    return RunMetrics(
        seed=seed, rate_rps=RATE, num_requests=100, offered_rps=RATE, ttft_ms=pct, tpot_ms=tpot,
        e2e_ms=pct, throughput_rps=RATE, output_tokens_per_s=100.0, goodput_rps=RATE * good,
        good_fraction=good, rejected_fraction=0.0, shed_fraction=0.0, preemptions_per_request=0.0,
        kv_exhaustion_events=0, kv_blocked_time_fraction=0.0, max_kv_usage=0.5, mean_running=4.0,
        num_steps=10, duration_s=10.0, queue=trend, queue_saturated=saturated, kv_thrashing=False,
        status="QUEUE_SATURATED" if saturated else "STABLE",
        slo_violations=[f"TTFT p99 {ttft} ms > 500 ms"] if ttft > 500 else [],
    )  # fmt: skip


class Scripted:
    """An executor whose runs are ``script(deployment, seed)``; it counts what it ran."""

    def __init__(self, script: Callable[[Deployment, int], Figures]) -> None:
        self.script = script
        self.ran: list[tuple[Deployment, int]] = []

    def map(self, jobs: Sequence[Job]) -> list[Any]:
        out = []
        for j in jobs:
            assert isinstance(j, RunJob)
            self.ran.append((j.deployment, j.seed))
            out.append(_run(j.seed, *self.script(j.deployment, j.seed)))
        return out

    def close(self) -> None:
        return None


def _meets(d: Deployment) -> bool:
    return d.replicas >= 2 or d.max_num_seqs <= 64


def test_two_candidates_within_the_band_the_one_with_fewer_changes_wins() -> None:
    """The trial changes three settings and is 5 % better per GPU than its single change
    max_num_seqs 256 -> 64 alone: inside the model's error, so the single change is the answer."""
    trial = BASE.model_copy(update={"max_num_seqs": 64, "max_num_batched_tokens": 8192, "block_size": 32})

    def script(d: Deployment, seed: int) -> Figures:
        if d == trial:
            return (1.0, 200.0, False)
        return (0.95, 300.0, False) if _meets(d) else (0.2, 9000.0, True)

    ex = Scripted(script)
    sel, pool = select(ex, BASE, [trial], HW, RATE, SEEDS, SLO)  # type: ignore[arg-type]
    assert sel.best == "trial 1" and sel.objective_best == pytest.approx(RATE)
    assert sel.chosen == "max_num_seqs 256 -> 64" and not sel.keep
    chosen = sel.chosen_option()
    assert chosen is not None and chosen.changes == {"max_num_seqs": 64} and chosen.qualifies
    assert sel.band == pytest.approx(model_tolerance().objective_ratio - 1) and sel.band_from == "model error"
    # singles that missed on the first seed ran there only (screened out)
    block = next(o for o in sel.options if o.changes == {"block_size": 32})
    assert block.seeds == [1000] and not block.complete and not block.qualifies
    assert pool.deployments[sel.chosen] == BASE.model_copy(update={"max_num_seqs": 64})
    assert sel.considered == len(sel.options) == 5  # baseline, trial, three singles
    assert sel.simulations == len(ex.ran)


def test_outside_the_band_the_better_objective_wins_over_fewer_changes() -> None:
    """The single change alone serves 70 % of requests within the SLO per GPU of the trial's:
    outside the band, so the trial's three changes are needed."""
    trial = BASE.model_copy(update={"max_num_seqs": 64, "max_num_batched_tokens": 8192, "block_size": 32})

    def script(d: Deployment, seed: int) -> Figures:
        if d == trial:
            return (1.0, 200.0, False)
        return (0.7, 450.0, False) if _meets(d) else (0.2, 9000.0, True)

    sel, _ = select(Scripted(script), BASE, [trial], HW, RATE, SEEDS, SLO)  # type: ignore[arg-type]
    assert sel.chosen == "trial 1"
    single = next(o for o in sel.options if o.changes == {"max_num_seqs": 64})
    assert single.meets_slo and single.complete and not single.in_band


def test_a_baseline_within_the_band_is_kept() -> None:
    trial = BASE.model_copy(update={"max_num_seqs": 64})

    def script(d: Deployment, seed: int) -> Figures:
        return (1.0, 150.0, False) if d == trial else (0.97, 320.0, False)

    ex = Scripted(script)
    sel, _ = select(ex, BASE, [trial], HW, RATE, SEEDS, SLO)  # type: ignore[arg-type]
    assert sel.keep and sel.chosen == "baseline" and sel.best == "trial 1"
    assert next(o for o in sel.options if o.label == "baseline").changes == {}


def test_the_band_widens_to_the_best_s_fresh_seed_spread() -> None:
    """The best moves 30 % across the fresh seeds: a candidate 20 % below its mean is inside."""
    trial = BASE.model_copy(update={"max_num_seqs": 64, "block_size": 32})
    wobble = {1000: 0.85, 1001: 1.0, 1002: 1.15}

    def script(d: Deployment, seed: int) -> Figures:
        if d == trial:
            return (wobble[seed] * 0.8, 200.0, False)
        return (0.66, 400.0, False) if _meets(d) else (0.2, 9000.0, True)

    sel, _ = select(Scripted(script), BASE, [trial], HW, RATE, SEEDS, SLO)  # type: ignore[arg-type]
    assert sel.band_from == "fresh-seed spread" and sel.band == pytest.approx(0.3)
    assert sel.seed_spread == pytest.approx(relative_spread([8 * w for w in wobble.values()]))
    assert sel.chosen == "max_num_seqs 256 -> 64"


def test_ties_go_to_fewer_gpus_then_the_closer_value_never_the_trial_order() -> None:
    """Two trials, each one change that meets the SLO equally: replicas 1 -> 2 costs a GPU more
    than max_num_seqs 256 -> 128 (both within the band: the SLO is met, goodput per GPU at the
    target scripted equal); of max_num_seqs 128 and 32, 128 is closer to 256."""
    far = BASE.model_copy(update={"max_num_seqs": 32})
    near = BASE.model_copy(update={"max_num_seqs": 128})
    two = BASE.model_copy(update={"replicas": 2})

    def script(d: Deployment, seed: int) -> Figures:
        if d == BASE:
            return (0.2, 9000.0, True)
        return (1.0 * d.gpus, 200.0, False)  # the same goodput per GPU

    for order in ([far, two, near], [near, far, two], [two, near, far]):
        sel, _ = select(Scripted(script), BASE, order, HW, RATE, SEEDS, SLO)  # type: ignore[arg-type]
        chosen = sel.chosen_option()
        assert chosen is not None and chosen.changes == {"max_num_seqs": 128}, order
    assert distance({"max_num_seqs": 128}, BASE) < distance({"max_num_seqs": 32}, BASE)
    assert distance({"enable_prefix_caching": False}, BASE) == 1.0


def test_pairs_are_tried_when_no_single_change_is_enough() -> None:
    """Only seqs 64 with a 4,096 budget meets the SLO; the trial adds a third change, so the pair
    is the answer. Chunked prefill off is refused alone (the budget is below max_model_len) and
    tried with the trial's budget."""
    trial = BASE.model_copy(
        update={"max_num_seqs": 64, "max_num_batched_tokens": 4096, "enable_chunked_prefill": False}
    )

    def script(d: Deployment, seed: int) -> Figures:
        ok = d.max_num_seqs == 64 and d.max_num_batched_tokens == 4096
        return (1.0, 200.0, False) if ok else (0.3, 900.0, False)

    sel, pool = select(Scripted(script), BASE, [trial], HW, RATE, SEEDS, SLO)  # type: ignore[arg-type]
    chosen = sel.chosen_option()
    assert chosen is not None and chosen.origin == "pair"
    assert chosen.changes == {"max_num_seqs": 64, "max_num_batched_tokens": 4096}
    refused = next(o for o in sel.options if o.changes == {"enable_chunked_prefill": False})
    assert not refused.valid and "max_model_len" in (refused.reason or "")
    assert any(
        o.origin == "pair" and o.changes == {"max_num_batched_tokens": 4096, "enable_chunked_prefill": False}
        for o in sel.options
    )
    assert changes_of(pool.deployments[sel.chosen or ""], BASE) == chosen.changes


def test_nothing_meeting_the_slo_chooses_nothing() -> None:
    trial = BASE.model_copy(update={"max_num_seqs": 64})
    sel, _ = select(
        Scripted(lambda d, s: (0.1, 9000.0, True)),  # type: ignore[arg-type]
        BASE,
        [trial],
        HW,
        RATE,
        SEEDS,
        SLO,
    )
    assert sel.chosen is None and sel.best is None and sel.objective_best is None and not sel.keep


def test_a_candidate_failing_one_fresh_seed_does_not_qualify() -> None:
    trial = BASE.model_copy(update={"max_num_seqs": 64, "block_size": 32})

    def script(d: Deployment, seed: int) -> Figures:
        if d == trial:
            return (1.0, 200.0, False)
        if d.max_num_seqs == 64:
            return (1.0, 700.0 if seed == 1002 else 200.0, False)  # misses on the last seed
        return (0.2, 9000.0, True)

    sel, _ = select(Scripted(script), BASE, [trial], HW, RATE, SEEDS, SLO)  # type: ignore[arg-type]
    single = next(o for o in sel.options if o.changes == {"max_num_seqs": 64})
    assert single.complete and not single.meets_slo and sel.chosen == "trial 1"


# ------------------------------------------------------------------------- beyond noise
def test_a_gap_inside_the_paired_spread_is_equivalent() -> None:
    v = gap_verdict([10.0, 12.0, 9.0], [9.8, 10.0, 9.9])  # a ahead on two seeds, behind on one
    assert v.winner == "equivalent" and v.spread > abs(v.gap)
    clear = gap_verdict([12.0, 12.5, 12.2], [10.0, 10.1, 10.2])
    assert clear.winner == "a" and clear.gap > clear.spread and clear.band == clear.spread
    # the model's error is a floor: a consistent 7 % gap is not a finding against a 13 % error
    floor = model_tolerance().objective_ratio - 1
    v = gap_verdict([9.83, 9.85, 9.8], [9.19, 9.2, 9.18], floor=floor)
    assert v.winner == "equivalent" and v.band == floor
    lower = gap_verdict([100.0, 110.0], [200.0, 190.0], higher_is_better=False)
    assert lower.winner == "a"


def test_an_ab_metric_names_a_winner_only_beyond_its_model_error() -> None:
    assert metric_floor("ttft_ms.p99") == pytest.approx(model_tolerance().percent()["ttft"])
    assert metric_floor("itl_ms.p50") == pytest.approx(model_tolerance().percent()["tpot"])
    assert metric_floor("request_throughput") == pytest.approx(model_tolerance().percent()["objective"])
    small = ab_verdict("ttft_ms.p99", 110.0, 100.0, higher_is_better=False)
    assert small is not None and small.equivalent
    big = ab_verdict("ttft_ms.p99", 200.0, 100.0, higher_is_better=False)
    assert big is not None and big.winner == "b"
    assert ab_verdict("goodput", None, 1.0, higher_is_better=True) is None


def test_the_space_s_values_alone_find_a_change_no_trial_made_alone() -> None:
    """The only trial adds a replica; max_num_seqs 64 alone (a value of the space no trial tried)
    meets the SLO on one GPU, twice the goodput per GPU: it is the answer. Replica counts that
    cannot reach the band (3 and 4 GPUs against the trial's 2) are not run."""
    trial = BASE.model_copy(update={"replicas": 2})
    fixed = {k: [getattr(BASE, k)] for k in KNOBS if k not in OFF_WHEN_ABSENT}
    space = space_from_mapping({**fixed, "max_num_seqs": [64, 256], "replicas": [1, 2, 3, 4]})
    assert knob_choices(space, "replicas") == [1, 2, 3, 4]

    def script(d: Deployment, seed: int) -> Figures:
        return (1.0, 200.0, False) if _meets(d) else (0.3, 9000.0, True)

    ex = Scripted(script)
    sel, _ = select(ex, BASE, [trial], HW, RATE, SEEDS, SLO, space=space)  # type: ignore[arg-type]
    assert sel.chosen == "max_num_seqs 256 -> 64" and sel.best == sel.chosen
    trial_opt = next(o for o in sel.options if o.label == "trial 1")
    assert trial_opt.meets_slo and not trial_opt.in_band  # half the goodput per GPU
    assert sel.skipped == 2 and all(d.replicas <= 2 for d, _ in ex.ran)
    budget, _ = select(Scripted(script), BASE, [trial], HW, RATE, SEEDS, SLO, space=space, max_gpus=1)  # type: ignore[arg-type]
    assert budget.chosen == "max_num_seqs 256 -> 64"


def test_a_stepped_range_gives_its_steps() -> None:
    space = SearchSpace().with_overrides(
        {"gpu_memory_utilization": Knob(low=0.8, high=0.95, step=0.05), "replicas": Knob(low=1, high=3)}
    )
    assert knob_choices(space, "gpu_memory_utilization") == [0.8, 0.85, 0.9, 0.95]
    assert knob_choices(space, "replicas") == [1, 2, 3]
