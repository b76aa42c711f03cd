"""Every CLI action lands once in the action log (with digests, outputs, outcome); ``servesim log``
lists and filters it; no secret from the environment or the flags ever reaches it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.actionlog import ActionRecord, file_digest, read_log
from servesim.cli.main import app

runner = CliRunner()
SECRET = "sk-ant-api03-FAKE-0123456789abcdef"


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "data"
    monkeypatch.setenv("SERVESIM_DATA_DIR", str(folder))
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    return folder


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    res = runner.invoke(app, ["generate", "default", "-n", "40", "--seed", "3", "--out", str(path)])
    assert res.exit_code == 0, res.output
    return path


def test_each_command_is_logged_once_with_inputs_outputs_and_outcome(tmp_path: Path, data: Path) -> None:
    trace = _trace(tmp_path)
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["simulate", str(trace), "--max-num-batched-tokens", "4096", "--out", str(out)])
    assert res.exit_code == 0, res.output
    gen, sim = read_log(data)
    assert (gen.action, sim.action) == ("generate", "simulate")
    assert gen.outputs == [str(trace)] and gen.outcome == "ok"
    assert sim.inputs == {"trace": file_digest(trace)} and sim.outputs == [str(out)]
    assert sim.parameters["max_num_batched_tokens"] == 4096  # a token budget is not a secret
    assert sim.interface == "cli" and sim.duration_s >= 0


def test_a_failed_command_is_logged_with_its_one_line_error(tmp_path: Path, data: Path) -> None:
    res = runner.invoke(app, ["simulate", str(tmp_path / "missing.csv")])
    assert res.exit_code == 2
    (rec,) = read_log(data)
    assert rec.outcome == "error" and rec.error is not None
    assert rec.error in res.stderr  # the same words the user saw


def test_no_secret_reaches_the_log(tmp_path: Path, data: Path) -> None:
    trace = _trace(tmp_path)
    res = runner.invoke(app, ["advise", str(trace), "--advisor", "rules", "--optimize", "0", "--json"])
    assert res.exit_code == 0, res.output
    bad = tmp_path / f"{SECRET}.json"  # even a secret typed into a path is scrubbed
    runner.invoke(app, ["report", str(bad)])
    text = (data / "actions.jsonl").read_text()
    assert SECRET not in text
    recs = read_log(data)
    advise = next(r for r in recs if r.action == "advise")
    assert advise.advisor is not None and advise.advisor.advisor == "rules" and advise.advisor.model is None
    assert recs[-1].action == "report" and recs[-1].outcome == "error"


def test_log_lists_and_filters(tmp_path: Path, data: Path) -> None:
    trace = _trace(tmp_path)
    runner.invoke(app, ["simulate", str(trace)])
    runner.invoke(app, ["trace", "inspect", str(trace)])
    res = runner.invoke(app, ["log", "--json"])
    assert res.exit_code == 0
    assert [r["action"] for r in json.loads(res.stdout)] == ["generate", "simulate", "ingest"]
    res = runner.invoke(app, ["log", "--action", "simulate,ingest", "--json"])
    assert [r["action"] for r in json.loads(res.stdout)] == ["simulate", "ingest"]
    for r in json.loads(res.stdout):
        ActionRecord.model_validate(r)
    res = runner.invoke(app, ["log", "--since", "2999-01-01", "--json"])
    assert json.loads(res.stdout) == []
    res = runner.invoke(app, ["log", "--since", "1h", "--last", "1", "--json"])
    assert [r["action"] for r in json.loads(res.stdout)] == ["ingest"]
    res = runner.invoke(app, ["log"])
    assert res.exit_code == 0 and "simulate" in res.stdout and "3 actions" in res.stdout
    res = runner.invoke(app, ["log", "--since", "yesterday"])
    assert res.exit_code == 2 and "--since 'yesterday'" in res.stderr
    assert [r.action for r in read_log(data)] == [
        "generate",
        "simulate",
        "ingest",
    ]  # log itself is not logged


def test_schema_of_an_action_record() -> None:
    res = runner.invoke(app, ["schema", "ActionRecord"])
    schema = json.loads(res.stdout)
    assert {"time", "action", "parameters", "inputs", "outputs", "outcome"} <= set(schema["properties"])
