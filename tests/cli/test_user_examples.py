"""The users' own examples (examples/inputs/) run verbatim through the command they would pick.

Each test types the command a user reads off `servesim --help` on the shipped file, unchanged,
and checks the users' *decisions* (order, strategy, status, verdict, totals) from their
``*.expected.json``. Where a decision depends on the model, the test names the model under which
it holds, as examples/inputs/README.md documents.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "inputs"
runner = CliRunner()


def _run(*args: str) -> dict[str, Any]:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def _input(name: str) -> str:
    return str(EXAMPLES / f"{name}.input.json")


def _expected(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EXAMPLES / f"{name}.expected.json").read_text())
    return data


def test_every_example_is_shipped_with_its_expected_output_and_attribution() -> None:
    names = sorted(p.name.removesuffix(".input.json") for p in EXAMPLES.glob("*.input.json"))
    assert names == [
        "s000_empty",
        "s000_poisson",
        "s001_saturated",
        "s001_stable",
        "s002_a",
        "s002_b",
        "s003_a",
        "s003_b",
    ]
    for n in names:
        assert (EXAMPLES / f"{n}.expected.json").exists()
    readme = (EXAMPLES / "README.md").read_text()
    assert "examples/users/" in readme and "README.md" in readme  # the source folder's README
    for n in names:
        assert n.split("_")[0] in readme


def test_s000_empty_says_no_traffic() -> None:
    out = _run("scenario", _input("s000_empty"))
    want = _expected("s000_empty")
    assert out["simulated_batch_count"] == want["simulated_batch_count"] == 0
    assert out["scheduler_recommendation"] == want["scheduler_recommendation"]
    assert out["estimated_p90_ttft_ms"] == want["estimated_p90_ttft_ms"]


def test_s000_poisson_keeps_the_2048_token_budget() -> None:
    out = _run("scenario", _input("s000_poisson"))
    sentence = out["scheduler_recommendation"]
    assert "2048" in sentence  # the users: "Maintain chunked prefill at 2048"
    assert "max_num_batched_tokens 2048 ->" not in sentence  # no other budget proposed
    assert out["simulated_batch_count"] >= 1 and out["estimated_p90_ttft_ms"] > 0


@pytest.mark.parametrize("name", ["s001_saturated", "s001_stable"])
def test_s001_status_and_kv_exhaustion_match_the_users(name: str) -> None:
    out = _run("scenario", _input(name))
    want = _expected(name)
    assert out["status"] == want["status"]
    assert (out["cache_exhaustion_events"] > 0) == (want["cache_exhaustion_events"] > 0)


def test_s001_saturated_recommends_chunked_prefill() -> None:
    out = _run("scenario", _input("s001_saturated"))
    assert out["recommended_chunked_prefill"] is _expected("s001_saturated")["recommended_chunked_prefill"]


def test_s002_a_order_and_savings_verbatim_and_no_miss_on_a_1b_model() -> None:
    want = _expected("s002_a")
    default = _run("reschedule", _input("s002_a"))
    assert default["rescheduled_queue"] == want["rescheduled_queue"]
    assert default["prefix_cache_savings_tokens"] == want["prefix_cache_savings_tokens"]
    # Llama-3.1-8B on one H100 needs ~2.7 s for req-102's 400 decode steps (> its 1.2 s budget):
    assert default["sla_violation_projected"] is True
    small = _run("reschedule", _input("s002_a"), "--model", "llama-3.2-1b")
    assert small["rescheduled_queue"] == want["rescheduled_queue"]
    assert small["prefix_cache_savings_tokens"] == want["prefix_cache_savings_tokens"]
    assert small["sla_violation_projected"] is want["sla_violation_projected"] is False


def test_s002_b_projects_the_sla_miss() -> None:
    out = _run("reschedule", _input("s002_b"))
    want = _expected("s002_b")
    for key in ("rescheduled_queue", "prefix_cache_savings_tokens", "sla_violation_projected"):
        assert out[key] == want[key], key


def _decisions(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"job_id": d["job_id"], "strategy": d["strategy"], "recompute_required": d["recompute_required"]}
        for d in plan["scheduled_migrations"]
    ]


def _check_plan(plan: dict[str, Any], want: dict[str, Any]) -> None:
    assert _decisions(plan) == want["scheduled_migrations"]
    assert plan["total_recompute_tokens"] == want["total_recompute_tokens"]
    assert plan["capacity_status"] == want["capacity_status"]


def test_s003_a_record_type_accepted_and_verdicts_hold_on_405b(tmp_path: Path) -> None:
    args = ("recover", _input("s003_a"), "--outbox", str(tmp_path / "outbox"))
    verbatim = _run(*args)  # record_type and every field as the users wrote them
    assert verbatim["interrupted_node"] == "worker-04"
    _check_plan(_run(*args, "--model", "llama-3.1-405b-fp8", "--tp", "8"), _expected("s003_a"))


@pytest.mark.parametrize("model", [("llama-3.1-405b-fp8", "8"), ("llama-3.1-8b", "1")])
def test_s003_b_cold_restart_under_either_model(tmp_path: Path, model: tuple[str, str]) -> None:
    plan = _run("recover", _input("s003_b"), "--outbox", str(tmp_path), "--model", model[0], "--tp", model[1])
    _check_plan(plan, _expected("s003_b"))


def test_s003_b_verbatim_with_the_default_context(tmp_path: Path) -> None:
    _check_plan(_run("recover", _input("s003_b"), "--outbox", str(tmp_path)), _expected("s003_b"))


@pytest.mark.parametrize("name", ["s003_a", "s003_b"])
def test_advise_accepts_the_recovery_records_verbatim(tmp_path: Path, name: str) -> None:
    out = _run("advise", _input(name), "--advisor", "rules", "--outbox", str(tmp_path))
    assert out["task"] == "fallback"
    assert out["advice"]["decisions"]


def test_advise_accepts_the_reschedule_inputs_verbatim(tmp_path: Path) -> None:
    out = _run("advise", _input("s002_a"), "--advisor", "rules", "--outbox", str(tmp_path))
    assert out["task"] == "reschedule"


#: The command examples/inputs/README.md gives for each file, as a person types it (no --json).
HUMAN = {"s000": "scenario", "s001": "scenario", "s002": "reschedule", "s003": "recover"}


@pytest.mark.parametrize(
    "name", sorted(p.name.removesuffix(".input.json") for p in EXAMPLES.glob("*.input.json"))
)
def test_every_example_reads_as_a_table_in_human_output(name: str) -> None:
    """The human form of each README command (s000_poisson's was a TypeError in the timed-as line
    when the memory model sized the KV blocks): exit 0, no traceback, the file's answer shown."""
    res = runner.invoke(app, [HUMAN[name.split("_")[0]], _input(name)])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output and res.exception is None
    if HUMAN[name.split("_")[0]] == "scenario":
        timed = [ln for ln in res.stdout.splitlines() if ln.startswith("timed as: ")]
        assert all("KV blocks" in ln and "None" not in ln for ln in timed)
        assert bool(timed) == (name != "s000_empty")  # an empty request list is not timed
        assert "status" in res.stdout
