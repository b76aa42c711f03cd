"""The tuner trades HTTP 503s (vLLM's max_num_queued_reqs/tokens) for latency only within the
budget the user sets (``tune --max-rejection-rate``, default 0: a trial with any 503 is
QUEUE_SATURATED, infeasible); 503s count among the rejected, never among the good."""

from __future__ import annotations

import json

import pytest
from tuning_helpers import SMALL_SPACE, poisson_workload
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.engine import ConstantStepTime, EngineConfig, LinearStepTime, simulate
from servesim.errors import InputError
from servesim.traces.schema import Trace
from servesim.tuning import (
    FixedHardware,
    PercentileSLO,
    SchedulerRecommendation,
    TuneSettings,
    space_from_mapping,
    tune,
)
from servesim.tuning.evaluate import EvalSettings, measure
from servesim.tuning.space import Knob, SearchSpace, parse_knob, parse_space


def _run(limit: int | None) -> tuple:
    rows = [
        {"req_id": f"r{i}", "arrival_time_s": i * 0.002, "prompt_len": 64, "output_len": 20}
        for i in range(60)
    ]
    cfg = EngineConfig(max_num_seqs=8, max_num_batched_tokens=512, max_num_queued_reqs=limit)
    res = simulate(Trace.from_records(rows), cfg, ConstantStepTime(step_time_s=0.01))
    return res, cfg


def test_503s_beyond_the_budget_make_a_trial_saturated() -> None:
    res, cfg = _run(10)
    s = res.summary
    assert s.admission is not None
    refused = s.admission.num_rejected / s.num_requests
    assert 0 < refused < 1

    def status(budget: float) -> str:
        m = measure(
            s, res.requests, res.steps, cfg, None, EvalSettings(max_rejection_rate=budget), seed=0, rate=None
        )
        assert m.rejected_fraction == refused
        assert m.good_fraction <= 1 - refused + 1e-12  # a 503 is never good
        return m.status

    assert status(0.0) == "QUEUE_SATURATED"  # the default: no 503 allowed
    assert status(refused) != "QUEUE_SATURATED"  # within the budget


def test_a_budget_of_zero_keeps_the_settings_document() -> None:
    assert "max_rejection_rate" not in EvalSettings().model_dump()
    assert EvalSettings(max_rejection_rate=0.01).model_dump()["max_rejection_rate"] == 0.01


def _study(budget: float) -> dict[int, tuple[dict, bool, str | None]]:
    """A 10-trial study (all random draws: the same trials at any budget) over an overloaded
    trace, with a loose SLO: a trial fails only by its queue or its 503s."""
    res = tune(
        poisson_workload(n=150, rate=30.0),  # above what one replica serves
        FixedHardware(LinearStepTime(), 3000),
        PercentileSLO.parse("ttft_p99_ms=1000000,tpot_p99_ms=1000000"),
        space=space_from_mapping({**SMALL_SPACE, "max_num_queued_reqs": [None, 4]}),
        settings=TuneSettings(n_trials=10, seed=0, n_startup_trials=10, seeds=[0]),
        eval_settings=EvalSettings(max_rejection_rate=budget),
        executor="local",
    )
    return {
        t.number: (t.params, t.feasible, t.outcome.status if t.outcome is not None else None)
        for t in res.trials
    }


def test_the_search_tries_the_503_limits_and_counts_their_rejections_against_the_budget() -> None:
    """``--space max_num_queued_reqs=none,4`` (issue 49): the study samples the limit and each
    trial that sets it runs with it. Its 503s keep the queue bounded, so with a budget that allows
    them such a trial is feasible, and with the default budget (none) the same trial is
    QUEUE_SATURATED. A trial with the limit off records no key for it (a study's parameters
    without the knob)."""
    allowed, strict = _study(1.0), _study(0.0)
    assert [p for p, _, _ in allowed.values()] == [p for p, _, _ in strict.values()]
    limited = [n for n, (p, _, _) in allowed.items() if p.get("max_num_queued_reqs") == 4]
    unlimited = [n for n, (p, _, _) in allowed.items() if "max_num_queued_reqs" not in p]
    assert limited and unlimited and len(limited) + len(unlimited) == len(allowed)
    traded = [n for n in limited if allowed[n][1] and strict[n][2] == "QUEUE_SATURATED"]
    assert traded, "no trial traded 503s for a bounded queue"
    for n in unlimited:  # without the limit the budget changes nothing
        assert allowed[n][1:] == strict[n][1:]


def test_the_503_limits_are_whole_numbers_or_none_and_off_by_default() -> None:
    assert parse_knob("max_num_queued_reqs=none,64,256")[1].choices == [None, 64, 256]
    assert parse_knob("max-num-queued-tokens=4096..65536:log")[1] == Knob(low=4096, high=65536, log=True)
    for bad, says in (
        ("max_num_queued_reqs=1.5", "not a valid whole number or none"),
        ("max_num_queued_tokens=-1", "max_num_queued_tokens=-1"),
        ("max_num_queued_reqs=16..64:0.5", "whole numbers"),
    ):
        with pytest.raises(InputError, match=says):
            parse_space([bad])
    default = SearchSpace()
    assert "max_num_queued_reqs" not in default.describe()
    assert default.fingerprint() == SearchSpace(max_num_queued_tokens=Knob(choices=[None])).fingerprint()
    assert default.fingerprint() != parse_space(["max_num_queued_reqs=none,64"]).fingerprint()


def test_a_limit_the_deployment_sets_is_kept_in_every_trial_unless_searched() -> None:
    base = {"max_num_queued_reqs": 100}
    assert SearchSpace().including(base).max_num_queued_reqs == Knob(choices=[100])
    searched = parse_space(["max_num_queued_reqs=none,16"]).including(base)
    assert searched.max_num_queued_reqs == Knob(choices=[None, 16, 100])  # the user's is a point


def test_a_recommended_limit_states_how_many_requests_it_turns_away() -> None:
    """Issue 49's done-when: a recommendation that carries a 503 limit says what it costs, in the
    human output and in the document (worst fresh seed's share turned away)."""
    runner = CliRunner()
    args = [
        "tune", "poisson_20_rps", "-n", "200", "--linear-step-time", "--num-gpu-blocks", "3000",
        "--executor", "local", "--slo", "ttft_p99_ms=100000,tpot_p99_ms=100000", "--trials", "2",
        "--trial-seeds", "1", "--verify-seeds", "2", "--space", "replicas=1", "--space", "max_num_seqs=4",
        "--max-num-queued-reqs", "6", "--max-rejection-rate", "1", "--storage", "memory",
    ]  # fmt: skip
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    rec = SchedulerRecommendation.model_validate(json.loads(res.stdout)["recommendation"])
    assert rec.deployment.max_num_queued_reqs == 6  # the deployment's limit, kept in every trial
    (why,) = [r for r in rec.reasons if r.kind == "admission"]
    turned_away = why.facts["rejected_fraction_max"]
    assert isinstance(turned_away, float) and 0 < turned_away < 1  # 20 req/s into 4 seats: 503s
    human = runner.invoke(app, args)
    assert human.exit_code == 0, human.output
    said = " ".join(human.stdout.split())
    assert "max_num_queued_reqs 6: vLLM's API server answers HTTP 503 past the limit" in said
    assert f"turned away {turned_away:.2%} of requests" in said
