"""The seeds' examples of issue 7, through the Python API and the CLI."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from resched_strategies import SEED_1, SEED_2
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.engine import ConstantStepTime, LinearStepTime
from servesim.resched import RescheduleInputError, reschedule

runner = CliRunner()

# The seeds' stated outcomes need req-102's 400 decode steps to fit 1200 ms: <= 3 ms per step
# (a small model, or a fast GPU). The default context (Llama-3.1-8B on one H100, ~7.4 ms per
# step) projects req-102 late; see test_seed_1_default_context_projects_req_102_late.
SEED_STEP_MS = 2.5


def test_seed_1_capacity_4_both_meet_their_sla() -> None:
    plan = reschedule(SEED_1, step_time=ConstantStepTime(step_time_s=SEED_STEP_MS / 1000))
    assert plan.rescheduled_queue == ["req-101", "req-102"]
    assert plan.prefix_cache_savings_tokens == 576
    assert plan.sla_violation_projected is False
    a, b = plan.requests
    # Both start now (4 slots); each resumes with one decode of its pending token, then decodes.
    assert a.admitted_ms == b.admitted_ms == 0.0
    assert a.completion_ms == pytest.approx(16 * SEED_STEP_MS)
    assert b.completion_ms == pytest.approx(400 * SEED_STEP_MS)
    assert a.slack_ms == pytest.approx(150 - 40) and b.slack_ms == pytest.approx(1200 - 1000)
    assert (a.reused_tokens, a.recomputed_tokens, b.reused_tokens, b.recomputed_tokens) == (512, 0, 64, 0)


def test_seed_2_capacity_1_violates() -> None:
    for model in (None, LinearStepTime(), ConstantStepTime(step_time_s=SEED_STEP_MS / 1000)):
        plan = reschedule(SEED_2, step_time=model)
        assert plan.rescheduled_queue == ["req-201"]
        assert plan.prefix_cache_savings_tokens == 4096
        assert plan.sla_violation_projected is True
        (p,) = plan.requests
        assert p.violates and p.slack_ms < 0
        assert p.completion_ms >= 2048 * 0.05  # 2048 sequential decode steps


@settings(max_examples=40, deadline=None)
@given(st.floats(0.05, 2.73))
def test_seed_outcomes_follow_from_the_model_for_fast_enough_steps(step_ms: float) -> None:
    """For a constant step of s ms the seeds' outcomes hold exactly when 2048·s > 100 (req-201
    late), 400·s <= 1200 (req-102 in time) and 150 - 16·s < 1200 - 400·s (req-101 has less slack,
    so least-slack puts it first): 0.049 < s < 2.734."""
    model = ConstantStepTime(step_time_s=step_ms / 1000)
    p1, p2 = reschedule(SEED_1, step_time=model), reschedule(SEED_2, step_time=model)
    assert (p1.rescheduled_queue, p1.prefix_cache_savings_tokens, p1.sla_violation_projected) == (
        ["req-101", "req-102"],
        576,
        False,
    )
    assert (p2.rescheduled_queue, p2.prefix_cache_savings_tokens, p2.sla_violation_projected) == (
        ["req-201"],
        4096,
        True,
    )


def test_seed_1_flips_where_the_model_says() -> None:
    # 2.8 ms: both in time, but req-102's slack (80 ms) is now below req-101's (105.2 ms).
    plan = reschedule(SEED_1, step_time=ConstantStepTime(step_time_s=0.0028))
    assert plan.rescheduled_queue == ["req-102", "req-101"] and not plan.sla_violation_projected
    # 3.1 ms: 400 steps = 1240 ms > 1200 ms, req-102 can no longer make it and goes after req-101.
    plan = reschedule(SEED_1, step_time=ConstantStepTime(step_time_s=0.0031))
    assert plan.rescheduled_queue == ["req-101", "req-102"]
    assert [p.violates for p in plan.requests] == [False, True]


def test_finishing_exactly_at_the_budget_is_not_a_violation() -> None:
    # 400 steps of 3 ms: 1200 ms in floats is 1200.0000000000002; times are kept to the nanosecond.
    plan = reschedule(SEED_1, step_time=ConstantStepTime(step_time_s=0.003))
    b = next(p for p in plan.requests if p.req_id == "req-102")
    assert (b.req_id, b.completion_ms, b.slack_ms, b.violates) == ("req-102", 1200.0, 0.0, False)


def test_seed_1_default_context_projects_req_102_late() -> None:
    """Under the default context (Llama-3.1-8B on one H100, the roofline model: ~6.9 ms per decode
    step at batch 2) order and savings are the seeds', but req-102 cannot do 400 decode steps in
    1200 ms: this differs from the issue's stated "no violation", on purpose (the model decides)."""
    plan = reschedule(SEED_1)
    assert plan.step_time_model["kind"] == "roofline"
    assert plan.step_time_model["model"] == "llama-3.1-8b" and plan.step_time_model["gpu"] == "h100"
    assert plan.rescheduled_queue == ["req-101", "req-102"]
    assert plan.prefix_cache_savings_tokens == 576
    a, b = plan.requests
    assert not a.violates and 16 * 5.0 < a.completion_ms < 150
    assert b.violates and b.completion_ms > 400 * 5.0
    assert plan.sla_violation_projected is True


def test_seeds_decisions_under_a_small_model() -> None:
    """The seeds' stated outcomes hold for a deployment whose decode step at batch 2 is under
    2.73 ms (see the property test above): Llama-3.2-1B on one H100 (~1.5 ms per step)."""
    p1 = reschedule({**SEED_1, "model": "llama-3.2-1b", "gpu": "h100"})
    p2 = reschedule({**SEED_2, "model": "llama-3.2-1b", "gpu": "h100"})
    assert p1.step_time_model["model"] == "llama-3.2-1b"
    assert (p1.rescheduled_queue, p1.prefix_cache_savings_tokens, p1.sla_violation_projected) == (
        ["req-101", "req-102"],
        576,
        False,
    )
    assert (p2.rescheduled_queue, p2.prefix_cache_savings_tokens, p2.sla_violation_projected) == (
        ["req-201"],
        4096,
        True,
    )
    # A bigger model on the same GPU is slower per step: every projected completion moves later.
    slow = reschedule({**SEED_1, "model": "llama-3.1-70b", "gpu": "h100", "tp": 4})
    fast = {p.req_id: p.completion_ms for p in p1.requests}
    assert all(p.completion_ms > fast[p.req_id] for p in slow.requests)


def test_unknown_model_is_a_clear_input_error() -> None:
    with pytest.raises(RescheduleInputError, match=r"model/gpu/tp: .*llama-9"):
        reschedule({**SEED_1, "model": "llama-9"})


def test_cli_model_context(tmp_path: Path) -> None:
    f = _write(tmp_path, SEED_1)
    res = runner.invoke(app, ["reschedule", str(f), "--json", "--model", "llama-3.2-1b", "--gpu", "h100"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["sla_violation_projected"] is False and plan["step_time_model"]["model"] == "llama-3.2-1b"
    bad = runner.invoke(app, ["reschedule", str(f), "--gpu", "tpu-v9"])
    assert bad.exit_code != 0 and "tpu-v9" in bad.output


def _write(tmp_path: Path, data: object, name: str = "in.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_cli_seed_1_json_is_the_plan_alone_and_deterministic(tmp_path: Path) -> None:
    f = _write(tmp_path, SEED_1)
    args = ["reschedule", str(f), "--json", "--step-time-ms", str(SEED_STEP_MS)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["rescheduled_queue"] == ["req-101", "req-102"]
    assert plan["prefix_cache_savings_tokens"] == 576
    assert plan["sla_violation_projected"] is False
    assert plan["step_time_model"] == {"kind": "constant", "step_time_s": 0.0025}
    assert [r["req_id"] for r in plan["requests"]] == ["req-101", "req-102"]
    assert runner.invoke(app, args).stdout == res.stdout


def test_cli_seed_context_in_the_file_and_seed_2(tmp_path: Path) -> None:
    data = copy.deepcopy(SEED_1) | {"step_time_ms": SEED_STEP_MS}
    plan = json.loads(runner.invoke(app, ["reschedule", str(_write(tmp_path, data)), "--json"]).stdout)
    assert plan["sla_violation_projected"] is False
    res = runner.invoke(app, ["reschedule", str(_write(tmp_path, SEED_2, "s2.json")), "--json"])
    plan2 = json.loads(res.stdout)
    assert plan2["rescheduled_queue"] == ["req-201"]
    assert plan2["prefix_cache_savings_tokens"] == 4096
    assert plan2["sla_violation_projected"] is True


def test_cli_table_for_humans(tmp_path: Path) -> None:
    res = runner.invoke(app, ["reschedule", str(_write(tmp_path, SEED_2))], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    assert "req-201" in res.stdout and "4,096" in res.stdout
    assert "1 of 1 projected to miss their SLA" in res.stdout
    assert "assumed: KV blocks survive" in res.stdout
