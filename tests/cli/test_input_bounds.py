"""Every input is bounded and validated before work starts: one line naming what is wrong, exit 2.

The cases are the ones a first-contact pass found ending in a MemoryError, a RecursionError
traceback, a hang, or a silent default (issue 16).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()


def _trace(tmp_path: Path) -> str:
    path = tmp_path / "t.csv"
    path.write_text("req_id,arrival_time_s,prompt_len,output_len\na,0,50,4\nb,0.1,60,3\n")
    return str(path)


def _error(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    line: str = res.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ")
    return line


def test_a_huge_block_count_is_refused_before_the_pool_is_built(tmp_path: Path) -> None:
    line = _error(["simulate", _trace(tmp_path), "--num-gpu-blocks", "100000000000000"])
    assert "--num-gpu-blocks" in line and "4194304" in line


def test_reschedule_refuses_1e11_tokens_instead_of_looping(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    req = {"req_id": "a", "tokens_processed": 1, "tokens_remaining": 10**11, "sla_budget_ms": 5}
    f.write_text(json.dumps({"batch_capacity": 2, "interrupted_requests": [req]}))
    assert "tokens_remaining" in _error(["reschedule", str(f)])


def test_recover_lists_a_job_with_1e18_tokens_as_invalid(tmp_path: Path) -> None:
    f = tmp_path / "f.json"
    job = {"job_id": "j", "prompt_tokens": 10, "generated_tokens": 10**18, "kv_cache_checkpointed": True}
    rec = {
        "interrupted_node": "n",
        "preemption_timestamp": 0,
        "network_bandwidth_gbps": 1,
        "active_jobs": [job],
    }
    f.write_text(json.dumps(rec))
    res = runner.invoke(app, ["recover", str(f), "--json", "--no-manifests"])
    assert res.exit_code == 0, res.output
    (bad,) = json.loads(res.stdout)["invalid_jobs"]
    assert "generated_tokens" in bad["reason"]


@pytest.mark.parametrize("command", [["recover"], ["reschedule"], ["scenario"]])
def test_deep_nesting_is_one_line(tmp_path: Path, command: list[str]) -> None:
    f = tmp_path / "deep.json"
    f.write_text("[" * 5000)
    assert "nested too deeply" in _error([*command, str(f)])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[]", "must be a mapping"),
        ("null", "got nothing"),
        ("max_num_seq: 4", "did you mean 'max_num_seqs'"),
        ("max_num_seqs: true", "expected an integer"),
        ("[" * 3000, "nested too deeply"),
    ],
)
def test_config_files_are_checked_with_the_file_name(tmp_path: Path, text: str, words: str) -> None:
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text(text)
    line = _error(["simulate", _trace(tmp_path), "--config", str(cfg), "--step-time-ms", "5"])
    assert words in line and ("vllm.yaml" in line or "max_num_seqs" in line)


def test_json_true_is_not_an_integer(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    req = {"req_id": "a", "tokens_processed": 1, "tokens_remaining": 3, "sla_budget_ms": 5}
    f.write_text(json.dumps({"batch_capacity": True, "interrupted_requests": [req]}))
    assert "expected an integer" in _error(["reschedule", str(f)])


def test_trace_inspect_is_sized_by_requests_not_time_span(tmp_path: Path) -> None:
    f = tmp_path / "far.csv"
    f.write_text("req_id,arrival_time_s,prompt_len,output_len\na,0,10,5\nb,1e18,10,5\n")
    res = runner.invoke(app, ["trace", "inspect", str(f), "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    assert stats["num_requests"] == 2 and stats["peak_1s"] == 1
