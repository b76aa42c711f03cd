"""Bounds before work (servesim.bounds): every size a user controls is refused where it is parsed,
with one line naming the flag or field; the trace readers enforce the token bound in every format
(with --strict too); the README's table is the code's.

Each case here was accepted by the old code (it ran for seconds or minutes, or answered on a value
it had silently capped).
"""

from __future__ import annotations

import gzip
import json
import runpy
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FAST = ["--step-time-ms", "5", "--num-gpu-blocks", "400"]


def _refused(args: list[str], *words: str) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, (args, res.exit_code, res.output[-400:])
    assert "Traceback" not in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    for w in words:
        assert w in res.output, (w, res.output)
    return res.output


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--survivors", "1000000", "survivors"),
        ("--max-num-seqs", "1048577", "max_num_seqs"),
        ("--block-size", "4097", "block_size"),
        ("--max-num-batched-tokens", "16777217", "max_num_batched_tokens"),
    ],
)
def test_recover_bounds(flag: str, value: str, field: str) -> None:
    _refused(["recover", str(EXAMPLES / "failure.json"), flag, value, "--no-manifests"], field)


def test_reschedule_token_budget_bound() -> None:
    _refused(
        ["reschedule", str(EXAMPLES / "interrupted.json"), "--max-num-batched-tokens", "16777217"],
        "max_num_batched_tokens",
    )


def test_cluster_replicas_bound() -> None:
    _refused(["cluster", "default", "-n", "5", "--step-time-ms", "5", "--replicas", "100000"], "--replicas")


@pytest.mark.parametrize("slo", [",,,", "ttft_p99_ms=inf", "tpot_p99_ms=nan"])
def test_slo_without_a_finite_cap_is_refused(slo: str) -> None:
    _refused(["simulate", "default", "-n", "5", *FAST, "--slo", slo], "--slo")


def test_json_true_is_not_a_number(tmp_path: Path) -> None:
    rec = json.loads((EXAMPLES / "interrupted.json").read_text())
    rec["block_size"] = True
    path = tmp_path / "i.json"
    path.write_text(json.dumps(rec))
    _refused(["reschedule", str(path)], "block_size", "expected an integer")


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "json", "parquet"])
@pytest.mark.parametrize("value", [2**31, 10**18, 16_777_217])
@pytest.mark.parametrize("strict", [True, False])
def test_trace_token_bound_in_every_format(tmp_path: Path, fmt: str, value: int, strict: bool) -> None:
    rows = [
        {"req_id": "a", "arrival_time_s": 0.0, "prompt_len": value, "output_len": 4},
        {"req_id": "b", "arrival_time_s": 0.1, "prompt_len": 10, "output_len": 4},
    ]
    path = tmp_path / f"t.{fmt}"
    df = pd.DataFrame(rows)
    if fmt == "csv":
        df.to_csv(path, index=False)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path.write_text(json.dumps({"requests": rows}))
    else:
        df.to_parquet(path)
    args = ["trace", "inspect", str(path), "--json", *(["--strict"] if strict else [])]
    res = runner.invoke(app, args)
    if strict:
        assert res.exit_code == 2 and "over the bound of 16,777,216" in res.output, res.output
    else:
        assert res.exit_code == 0, res.output
        stats = json.loads(res.stdout)
        assert stats["num_requests"] == 1 and stats["num_dropped"] == 1
        assert "over the bound" in stats["dropped_examples"][0]["reason"]


def test_a_truncated_gz_trace_is_one_line_naming_the_file(tmp_path: Path) -> None:
    rows = "".join(f"r{i},{i * 0.01},{100 + i % 50},{5 + i % 7}\n" for i in range(20_000))
    data = gzip.compress(("req_id,arrival_time_s,prompt_len,output_len\n" + rows).encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(data[: len(data) // 2])
    out = _refused(["trace", "inspect", str(path)], "cut.csv.gz", "cut short")
    assert "Aborted" not in out
    _refused(["simulate", str(path), *FAST], "cut.csv.gz")


def test_load_scenario_mean_output_tokens_1e18_is_refused(tmp_path: Path) -> None:
    doc = json.loads((EXAMPLES / "inputs" / "s001_stable.input.json").read_text())
    doc["mean_output_tokens"] = 1e18
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    _refused(["scenario", str(path)], "mean_output_tokens")


def test_load_scenario_means_that_do_not_fit_the_cache_are_refused_with_the_numbers(tmp_path: Path) -> None:
    doc = json.loads((EXAMPLES / "inputs" / "s001_stable.input.json").read_text())
    doc.update(kv_cache_blocks_available=8, block_size=16, mean_input_tokens=500)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    _refused(["scenario", str(path)], "8 blocks x 16 tokens", "mean_input_tokens 500")


def test_batch_scenario_request_that_never_fits_the_kv_cache_is_refused_up_front(tmp_path: Path) -> None:
    doc = json.loads((EXAMPLES / "inputs" / "s000_poisson.input.json").read_text())
    doc["requests"] = [{"req_id": "huge", "prompt_len": 9_000_000, "expected_out": 128}]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    _refused(["scenario", str(path)], "'huge' needs 9,000,128 tokens", "it can never run")


def test_scenario_human_output_on_the_bundled_example() -> None:
    res = runner.invoke(app, ["scenario", str(EXAMPLES / "inputs" / "s000_poisson.input.json")])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("timed as: ")


def test_readme_bounds_table_is_the_codes() -> None:
    from servesim.bounds import bounds_table

    tool = runpy.run_path(str(ROOT / "tools" / "bounds_table.py"))
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert tool["with_table"](text) == text
    assert bounds_table() in text


def test_advise_and_recover_agree_on_invalid_jobs(tmp_path: Path) -> None:
    path = tmp_path / "inv.json"
    res = runner.invoke(
        app, ["generate-failures", "-n", "1", "--invalid-rate", "0.5", "--seed", "3", "--out", str(path)]
    )
    assert res.exit_code == 0, res.output
    rec = runner.invoke(app, ["recover", str(path), "--no-manifests", "--json"])
    listed = json.loads(rec.stdout)["plans"][0]["invalid_jobs"]
    assert listed
    adv = runner.invoke(app, ["advise", str(path), "--advisor", "rules", "--json"])
    assert adv.exit_code == 0, adv.output
    assert json.loads(adv.stdout)["invalid_jobs"] == listed
    assert adv.stderr.count("warning: invalid job") == len(listed)
