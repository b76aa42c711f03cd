"""The tuner trades HTTP 503s (vLLM's max_num_queued_reqs/tokens) for latency only within the
budget the user sets (``tune --max-rejection-rate``, default 0: a trial with any 503 is
QUEUE_SATURATED, infeasible); 503s count among the rejected, never among the good."""

from __future__ import annotations

from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.traces.schema import Trace
from servesim.tuning.evaluate import EvalSettings, measure


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
