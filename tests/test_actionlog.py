"""The action log: whole lines under concurrent writers, errors recorded, no secret ever written."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import orjson
import pytest

from servesim.actionlog import ActionRecord, read_log, record_action


def _writer(folder: str, k: int) -> None:
    for i in range(50):
        with record_action("simulate", {"writer": k, "i": i, "blob": "x" * 3000}, folder=folder):
            pass


def test_concurrent_writers_leave_only_whole_lines(tmp_path: Path) -> None:
    procs = [mp.get_context("spawn").Process(target=_writer, args=(str(tmp_path), k)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    lines = (tmp_path / "actions.jsonl").read_bytes().splitlines()
    assert len(lines) == 150
    for line in lines:  # every line parses and validates against the schema
        ActionRecord.model_validate(orjson.loads(line))
    seen = sorted((r.parameters["writer"], r.parameters["i"]) for r in read_log(tmp_path))
    assert seen == [(k, i) for k in range(3) for i in range(50)]


def test_an_error_is_logged_and_raised(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bad flag"), record_action("tune", {"trials": 3}, folder=tmp_path):
        raise ValueError("bad flag --trials")
    (rec,) = read_log(tmp_path)
    assert rec.outcome == "error" and rec.error == "bad flag --trials" and rec.action == "tune"


def test_secrets_never_reach_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-ant-test-0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    params = {"api_key": secret, "token": secret, "nested": {"Authorization": secret}, "model": "m"}
    with record_action("advise", params, folder=tmp_path) as h:
        h.output(tmp_path / "out.json")
    text = (tmp_path / "actions.jsonl").read_text()
    assert secret not in text
    (rec,) = read_log(tmp_path)
    assert rec.parameters["model"] == "m" and rec.outputs == [str(tmp_path / "out.json")]


def test_integers_beyond_64_bits_are_logged_as_text(tmp_path: Path) -> None:
    huge = -(2**63) - 1  # what a fuzzer (or a typo) sends: orjson cannot write it as a number
    with record_action("recover", {"n": huge, "items": [2**70, 1]}, folder=tmp_path):
        pass
    (rec,) = read_log(tmp_path)
    assert rec.parameters == {"n": str(huge), "items": [str(2**70), 1]}
