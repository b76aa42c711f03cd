"""`simulate --requests-out FILE`: per-request records streamed to JSON lines or Parquet.

The rows a user reads from the file are the records of ``--json`` (same fields, same values,
null where JSON says null); the JSON document streamed a chunk at a time is the same document;
a bad file name fails before the run and a failed write leaves no file behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import servesim.engine.records as records
from servesim.cli.main import app

runner = CliRunner()
FAST = ["--step-time-ms", "5", "--num-gpu-blocks", "200", "--max-model-len", "2048"]  # one too long


def _trace(tmp: Path) -> Path:
    path = tmp / "t.jsonl"
    rows: list[dict[str, Any]] = [
        {"req_id": f"r{i}", "arrival_time_s": i * 0.01, "prompt_len": 100 + 37 * i, "output_len": 1 + i % 9}
        for i in range(40)
    ]
    rows[3]["tenant"] = "acme"
    rows[5]["priority"] = 2
    rows[7]["prompt_len"] = 5000  # longer than the KV cache: rejected, its latencies are null
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _json_records(trace: Path) -> list[dict[str, Any]]:
    res = runner.invoke(app, ["simulate", str(trace), *FAST, "--json"])
    assert res.exit_code == 0, res.output
    recs: list[dict[str, Any]] = json.loads(res.stdout)["requests"]
    return recs


@pytest.mark.parametrize("name", ["requests.jsonl", "requests.parquet"])
def test_the_file_holds_the_json_records_row_for_row(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _trace(tmp_path)
    expected = _json_records(trace)
    assert any(r["ttft_ms"] is None for r in expected) and {r["tenant"] for r in expected} == {None, "acme"}
    monkeypatch.setattr(records, "CHUNK_ROWS", 7)  # several chunks / row groups
    out = tmp_path / "out" / name
    res = runner.invoke(app, ["simulate", str(trace), *FAST, "--requests-out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"per-request records written to {out}\n" in res.stdout
    if name.endswith(".jsonl"):
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    else:
        rows = pq.read_table(out).to_pylist()
        assert pq.ParquetFile(out).metadata.num_row_groups == 6
    assert rows == expected
    assert [p.name for p in out.parent.iterdir()] == [name]  # no temporary file left


def test_json_streamed_in_chunks_is_the_same_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = _trace(tmp_path)
    args = ["simulate", str(trace), *FAST, "--json"]
    whole = runner.invoke(app, args).stdout
    monkeypatch.setattr(records, "CHUNK_ROWS", 3)
    out = tmp_path / "report.json"
    chunked = runner.invoke(app, [*args, "--out", str(out)])
    assert chunked.exit_code == 0, chunked.output
    assert chunked.stdout == whole and out.read_text() == whole  # byte for byte
    assert len(json.loads(whole)["requests"]) == 40


def test_requests_out_takes_the_records_out_of_the_json_unless_asked(tmp_path: Path) -> None:
    trace, out = _trace(tmp_path), tmp_path / "r.ndjson"
    res = runner.invoke(app, ["simulate", str(trace), *FAST, "--json", "--requests-out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["requests"] is None and len(out.read_text().splitlines()) == 40
    both = runner.invoke(
        app, ["simulate", str(trace), *FAST, "--json", "--requests-out", str(out), "--requests"]
    )
    assert len(json.loads(both.stdout)["requests"]) == 40


def test_a_name_without_a_format_fails_before_the_run(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    res = runner.invoke(app, ["simulate", str(trace), *FAST, "--requests-out", str(tmp_path / "r.csv")])
    assert res.exit_code == 2 and "--requests-out" in res.stderr and ".parquet" in res.stderr
    assert "timed as" not in res.stdout and not (tmp_path / "r.csv").exists()
    bad = runner.invoke(app, ["simulate", str(trace), *FAST, "--requests-format", "xml"])
    assert bad.exit_code == 2 and "--requests-format 'xml'" in bad.stderr
    forced = tmp_path / "r.dat"
    ok = runner.invoke(
        app, ["simulate", str(trace), *FAST, "--requests-out", str(forced), "--requests-format", "parquet"]
    )
    assert ok.exit_code == 0 and pq.read_table(forced).num_rows == 40


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace, out = _trace(tmp_path), tmp_path / "o" / "r.jsonl"
    out.parent.mkdir()
    real = records.rows_of
    calls = {"n": 0}

    def failing(part: Any, names: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device", str(out))
        return real(part, names)

    monkeypatch.setattr(records, "CHUNK_ROWS", 10)
    monkeypatch.setattr(records, "rows_of", failing)
    res = runner.invoke(app, ["simulate", str(trace), *FAST, "--requests-out", str(out)])
    assert res.exit_code == 2 and "No space left on device" in res.stderr
    assert list(out.parent.iterdir()) == []


def test_an_empty_trace_writes_an_empty_table(tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    res = runner.invoke(app, ["simulate", "burst_empty", *FAST, "--json", "--requests-out", str(out)])
    assert res.exit_code == 0, res.output
    table = pq.read_table(out)
    assert table.num_rows == 0 and "ttft_ms" in table.schema.names
