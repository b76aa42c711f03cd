"""Same inputs, same bytes, whatever order the runs finish in (invariant DET-2).

The demo's study and recommendation (its workload, hardware, SLO and space) run once in this
process and again on an executor whose jobs finish in reverse or shuffled order in another
process with a one-thread BLAS (like a Ray worker): the JSON documents must be byte-identical.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from reordering import Order, ReorderingExecutor

from servesim.cli.demo_steps import _tuning_setup
from servesim.services.tune import trial_deployments
from servesim.tuning import EvalSettings, TuneSettings, parse_space, recommend, tune
from servesim.tuning.executors import Executor, LocalExecutor
from servesim.tuning.jobs import EvalContext
from servesim.tuning.recommend import verify

SETUP = _tuning_setup()  # the demo's workload, hardware and SLO (an executor is made for them)


def _document(executor: Executor) -> str:
    wl, hw, slo = SETUP
    space = parse_space(["tensor_parallel_size=1,2", "replicas=1,2", "enable_chunked_prefill=true"])
    settings = TuneSettings(objective="pareto", n_trials=16, seed=7, seeds=[0], max_gpus=2)
    res = tune(
        wl, hw, slo, space=space, settings=settings, fixed={"policy": "fcfs"}, executor=executor, n_jobs=1
    )
    candidates = trial_deployments(res, res.ranked[:3], wl.default_max_model_len(), {"policy": "fcfs"})
    rec = recommend(
        wl, hw, slo, candidates, target_rate=res.target_rate_rps, verify_seeds=[1000, 1001], executor=executor
    )
    # The recommendation's own runs, every figure of each (its document keeps their spread only).
    runs = verify(executor, rec.deployment, rec.target_rate_rps, [1000, 1001])
    doc: dict[str, Any] = {
        "study": res.model_dump(mode="json"),
        "recommendation": rec.model_dump(mode="json"),
        "runs": [r.model_dump(mode="json") for r in runs],
    }
    return json.dumps(doc, indent=2, sort_keys=True)


@pytest.fixture(scope="module")
def in_order() -> str:
    wl, hw, slo = SETUP
    return _document(LocalExecutor(EvalContext(wl, hw, slo, EvalSettings())))


@pytest.mark.slow
@pytest.mark.parametrize("order", ["reverse", "shuffled"])
def test_the_demo_study_and_recommendation_are_the_same_bytes_whatever_order_runs_finish_in(
    in_order: str, order: Order
) -> None:
    wl, hw, slo = SETUP
    with ReorderingExecutor(EvalContext(wl, hw, slo, EvalSettings()), order, seed=3) as ex:
        produced = _document(ex)
    several = [d for d in ex.finished if len(d) > 1]
    assert several, "no map call had more than one job to reorder"
    for d in several:
        assert d != sorted(d) and (order != "reverse" or d == sorted(d, reverse=True)), d
    assert produced == in_order
