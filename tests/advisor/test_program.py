"""The DSPy advisor with DSPy's DummyLM (no network): wiring, the simulator metric, saving and
loading a compiled program, the fallback order, and parsing a Claude-shaped answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servesim.advisor import RescheduleAdvice, advise
from servesim.advisor.cases import RescheduleCase
from servesim.advisor.metric import _part, baseline, outcome, rules_for, score
from servesim.advisor.program import (
    DSPyAdvisor,
    _dspy,
    compile_program,
    load_saved,
    new_program,
    program_path,
    question_of,
    save_program,
)
from servesim.advisor.scenarios import (
    ScenarioSet,
    build_scenario_case,
    generate_scenarios,
    scenarios_json,
    shipped_scenarios,
)
from servesim.advisor.service import _choose
from servesim.errors import InputError

FIXTURES = Path(__file__).parent / "fixtures"
FAKE_KEY = "sk-ant-test-DO-NOT-LEAK-0123456789"


def _case(sid: str) -> Any:
    s = shipped_scenarios()
    return build_scenario_case(next(x for x in s.train + s.val if x.id == sid))


def _dummy(answers: list[Any]) -> Any:
    dspy = _dspy()
    return dspy.utils.DummyLM(
        [{"reasoning": "least slack first", "advice": a.model_dump_json()} for a in answers]
    )


# ------------------------------------------------------------------------------------ scenarios
def test_the_shipped_scenarios_are_what_the_seeded_generator_gives() -> None:
    text = (Path(__file__).parents[2] / "src/servesim/data/advisor/scenarios.json").read_text()
    assert text == scenarios_json(generate_scenarios(0))
    s = ScenarioSet.model_validate_json(text)
    shapes = {(x.task, x.shape) for x in s.train + s.val}
    assert {("reschedule", "seed-002"), ("fallback", "seed-003"), ("reschedule", "hard")} <= shapes
    assert not {x.id for x in s.train} & {x.id for x in s.val}


# --------------------------------------------------------------------------------------- metric
def test_the_metric_ranks_by_the_re_simulated_outcome() -> None:
    case = _case("val-reschedule-03")  # a hard case: the SLA-aware order saves violations
    rules = rules_for(case)
    base = baseline(case)
    assert outcome(case, rules)["sla_misses"] < outcome(case, base)["sla_misses"]
    assert score(case, rules) == 1.0
    worse = RescheduleAdvice(order=list(reversed(rules.order)))
    assert score(case, worse) < score(case, base) < score(case, rules)
    # invalid proposals score 0: unknown, missing or duplicated ids
    assert score(case, RescheduleAdvice(order=[*rules.order, "nope"])) == 0.0
    assert score(case, {"order": rules.order[:-1]}) == 0.0
    assert score(case, None) == 0.0


def test_the_metric_parts_by_hand() -> None:
    assert _part(5, 10, 5) == 1.0  # as good as the rules
    assert _part(10, 10, 5) == 0.5  # the baseline
    assert _part(7.5, 10, 5) == 0.75  # half way
    assert _part(21, 10, 5) == pytest.approx(0.25)  # twice the baseline's loss (+1)
    assert _part(3, 3, 9) == 1.0  # the baseline is the better reference


def test_migrating_a_job_without_checkpoint_scores_zero() -> None:
    case = _case("train-fallback-04")
    ids = case.validation_context()
    no_ckpt = next(i for i in ids["valid_ids"] if i not in ids["checkpointed_ids"])
    decisions = [
        {"job_id": j, "strategy": "MIGRATE_STATE" if j == no_ckpt else "COLD_RESTART", "reason": "x"}
        for j in ids["valid_ids"]
    ]
    assert score(case, {"decisions": decisions}) == 0.0
    assert score(case, rules_for(case)) == 1.0


# ------------------------------------------------------------------------------------- wiring
def test_the_uncompiled_program_answers_and_says_so() -> None:
    case = _case("val-reschedule-03")
    lm = _dummy([rules_for(case)])
    result = advise(case, "auto", program=DSPyAdvisor(lm=lm, use_saved=False, api_key=FAKE_KEY))
    assert result.advisor == "dspy"
    assert result.program == "dspy uncompiled"
    assert result.score == 1.0
    assert result.verification.verdict == "accepted"
    assert result.action_log[0].advisor == "dspy" and result.action_log[0].outcome == "ok"
    prompt = lm.history[-1]["messages"]
    text = json.dumps(prompt)
    assert "RescheduleAdvice" in text and "sla_budget_ms" in text  # typed in, typed out
    assert FAKE_KEY not in text


def test_an_invalid_answer_is_never_shown() -> None:
    case = _case("val-reschedule-03")
    rules = rules_for(case)
    bad = RescheduleAdvice(order=[*rules.order[:-1], "req-invented"])
    result = advise(case, "auto", program=DSPyAdvisor(lm=_dummy([bad]), use_saved=False, api_key=FAKE_KEY))
    assert result.advisor == "rules" and result.program == "rules"
    assert "req-invented" not in result.model_dump_json()
    assert "the DSPy program gave no usable answer (invalid_output" in (result.notice or "")


def test_a_worse_answer_is_sent_back_with_the_numbers() -> None:
    case = _case("val-reschedule-03")
    rules = rules_for(case)
    worse = RescheduleAdvice(order=list(reversed(rules.order)))
    lm = _dummy([worse, rules])
    result = advise(case, "dspy", program=DSPyAdvisor(lm=lm, use_saved=False, api_key=FAKE_KEY))
    assert result.advisor == "dspy" and result.rounds == 2
    assert len(result.rejected) == 1
    second = json.dumps(lm.history[-1]["messages"])
    assert "projected SLA violations" in second  # the feedback reached the program


def test_the_key_is_scrubbed_from_a_failed_call() -> None:
    dspy = _dspy()

    class Failing(dspy.utils.DummyLM):  # type: ignore[misc, name-defined]
        def __call__(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
            raise RuntimeError(f"401 invalid x-api-key {FAKE_KEY}")  # as the Anthropic client words it

    case = _case("val-reschedule-03")
    result = advise(case, "dspy", program=DSPyAdvisor(lm=Failing([]), use_saved=False, api_key=FAKE_KEY))
    assert result.advisor == "rules"
    assert FAKE_KEY not in result.model_dump_json()
    assert "***" in (result.action_log[0].detail or "")


# ------------------------------------------------------------------------------- save and load
def test_a_compiled_program_is_saved_versioned_and_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compile_program end to end on a one-train, one-val set: BootstrapFewShot keeps the demo the
    simulator scored 1, the file records both validation scores, and loading restores the demo."""
    full = shipped_scenarios()
    tiny = ScenarioSet(seed=0, train=[full.train[3]], val=[full.val[3]])
    monkeypatch.setattr("servesim.advisor.program.shipped_scenarios", lambda: tiny)
    train_case, val_case = build_scenario_case(tiny.train[0]), build_scenario_case(tiny.val[0])
    worse = RescheduleAdvice(order=list(reversed(rules_for(val_case).order)))
    # calls in order: val (uncompiled), train (bootstrap), val (compiled)
    lm = _dummy([worse, rules_for(train_case), rules_for(val_case)])
    out = tmp_path / "program.json"
    path, _saved = compile_program(lm, path=out)
    assert path == out
    data = json.loads(out.read_text())
    assert data["format"] == 1 and data["optimizer"] == "bootstrap"
    assert data["val_score_before"] == score(val_case, worse) < 1.0
    assert data["val_score_after"] == 1.0
    demos = data["state"]["reschedule.predict"]["demos"]
    assert len(demos) == 1
    loaded = load_saved(out)
    assert loaded is not None and loaded.val_score_after == 1.0
    adv = DSPyAdvisor(lm=_dummy([rules_for(val_case)]), saved=loaded, api_key=FAKE_KEY)
    assert adv.label == "dspy compiled (bootstrap, validation score 1.000)"
    assert len(adv.program.reschedule.predict.demos) == 1
    a, entry = adv.propose(val_case, None, 1)
    assert a is not None and entry.outcome == "ok"


def test_a_damaged_program_file_is_a_one_line_error(tmp_path: Path) -> None:
    p = tmp_path / "program.json"
    p.write_text("{not json")
    with pytest.raises(InputError, match="not a servesim advisor program"):
        load_saved(p)


# ------------------------------------------------------------------------------ fallback order
def test_the_fallback_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert _choose("auto", None, None) == ("rules", None)
    with pytest.raises(InputError, match="needs ANTHROPIC_API_KEY"):
        _choose("dspy", None, None)
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    assert not program_path().exists()
    name, p = _choose("auto", None, None)
    assert name == "dspy" and getattr(p, "label", None) == "dspy uncompiled"
    meta = {
        "model": "m",
        "optimizer": "bootstrap",
        "scenario_seed": 0,
        "train_scenarios": 1,
        "val_scenarios": 1,
        "val_score_before": 0.6,
        "val_score_after": 0.9,
    }
    save_program(new_program(), meta)
    try:
        name, p = _choose("auto", None, None)
        assert getattr(p, "label", None) == "dspy compiled (bootstrap, validation score 0.900)"
        assert _choose("rules", None, None) == ("rules", None)
    finally:
        program_path().unlink()


# --------------------------------------------------------------------- a Claude-shaped answer
def test_a_recorded_claude_shaped_answer_parses() -> None:
    """The text Claude returns for DSPy's chat format (a reasoning paragraph, the advice as a
    fenced JSON block): the adapter must turn it into a valid, verifiable RescheduleAdvice."""
    dspy = _dspy()
    from servesim.advisor.program import _signatures

    case = RescheduleCase(
        __import__("servesim.resched", fromlist=["parse_input"]).parse_input(
            json.loads((Path(__file__).parents[2] / "examples/inputs/s002_a.input.json").read_text())
        )
    )
    text = (FIXTURES / "claude_dspy_reschedule.txt").read_text()
    parsed = dspy.ChatAdapter().parse(_signatures()["reschedule"], text)
    advice = parsed["advice"]
    assert isinstance(advice, RescheduleAdvice)
    assert advice.order == ["req-101", "req-102"]
    assert score(case, advice) == 1.0
    assert question_of(case).model_dump()["batch_capacity"] == 4


# ---------------------------------------------------------------------------------------- CLI
S002 = str(Path(__file__).parents[2] / "examples/inputs/s002_a.input.json")


def test_the_cli_names_the_program_in_human_output_and_json(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from servesim.cli.main import app

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    runner = CliRunner()
    human = runner.invoke(app, ["advise", S002])
    assert human.exit_code == 0, human.output
    said = " ".join(human.output.split())
    assert "answered by: the rules advisor simulator score 1.000 (re-simulated: 0.5 = the baseline" in said
    # with a key: the uncompiled DSPy program (DummyLM in place of Claude), in human and JSON output
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    answer = RescheduleAdvice.model_validate(
        {
            "order": ["req-101", "req-102"],
            "reasons": [{"req_id": "req-101", "reason": "16 tokens left"}],
        }
    )
    monkeypatch.setattr("servesim.advisor.program.make_lm", lambda *a, **k: _dummy([answer, answer]))
    human = runner.invoke(app, ["advise", S002])
    assert human.exit_code == 0, human.output
    said = " ".join(human.output.split())
    assert "answered by: the DSPy program, uncompiled simulator score 1.000" in said
    res = runner.invoke(app, ["advise", S002, "--json"])
    out = json.loads(res.stdout)
    assert out["advisor"] == "dspy" and out["program"] == "dspy uncompiled" and out["score"] == 1.0
    assert out["advice"]["order"] == ["req-101", "req-102"]
    assert FAKE_KEY not in res.output


def test_advise_compile_without_a_key_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from servesim.cli.main import app

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    res = CliRunner().invoke(app, ["advise", "compile"])
    assert res.exit_code == 2
    assert res.output.strip() == "error: advise compile: the DSPy advisor needs ANTHROPIC_API_KEY"


# ------------------------------------------- the real LM client against a local Messages API
class _Recorded:
    """A Messages API on 127.0.0.1 replaying a Claude-shaped answer (or an error)."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, HTTPServer

        self.seen: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["content-length"]))
                outer.seen.append((self.path, dict(self.headers), json.loads(raw)))
                out = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_port}"


def _s002_case() -> RescheduleCase:
    from servesim.resched import parse_input

    return RescheduleCase(parse_input(json.loads(Path(S002).read_text())))


def test_claude_through_dspy_lm_parses_a_recorded_answer() -> None:
    """dspy.LM -> LiteLLM's Anthropic route -> a local endpoint replaying a Claude-shaped reply:
    the key goes only into the request header, the answer parses, the usage is logged."""
    from servesim.advisor.program import make_lm

    text = (FIXTURES / "claude_dspy_reschedule.txt").read_text()
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5-5",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1234, "output_tokens": 210},
    }
    api = _Recorded(200, reply)
    try:
        lm = make_lm(api_key=FAKE_KEY, api_base=api.base, timeout_s=10)
        adv = DSPyAdvisor(lm=lm, use_saved=False, api_key=FAKE_KEY)
        answer, entry = adv.propose(_s002_case(), None, 1)
    finally:
        api.server.shutdown()
    assert answer is not None and answer.order == ["req-101", "req-102"]
    assert entry.outcome == "ok" and (entry.input_tokens, entry.output_tokens) == (1234, 210)
    _path, headers, body = api.seen[0]
    assert {k.lower(): v for k, v in headers.items()}["x-api-key"] == FAKE_KEY
    assert body["model"] == "claude-sonnet-5-5"
    assert FAKE_KEY not in json.dumps(body) and FAKE_KEY not in entry.model_dump_json()


def test_an_api_error_falls_back_to_rules_with_the_key_scrubbed() -> None:
    from servesim.advisor.program import make_lm

    err = {"type": "error", "error": {"type": "authentication_error", "message": f"bad key {FAKE_KEY}"}}
    api = _Recorded(401, err)
    try:
        adv = DSPyAdvisor(
            lm=make_lm(api_key=FAKE_KEY, api_base=api.base, timeout_s=10), use_saved=False, api_key=FAKE_KEY
        )
        result = advise(_s002_case(), "dspy", program=adv)
    finally:
        api.server.shutdown()
    assert result.advisor == "rules"
    assert result.action_log[0].outcome == "api_error", result.action_log[0].detail
    assert FAKE_KEY not in result.model_dump_json()
