"""The advisor's verdict words follow the re-simulation: "no change" for the current setting,
"rejected: still misses the SLO" where the proposal does, "accepted" (green) only for a real change
that meets the SLO and improves -- the same in the views, the CLI's human output and ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.advisor import BatchingCase, Verification, advise
from servesim.advisor.cases import verify
from servesim.cli.main import app
from servesim.engine import SLO, EngineConfig, LinearStepTime
from servesim.traces import open_trace
from servesim.views.advisor import advice_view, verdict_words

RESCHED = {
    "batch_capacity": 4,
    "interrupted_requests": [  # already least-slack first: the rules advisor keeps this order
        {"req_id": "req-101", "tokens_processed": 512, "tokens_remaining": 16, "sla_budget_ms": 150},
        {"req_id": "req-102", "tokens_processed": 64, "tokens_remaining": 400, "sla_budget_ms": 1200},
    ],
}


def case(slo: SLO) -> BatchingCase:
    trace = open_trace("bursty", num_requests=300, seed=1)
    return BatchingCase(trace, EngineConfig(num_gpu_blocks=1500), LinearStepTime(), slo=slo)


LOOSE = SLO(ttft_ms=60_000, tpot_ms=1_000)  # the current setting meets it


def test_the_current_setting_proposed_again_is_no_change() -> None:
    c = case(LOOSE)
    v = verify(c, c.current_advice())
    assert v.verdict == "no_change" and v.accepted  # nothing to change is a usable answer
    assert verdict_words(v) == ("no change", "info")
    assert "the proposal is the current setting" in v.reason
    tight = case(SLO(ttft_ms=600, tpot_ms=60))  # ... which misses this one: said so, not "no change"
    assert verify(tight, tight.current_advice()).verdict == "rejected_slo"


def test_a_proposal_that_misses_the_slo_is_rejected_even_when_goodput_rises() -> None:
    c = case(SLO(ttft_ms=600, tpot_ms=60))
    better = advise(c, "rules").advice  # fixes the preemptions: more goodput
    tight = case(SLO(ttft_ms=5))  # ... but no setting gets TTFT p99 under 5 ms
    v = verify(tight, better)  # type: ignore[arg-type]
    cur, new = (x.metrics for x in v.candidates[:2])
    assert new["goodput_rps"] >= cur["goodput_rps"]  # type: ignore[operator]
    assert v.verdict == "rejected_slo" and not v.accepted
    assert verdict_words(v) == ("rejected: still misses the SLO", "fail")
    assert "TTFT p99" in v.reason and "> 5 ms" in v.reason


def test_accepted_in_green_only_for_a_change_that_meets_the_slo_and_improves() -> None:
    result = advise(case(SLO(ttft_ms=600, tpot_ms=60)), "rules")
    v = result.verification
    cur, new = (x.metrics for x in v.candidates[:2])
    assert new["goodput_rps"] > cur["goodput_rps"]  # type: ignore[operator]
    assert new["ttft_p99_ms"] <= 600 and new["tpot_p99_ms"] <= 60  # type: ignore[operator]
    assert v.verdict == "accepted"
    check = advice_view(result).verdicts[0]
    assert (check.status, check.text.split(":")[0]) == ("pass", "accepted")


def test_views_never_say_accepted_for_no_change() -> None:
    c = case(LOOSE)
    result = advise(c, "rules")
    unchanged = result.model_copy(
        update={"verification": verify(c, c.current_advice()), "advice": c.current_advice()}
    )
    check = advice_view(unchanged).verdicts[0]
    assert check.status == "info" and check.text.startswith("no change: ")
    assert "accepted" not in check.text


def test_results_written_before_the_verdict_words_keep_their_meaning() -> None:
    old = {"accepted": False, "reason": "worse", "candidates": []}
    assert Verification.model_validate(old).verdict == "rejected"
    assert Verification.model_validate({**old, "accepted": True}).verdict == "accepted"


def test_cli_human_output_and_json_say_no_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    rin = tmp_path / "r.json"
    rin.write_text(json.dumps(RESCHED))
    runner = CliRunner()
    human = runner.invoke(app, ["advise", str(rin), "--step-time-ms", "2.5"])
    assert human.exit_code == 0, human.output
    assert "reschedule advice by rules: NO CHANGE" in human.stdout
    assert "ACCEPTED" not in human.stdout
    res = runner.invoke(app, ["advise", str(rin), "--json", "--step-time-ms", "2.5"])
    out = json.loads(res.stdout)
    assert out["verification"]["verdict"] == "no_change" and out["verification"]["accepted"] is True


def test_cli_human_output_and_json_say_rejected_when_the_slo_is_still_missed() -> None:
    runner = CliRunner()
    args = ["advise", "bursty", "-n", "300", "--slo", "ttft_p99_ms=50"]
    human = runner.invoke(app, args)
    assert human.exit_code == 0, human.output
    assert "batching advice by rules: REJECTED: STILL MISSES THE SLO" in human.stdout
    out = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert out["verification"]["verdict"] == "rejected_slo" and out["verification"]["accepted"] is False
