"""Bad input gets one clear line naming the request (API: RescheduleInputError; CLI: exit code 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from resched_strategies import SEED_1
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.resched import RescheduleInputError, parse_input, reschedule

runner = CliRunner()
R102 = "request 'req-102' (interrupted_requests[1])"


def _with(**changes: Any) -> dict[str, Any]:
    """SEED_1 with the second request (req-102) changed; a None value removes the field."""
    data = json.loads(json.dumps(SEED_1))
    r = data["interrupted_requests"][1]
    for k, v in changes.items():
        if v is None:
            r.pop(k)
        else:
            r[k] = v
    return data


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_with(tokens_processed=-1), f"{R102}: tokens_processed: "),
        (_with(tokens_remaining=-3), f"{R102}: tokens_remaining: "),
        (_with(tokens_remaining=0), f"{R102}: tokens_remaining: "),
        (_with(preemptions=-1), f"{R102}: preemptions: "),
        (_with(sla_budget_ms=-5), f"{R102}: sla_budget_ms: "),
        (
            _with(tokens_remaining=None),
            f"{R102}: tokens_remaining: required",
        ),
        (_with(sla_budget_ms=None), f"{R102}: sla_budget_ms: required"),
        (_with(req_id=None), "request without req_id (interrupted_requests[1]): req_id: required"),
        (_with(req_id="req-101"), "duplicate req_id 'req-101' at interrupted_requests[0] and [1]"),
        (
            _with(cached_tokens=100),
            f"{R102}: cached_tokens (100) exceeds",
        ),
        (_with(tokens_procesed=5), f"{R102}: tokens_procesed: Extra"),
        (
            {**SEED_1, "batch_capacity": 0},
            "batch_capacity: Input should be greater than or equal to 1 (got 0)",
        ),
        ({"interrupted_requests": SEED_1["interrupted_requests"]}, "batch_capacity: required field missing"),
        ({**SEED_1, "block_size": 0}, "block_size: "),
        ({**SEED_1, "max_num_batched_tokens": 2}, "max_num_batched_tokens (2) must be >= batch_capacity (4)"),
        ({**SEED_1, "policy": "random"}, "policy: "),
        ("nonsense", "expected an object with batch_capacity and interrupted_requests"),
    ],
)
def test_bad_input_names_the_request(data: Any, expected: str) -> None:
    with pytest.raises(RescheduleInputError) as info:
        reschedule(data)
    message = str(info.value)
    assert expected in message
    assert "\n" not in message


def test_all_problems_at_once_and_a_duplicate_among_them() -> None:
    data = _with(tokens_processed=-1, req_id="req-101") | {"batch_capacity": 0}
    with pytest.raises(RescheduleInputError) as info:
        parse_input(data)
    message = str(info.value)
    assert "batch_capacity" in message
    assert "request 'req-101' (interrupted_requests[1]): tokens_processed" in message
    assert "duplicate req_id 'req-101'" in message


def test_bare_list_needs_a_capacity_and_ids_may_be_numbers() -> None:
    reqs = [{"req_id": 7, "tokens_processed": 5, "tokens_remaining": 1, "sla_budget_ms": 10}]
    with pytest.raises(RescheduleInputError, match="batch_capacity: required with a bare list"):
        reschedule(reqs)
    plan = reschedule(reqs, batch_capacity=2)
    assert plan.rescheduled_queue == ["7"] and plan.batch_capacity == 2


def test_empty_request_list_is_an_empty_plan() -> None:
    plan = reschedule({"batch_capacity": 3, "interrupted_requests": []})
    assert plan.rescheduled_queue == [] and plan.makespan_ms == 0.0 and not plan.sla_violation_projected


def test_a_step_time_model_must_return_a_positive_time() -> None:
    class Broken:
        def step_time(self, batch: object) -> float:
            return 0.0

    with pytest.raises(ValueError, match="a step must take a finite time > 0"):
        reschedule(SEED_1, step_time=Broken())


def _cli(tmp_path: Path, data: Any, *args: str) -> Any:
    path = tmp_path / "in.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return runner.invoke(app, ["reschedule", str(path), *args])


@pytest.mark.parametrize(
    ("data", "args", "expected"),
    [
        (_with(tokens_processed=-7), [], f"{R102}: tokens_processed"),
        (_with(req_id="req-101"), [], "duplicate req_id 'req-101'"),
        ({**SEED_1, "batch_capacity": 0}, [], "batch_capacity: Input should be greater than or equal to 1"),
        (SEED_1, ["--batch-capacity", "0"], "batch_capacity: Input should be greater than or equal to 1"),
        (
            _with(sla_budget_ms=None),
            [],
            f"{R102}: sla_budget_ms: required",
        ),
        (SEED_1["interrupted_requests"], [], "batch_capacity: required with a bare list"),
        ("{not json", [], "not valid JSON"),
        (SEED_1, ["--step-time-ms", "-1"], "step_time_ms: "),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_code_2(
    tmp_path: Path, data: Any, args: list[str], expected: str
) -> None:
    res = _cli(tmp_path, data, "--json", *args)
    assert res.exit_code == 2
    assert res.stdout == ""
    assert res.stderr.startswith("error: ") and expected in res.stderr
    assert res.stderr.count("\n") == 1


def test_cli_missing_file(tmp_path: Path) -> None:
    res = runner.invoke(app, ["reschedule", str(tmp_path / "nope.json")])
    assert res.exit_code == 2 and "nope.json" in res.stderr


def test_cli_bare_list_with_capacity_and_flags_win_over_the_file(tmp_path: Path) -> None:
    res = _cli(
        tmp_path, SEED_1["interrupted_requests"], "--json", "--batch-capacity", "1", "--policy", "fcfs"
    )
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["batch_capacity"] == 1 and plan["policy"] == "fcfs"
    assert plan["requests"][1]["admitted_ms"] == plan["requests"][0]["completion_ms"]  # one slot
    data = SEED_1 | {"block_size": 16, "cache_survives": True}
    res = _cli(tmp_path, data, "--json", "--block-size", "128", "--no-cache-survives")
    plan = json.loads(res.stdout)
    assert (plan["block_size"], plan["cache_survives"], plan["prefix_cache_savings_tokens"]) == (
        128,
        False,
        0,
    )
    res = _cli(tmp_path, SEED_1, "--json", "--block-size", "128", "--max-num-batched-tokens", "64")
    plan = json.loads(res.stdout)
    assert plan["prefix_cache_savings_tokens"] == 512 + 0 and plan["max_num_batched_tokens"] == 64


def test_schema_lists_the_resched_models() -> None:
    res = runner.invoke(app, ["schema", "RescheduleInput"])
    assert res.exit_code == 0
    schema = json.loads(res.stdout)
    assert {"batch_capacity", "interrupted_requests"} <= set(schema["required"])
    plan = json.loads(runner.invoke(app, ["schema", "ReschedulePlan"]).stdout)
    assert {"rescheduled_queue", "prefix_cache_savings_tokens", "sla_violation_projected"} <= set(
        plan["required"]
    )
    for name in ("InterruptedRequest", "ProjectedRequest"):
        assert runner.invoke(app, ["schema", name]).exit_code == 0
