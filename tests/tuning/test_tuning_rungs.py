"""Search rungs (``--pruning rungs``): sound stops, recorded with their rung, reproducible, shown."""

from __future__ import annotations

import json

import pytest
from tuning_helpers import SMALL_SPACE, poisson_workload
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.engine import LinearStepTime
from servesim.tuning import (
    EvalSettings,
    FixedHardware,
    PercentileSLO,
    TuneResult,
    TuneSettings,
    space_from_mapping,
    tune,
)
from servesim.tuning.choice import model_tolerance
from servesim.tuning.climb import evaluate_rungs
from servesim.tuning.executors import LocalExecutor
from servesim.tuning.jobs import EvalContext, PrefixCounts, TrialJob, TrialOutcome, TrialSpec, evaluate_trial
from servesim.tuning.rungs import capacity_bar, capacity_stop, gpu_bound_stop, over_cap_needed, prefix_stop
from servesim.views.trials import trials_view

SLO = PercentileSLO.parse("ttft_p99_ms=150,tpot_p99_ms=40")
HW = FixedHardware(LinearStepTime(), 3000)


def _tune(pruning: str, n: int = 16) -> TuneResult:
    return tune(
        poisson_workload(n=400, rate=14.0),
        HW,
        SLO,
        space=space_from_mapping(SMALL_SPACE),
        settings=TuneSettings(
            n_trials=n, seed=0, n_startup_trials=4, seeds=[0, 1], exhaustive_limit=0, pruning=pruning
        ),
        executor="local",
    )


@pytest.fixture(scope="module")
def pruned() -> TuneResult:
    return _tune("rungs")


def test_the_bounds() -> None:
    assert over_cap_needed(10_000) == 102 and over_cap_needed(400) == 6
    # p99 over the whole trace's denominator, not the prefix's: 5 of 100 prefix requests say nothing
    assert prefix_stop(PrefixCounts(100, {"ttft": 5, "tpot": 0}, 5), 400, SLO) is None
    assert "ttft p99 cap" in (prefix_stop(PrefixCounts(100, {"ttft": 6, "tpot": 0}, 6), 400, SLO) or "")
    assert prefix_stop(PrefixCounts(100, {"ttft": 60}, 60), 400, None) is None  # no SLO: nothing to prove
    # a queue timeout may shed a slow request instead: 6 for the p99 + 5 to shed > 1 %, less one
    assert prefix_stop(PrefixCounts(100, {"ttft": 9, "tpot": 0}, 9), 400, SLO, 0.01) is None
    assert prefix_stop(PrefixCounts(100, {"ttft": 10, "tpot": 0}, 10), 400, SLO, 0.01) is not None
    good = PercentileSLO.parse("ttft_p99_ms=150,min_good_fraction=0.95")
    assert prefix_stop(PrefixCounts(100, {"ttft": 0}, 21), 400, good) is None
    assert prefix_stop(PrefixCounts(100, {"ttft": 0}, 22), 400, good) is not None
    assert gpu_bound_stop(2, None) is None  # no feasible trial yet
    assert gpu_bound_stop(2, 0.5) is None and gpu_bound_stop(1, 1.0) is None  # could tie the best
    assert gpu_bound_stop(2, 1.0) is not None and gpu_bound_stop(3, 0.5) is not None


def test_stopped_trials_are_pruned_with_their_rung(pruned: TuneResult) -> None:
    rr = pruned.rungs
    assert rr is not None and rr.stopped > 0
    stopped = [
        t
        for t in pruned.trials
        if t.outcome is not None and t.outcome.rung in (0, 1, 2) and not t.outcome.valid
    ]
    # this study's stops: the GPU bound and the capacity probe (the prefix stops no trial here)
    assert len(stopped) == rr.stopped and {t.outcome.rung for t in stopped if t.outcome} == {0, 2}
    for t in stopped:
        assert t.state == "PRUNED" and not t.feasible and t.outcome is not None
        assert t.outcome.reason and t.outcome.reason.startswith(f"stopped at rung {t.outcome.rung}")
    assert not any(rule.startswith("rung_") for rule in pruned.invalid_reasons)  # not "invalid"
    zero, one, two, three = rr.rungs
    assert one.entered + rr.prefix_skipped == zero.entered - zero.stopped
    assert two.entered == one.entered - one.stopped + rr.prefix_skipped
    assert three.entered == two.entered - two.stopped
    assert rr.simulated_requests < rr.unpruned_requests and 0 < rr.saved_fraction < 1


def _ctx_and_spec() -> tuple[EvalContext, TrialSpec]:
    ctx = EvalContext(poisson_workload(n=400, rate=14.0), HW, SLO, EvalSettings())
    spec = TrialSpec(target_rate=14.0, seeds=[0, 1], fixed={"max_model_len": 1801, "policy": "fcfs"})
    return ctx, spec


def test_a_prefix_stop_is_infeasible_in_full(pruned: TuneResult) -> None:
    """Soundness: every trial the prefix stops misses the SLO when run in full. The study's trials
    through the GPU bound and the prefix alone (nothing told: no capacity bar)."""
    ctx, spec = _ctx_and_spec()
    jobs = [TrialJob(t.number, t.params, spec) for t in pruned.trials if t.outcome is not None]
    outs = evaluate_rungs(LocalExecutor(ctx), ctx, jobs, bar=None, exempt=set(), fraction=0.25)
    ones = [o for o in outs if o.rung == 1 and not o.valid]
    assert ones and not any(o.rung == 2 for o in outs)
    for o in ones:
        full = evaluate_trial(ctx, TrialJob(o.number, o.params, spec))
        assert full.valid and not full.feasible, o.params


def test_a_capacity_stop_is_neither_the_best_nor_equivalent(pruned: TuneResult) -> None:
    """Soundness of rung 2: the study without rungs samples the same trials here and runs them
    all in full; none the capacity rung stopped is its best, equivalent to its best, or chosen,
    and each stopped trial's capacity is exactly the one its full run measures."""
    full = _tune("none")
    by = {t.number: t for t in full.trials}
    twos = [t for t in pruned.trials if t.outcome is not None and t.outcome.rung == 2]
    assert twos and full.choice is not None and full.best is not None
    for t in twos:
        assert by[t.number].params == t.params
        o = by[t.number].outcome
        assert o is not None and t.outcome is not None and o.capacity_rps == t.outcome.capacity_rps
        assert t.number not in full.choice.equivalent and t.number != full.best.number


def test_the_capacity_bound() -> None:
    ratio = model_tolerance().objective_ratio
    assert 1.05 < ratio < 1.5  # the per-step error: a difference within it is no difference

    def full(gpus: int, rank: float, cap: float, feasible: bool = True) -> TrialOutcome:
        return TrialOutcome(
            number=0,
            params={},
            valid=True,
            feasible=feasible,
            gpus=gpus,
            goodput_rank=rank,
            capacity_per_gpu=cap,
        )

    told = [full(1, 1.0, 20.0), full(1, 0.98, 30.0), full(1, 1.0, 40.0, feasible=False)]
    # one GPU: only a feasible trial at rank 1.0 bounds it (a 0.98 one could be outranked by it)
    assert capacity_bar(told, 1) == 20.0
    # two GPUs: at most 0.5 of the target per GPU; every feasible trial here reached at least that
    assert capacity_bar(told, 2) == 30.0
    assert capacity_bar([], 1) is None and capacity_bar([full(1, 0.9, 20.0)], 1) is None
    assert capacity_stop(20.0 / ratio * 0.99, 20.0, ratio) is not None  # below by more than the error
    assert capacity_stop(20.0 / ratio * 1.001, 20.0, ratio) is None  # within it: could be equivalent
    assert capacity_stop(1.0, None, ratio) is None  # no bar yet


def test_same_seed_same_json_and_the_same_pick(pruned: TuneResult) -> None:
    again = _tune("rungs")
    assert again.model_dump_json() == pruned.model_dump_json()
    full = _tune("none")
    assert full.rungs is None
    assert pruned.best is not None and full.best is not None and pruned.best.params == full.best.params
    assert pruned.choice is not None and full.choice is not None
    by = {t.number: t.params for t in full.trials}
    mine = {t.number: t.params for t in pruned.trials}
    assert mine[pruned.choice.chosen] == by[full.choice.chosen]


def test_the_rungs_in_the_view(pruned: TuneResult) -> None:
    text = "\n".join(trials_view(pruned).text)
    assert "search rungs: 0 GPU bound:" in text and "1 prefix (first 100 of 400 requests)" in text
    assert "stopped at a rung" in text and "% saved" in text and "stopped at rung 2 (capacity)" in text


def test_the_rungs_from_the_cli() -> None:
    args = [
        "tune",
        "poisson_5_rps",
        "-n",
        "200",
        "--linear-step-time",
        "--num-gpu-blocks",
        "3000",
        "--executor",
        "local",
        "--slo",
        "ttft_p99_ms=600,tpot_p99_ms=60",
        "--trials",
        "6",
        "--trial-seeds",
        "1",
        "--space",
        "replicas=1,2",
        "--space",
        "max_num_seqs=16,32",
        "--storage",
        "memory",
        "--no-recommend",
        "--pruning",
        "rungs",
    ]
    runner = CliRunner()
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    study = TuneResult.model_validate(data.get("study", data))
    assert study.rungs is not None and [r.name for r in study.rungs.rungs] == [
        "GPU bound",
        "prefix",
        "capacity",
        "full",
    ]
    again = runner.invoke(app, [*args, "--json"])
    assert again.stdout == res.stdout
    human = runner.invoke(app, args)
    assert human.exit_code == 0, human.output
    assert "search rungs: 0 GPU bound:" in human.stdout


def test_the_prefix_runs_while_it_pays() -> None:
    from servesim.tuning.rungs import prefix_pays

    def o(feasible: bool) -> TrialOutcome:
        return TrialOutcome(number=0, params={}, valid=True, feasible=feasible, rung=3)

    assert prefix_pays([], 0.25, 3)  # nothing known: run it
    # it costs 0.25 / 3 of a trial: it pays while at least 1 in 12 trials missed the SLO
    assert prefix_pays([o(False)] + [o(True)] * 11, 0.25, 3)
    assert not prefix_pays([o(False)] + [o(True)] * 12, 0.25, 3)
