"""The advisor: typed, validated answers; Claude's checked by re-simulation; a deterministic
rules advisor offline and as the fallback; the API key never leaves the client."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from anthropic_mock import FAKE_KEY, FakeAnthropic
from pydantic import ValidationError
from typer.testing import CliRunner

from servesim.advisor import (
    BatchingAdvice,
    BatchingCase,
    ClaudeAdvisor,
    FallbackAdvice,
    FallbackCase,
    RescheduleAdvice,
    RescheduleCase,
    advise,
    write_outbox,
)
from servesim.cli.main import app
from servesim.cluster.recovery import plan_recovery
from servesim.engine import SLO, ConstantStepTime, EngineConfig, LinearStepTime
from servesim.resched import parse_input
from servesim.traces import open_trace

if TYPE_CHECKING:  # pydantic-ai (2 CPU-s with Anthropic's client) is imported by the tests that use it,
    # not by every xdist worker at collection
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.models.function import AgentInfo

SEED_RESCHED = {
    "batch_capacity": 4,
    "interrupted_requests": [
        {"req_id": "req-101", "tokens_processed": 512, "tokens_remaining": 16, "sla_budget_ms": 150},
        {"req_id": "req-102", "tokens_processed": 64, "tokens_remaining": 400, "sla_budget_ms": 1200},
    ],
}
SEED_RECOVERY = {
    "interrupted_node": "node-3",
    "preemption_timestamp": "2026-01-01T00:00:00Z",
    "network_bandwidth_gbps": 10,
    "context": {"model": "llama-3.1-405b-fp8", "tp": 8},  # where job-801 migrates (examples/inputs/README.md)
    "active_jobs": [
        {"job_id": "job-801", "prompt_tokens": 1024, "generated_tokens": 128, "kv_cache_checkpointed": True},
        {"job_id": "job-802", "prompt_tokens": 2048, "generated_tokens": 64, "kv_cache_checkpointed": False},
    ],
}


def resched_case() -> RescheduleCase:
    return RescheduleCase(parse_input(SEED_RESCHED), ConstantStepTime(step_time_s=0.0025))


def fallback_case() -> FallbackCase:
    return FallbackCase(plan_recovery(SEED_RECOVERY))


def batching_case() -> BatchingCase:
    trace = open_trace("bursty", num_requests=300, seed=1)
    return BatchingCase(
        trace, EngineConfig(num_gpu_blocks=1500), LinearStepTime(), slo=SLO(ttft_ms=500, tpot_ms=60)
    )


# --------------------------------------------------------------------------- validators
def test_validators_reject_what_is_not_actionable() -> None:
    ids = {"valid_ids": ["a", "b"]}
    with pytest.raises(ValidationError, match="unknown req_ids"):
        RescheduleAdvice.model_validate({"order": ["a", "b", "zz"]}, context=ids)
    with pytest.raises(ValidationError, match="missing req_ids"):
        RescheduleAdvice.model_validate({"order": ["a"]}, context=ids)
    with pytest.raises(ValidationError, match="more than once"):
        RescheduleAdvice.model_validate({"order": ["a", "a", "b"]}, context=ids)
    ctx = {"valid_ids": ["j1", "j2"], "checkpointed_ids": ["j1"]}
    ok = [
        {"job_id": "j1", "strategy": "MIGRATE_STATE", "reason": "x"},
        {"job_id": "j2", "strategy": "COLD_RESTART", "reason": "y"},
    ]
    FallbackAdvice.model_validate({"decisions": ok}, context=ctx)
    bad = [{**ok[0]}, {**ok[1], "strategy": "MIGRATE_STATE"}]
    with pytest.raises(ValidationError, match="needs a KV checkpoint"):
        FallbackAdvice.model_validate({"decisions": bad}, context=ctx)
    with pytest.raises(ValidationError, match="missing job_ids"):
        FallbackAdvice.model_validate({"decisions": ok[:1]}, context=ctx)
    flags = {"max_num_seqs": 256, "max_num_batched_tokens": 128, "enable_chunked_prefill": True}
    common = {"rationale": ["r"], "expected_effect": "e"}
    with pytest.raises(ValidationError, match="must be >= max_num_seqs"):
        BatchingAdvice.model_validate({**flags, **common})
    off = {"max_num_seqs": 8, "max_num_batched_tokens": 1024, "enable_chunked_prefill": False, **common}
    with pytest.raises(ValidationError, match="max_model_len"):
        BatchingAdvice.model_validate(off, context={"max_model_len": 4096})
    with pytest.raises(ValidationError):
        BatchingAdvice.model_validate({**off, "max_num_seqs": 0})
    long = {**off, "enable_chunked_prefill": True, "long_prefill_token_threshold": 5000}
    with pytest.raises(ValidationError, match="cannot be greater than max_model_len"):
        BatchingAdvice.model_validate(long, context={"max_model_len": 4096})


# --------------------------------------------------------------------------- rules advisor
def test_rules_advisor_answers_every_task_deterministically() -> None:
    for make in (resched_case, fallback_case, batching_case):
        a, b = advise(make(), "rules"), advise(make(), "rules")
        assert a.advisor == "rules" and a.requires_human_review
        assert a.model_dump_json() == b.model_dump_json()
        # batching: the rules' answer lands on the TTFT cap (500.4 ms > 500 ms): worded as a miss
        assert a.verification.accepted or a.verification.verdict == "rejected_slo"
        assert [c.label for c in a.verification.candidates][:2] == ["current", "proposed"]
    r = advise(resched_case(), "rules")
    assert isinstance(r.advice, RescheduleAdvice) and r.advice.order == ["req-101", "req-102"]
    f = advise(fallback_case(), "rules")
    assert isinstance(f.advice, FallbackAdvice)
    assert {d.job_id: d.strategy for d in f.advice.decisions} == {
        "job-801": "MIGRATE_STATE",
        "job-802": "COLD_RESTART",
    }


def test_rules_batching_fixes_the_symptoms_it_sees() -> None:
    result = advise(batching_case(), "rules")
    a = result.advice
    assert isinstance(a, BatchingAdvice)
    assert any(r.startswith("R1") for r in a.rationale)  # preemptions in the current run
    cur, new = (c.metrics for c in result.verification.candidates[:2])
    assert new["goodput_rps"] > cur["goodput_rps"]  # type: ignore[operator]


def test_auto_without_a_key_is_the_rules_advisor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert advise(resched_case(), "auto").advisor == "rules"


# ---------------------------------------------------------- agent logic (pydantic-ai test models)
def test_claude_answer_is_verified_and_labelled() -> None:
    from pydantic_ai.models.test import TestModel

    model = TestModel(custom_output_args={"order": ["req-101", "req-102"], "reasons": []})
    result = advise(resched_case(), "claude", claude=ClaudeAdvisor(model=model))
    assert result.advisor == "claude" and result.notice is None
    assert result.verification.accepted and result.rounds == 1
    assert result.action_log[0].advisor == "claude" and result.action_log[0].outcome == "ok"


def test_fallback_proposal_is_costed_next_to_restart_all_and_the_planner() -> None:
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    seen: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(str(messages[-1]))
        args = {
            "decisions": [
                {"job_id": "job-801", "strategy": "MIGRATE_STATE", "reason": "transfer beats recompute"},
                {"job_id": "job-802", "strategy": "COLD_RESTART", "reason": "no checkpoint"},
            ]
        }
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    result = advise(fallback_case(), "claude", claude=ClaudeAdvisor(model=FunctionModel(respond)))
    assert result.advisor == "claude" and result.verification.accepted
    cur, new, best = (c.metrics for c in result.verification.candidates)
    assert new == best  # the same choice as the planner's
    assert new["total_recovery_ms"] < cur["total_recovery_ms"]  # type: ignore[operator]
    assert "job-801" in seen[0] and "migrate_ms" in seen[0]  # Claude saw the per-job costs


def test_proposals_that_make_the_slo_worse_are_rejected_and_replaced() -> None:
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        args = {
            "max_num_seqs": 2,
            "max_num_batched_tokens": 256,
            "enable_chunked_prefill": True,
            "replicas": 1,
            "rationale": ["tiny batches"],
            "expected_effect": "lower latency",
        }
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])

    result = advise(batching_case(), "claude", claude=ClaudeAdvisor(model=FunctionModel(respond)), rounds=2)
    assert len(result.rejected) == 2
    assert all(not r.verification.accepted for r in result.rejected)
    assert "goodput under the SLO drops" in result.rejected[0].verification.reason
    assert result.advisor == "rules" and result.notice is not None and "worse" in result.notice
    assert [e.advisor for e in result.action_log] == ["claude", "claude", "rules"]


# --------------------------------------------------------------------------- real Anthropic client, mock HTTP
def claude_over(fake: FakeAnthropic, **kw: Any) -> ClaudeAdvisor:
    return ClaudeAdvisor(api_key=FAKE_KEY, http_client=fake.client(), max_retries=2, **kw)


GOOD = {"order": ["req-101", "req-102"], "reasons": [{"req_id": "req-101", "reason": "16 tokens left"}]}


def test_real_client_success_sends_a_bounded_summary_and_records_usage() -> None:
    fake = FakeAnthropic([GOOD])
    result = advise(resched_case(), "claude", claude=claude_over(fake))
    assert result.advisor == "claude" and result.verification.accepted
    headers, body = fake.requests[0]
    assert body["max_tokens"] == 2048
    schema = json.dumps(body.get("output_config") or body.get("tools"))
    assert "order" in schema and "reasons" in schema  # the typed answer's schema went along
    prompt = json.dumps(body["messages"])
    assert "req-101" in prompt and len(prompt) < 20_000
    entry = result.action_log[0]
    assert (entry.input_tokens, entry.output_tokens, entry.requests) == (321, 45, 1)
    assert entry.latency_ms > 0
    assert headers.get("x-api-key") == FAKE_KEY or FAKE_KEY in headers.get("authorization", "")


def test_429_is_retried_then_succeeds() -> None:
    fake = FakeAnthropic([429, GOOD])
    result = advise(resched_case(), "claude", claude=claude_over(fake))
    assert result.advisor == "claude" and len(fake.requests) == 2


def test_persistent_500_falls_back_to_rules_with_a_notice() -> None:
    fake = FakeAnthropic([500, 500, 500])
    result = advise(resched_case(), "claude", claude=claude_over(fake))
    assert len(fake.requests) == 3  # one try + two retries
    assert result.advisor == "rules"
    assert result.notice is not None and "api_error" in result.notice and "500" in result.notice
    assert result.action_log[0].outcome == "api_error"


def test_timeout_falls_back_to_rules() -> None:
    fake = FakeAnthropic(["stall"])
    result = advise(resched_case(), "claude", claude=claude_over(fake, timeout_s=0.5))
    assert result.advisor == "rules" and result.action_log[0].outcome == "timeout"


def test_malformed_output_is_retried_then_replaced() -> None:
    bad = {"order": ["req-101", "req-999"]}  # unknown id, req-102 missing
    fake = FakeAnthropic([bad, bad, bad, bad])
    result = advise(resched_case(), "claude", claude=claude_over(fake, output_retries=2))
    assert len(fake.requests) == 3  # the answer + 2 corrections
    retry_prompt = json.dumps(fake.requests[1][1]["messages"])
    assert (
        "req-999" in retry_prompt and "unknown req_ids" in retry_prompt
    )  # the validator's message went back
    assert result.advisor == "rules" and result.notice is not None and "invalid_output" in result.notice


def test_the_key_never_appears_in_outputs_logs_or_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    from pydantic_ai.models.test import TestModel

    caplog.set_level(logging.DEBUG)
    texts = []
    for script in ([GOOD], [500, 500, 500], [{"order": []}] * 4, ["stall"]):
        fake = FakeAnthropic(script)
        result = advise(resched_case(), "claude", claude=claude_over(fake, timeout_s=0.5))
        texts.append(result.model_dump_json())
        texts += [str(p.read_text()) for p in write_outbox(result, resched_case(), tmp_path)]
    out = capsys.readouterr()
    texts += [out.out, out.err, caplog.text]
    assert all(FAKE_KEY not in t for t in texts)
    assert ClaudeAdvisor(api_key=FAKE_KEY, model=TestModel()).redact(f"bad key {FAKE_KEY}") == "bad key ***"


def test_claude_without_a_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        ClaudeAdvisor()


@pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="live test: needs ANTHROPIC_API_KEY")
def test_live_claude_answers_the_seed_reschedule() -> None:
    result = advise(resched_case(), "claude")
    assert result.advisor in ("claude", "rules")
    assert isinstance(result.advice, RescheduleAdvice)
    assert sorted(result.advice.order) == ["req-101", "req-102"]


# --------------------------------------------------------------------------- CLI and outbox
def test_cli_infers_the_task_and_apply_only_writes_the_outbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    runner = CliRunner()
    rin = tmp_path / "r.json"
    rin.write_text(json.dumps(SEED_RESCHED))
    rec = tmp_path / "f.json"
    rec.write_text(json.dumps(SEED_RECOVERY))
    log = tmp_path / "actions.jsonl"
    res = runner.invoke(
        app, ["advise", str(rin), "--json", "--step-time-ms", "2.5", "--action-log", str(log)]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["task"] == "reschedule" and out["advisor"] == "rules" and out["requires_human_review"] is True
    assert json.loads(log.read_text().splitlines()[0])["advisor"] == "rules"
    res = runner.invoke(app, ["advise", str(rec), "--json", "--apply", "--outbox", str(tmp_path / "ob")])
    out = json.loads(res.stdout)
    assert out["task"] == "fallback"
    files = [Path(p) for p in out["outbox_files"]]
    assert files and all(p.parent == tmp_path / "ob" for p in files)
    assert json.loads(files[0].read_text())["requires_human_review"] is True
    res = runner.invoke(
        app, ["advise", "bursty", "-n", "200", "--json", "--apply", "--outbox", str(tmp_path / "ob2")]
    )
    out = json.loads(res.stdout)
    assert out["task"] == "batching"
    yaml_file = next(Path(p) for p in out["outbox_files"] if p.endswith(".yaml"))
    assert yaml_file.read_text().startswith("# servesim advice: NOT APPLIED")
    bad = runner.invoke(app, ["advise", str(rin), "--advisor", "oracle"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ")
