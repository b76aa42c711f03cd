"""No silent drops: every command that reads a trace says what it skipped, and `--strict` stops.

A user's trace with a negative length, a non-number, a 1e20 and a broken JSON line must never
run as "2 requests" without a word: stderr carries one line with the count and the first
reasons (file, row, field), the JSON result lists every skipped row in ``trace_provenance``,
and ``--strict`` turns the first bad row into an error (exit 2) on every such command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()

# Fixed step time and KV blocks: the tests are about reading, not timing.
FAST = ["--step-time-ms", "5"]

COMMANDS: dict[str, list[str]] = {
    "simulate": ["simulate", "{trace}", *FAST],
    "cluster": ["cluster", "{trace}", "--replicas", "2", "--recovery", "restart", *FAST],
    "advise": ["advise", "{trace}", "--advisor", "rules", "--optimize", "0", *FAST],
    "saturate": [
        "saturate",
        "{trace}",
        *FAST,
        "--num-gpu-blocks",
        "2000",
        "--seeds",
        "1",
        "--rtol",
        "0.5",
    ],
    "tune": [
        "tune",
        "{trace}",
        *FAST,
        "--num-gpu-blocks",
        "2000",
        "--trials",
        "1",
        "--trial-seeds",
        "1",
        "--storage",
        "memory",
        "--executor",
        "local",
        "--no-recommend",
    ],
    "trace inspect": ["trace", "inspect", "{trace}"],
}
#: Commands whose JSON result is printed with --json (trace inspect reports drops in its stats).
JSON_PROVENANCE = ("simulate", "cluster", "advise", "saturate", "tune")


def _bad_csv(tmp_path: Path) -> Path:
    path = tmp_path / "bad.csv"
    rows = [
        "req_id,arrival_time_s,prompt_len,output_len",
        "a,0.0,100,5",
        "b,0.1,-3,5",  # row 2: negative
        "c,0.2,abc,5",  # row 3: not a number
        "d,0.3,1e20,4",  # row 4: out of range
        "e,0.4,120,5",
        "f,0.5,130,6",
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


def _args(name: str, trace: Path, *extra: str) -> list[str]:
    return [a.replace("{trace}", str(trace)) for a in COMMANDS[name]] + list(extra)


def _skipped_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.startswith("warning: skipped")]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_trace_command_names_the_skipped_rows_on_stderr(tmp_path: Path, name: str) -> None:
    trace = _bad_csv(tmp_path)
    res = runner.invoke(app, _args(name, trace))
    assert res.exit_code == 0, res.output
    line = _skipped_line(res.stderr)
    assert "skipped 3 bad row(s)" in line and "bad.csv" in line and "kept 3 of 6" in line
    assert "row 2, prompt_len: negative" in line
    assert "row 3, prompt_len: not a number" in line
    assert "row 4, prompt_len" in line


@pytest.mark.parametrize("name", JSON_PROVENANCE)
def test_json_results_list_every_skipped_row_in_trace_provenance(tmp_path: Path, name: str) -> None:
    res = runner.invoke(app, _args(name, _bad_csv(tmp_path), "--json"))
    assert res.exit_code == 0, res.output
    prov = json.loads(res.stdout)["trace_provenance"]
    assert prov["num_dropped"] == 3 and prov["rows_kept"] == 3
    assert [(d["row"], d["field"]) for d in prov["dropped"]] == [
        (2, "prompt_len"),
        (3, "prompt_len"),
        (4, "prompt_len"),
    ]
    assert "warning: skipped 3" in res.stderr  # said to the person too, never on stdout


@pytest.mark.parametrize("name", list(COMMANDS))
def test_strict_stops_at_the_first_bad_row_on_every_trace_command(tmp_path: Path, name: str) -> None:
    res = runner.invoke(app, _args(name, _bad_csv(tmp_path), "--strict"))
    assert res.exit_code == 2, res.output
    assert "row 2" in res.stderr and "prompt_len" in res.stderr and "negative" in res.stderr
    assert "Traceback" not in res.output


def test_a_broken_jsonl_line_is_counted_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    good = [
        {"req_id": "a", "arrival_time_s": 0.0, "prompt_len": 10, "output_len": 5},
        {"req_id": "b", "arrival_time_s": 1.0, "prompt_len": 10, "output_len": 5},
    ]
    path.write_text(json.dumps(good[0]) + "\n{broken\n" + json.dumps(good[1]) + "\n")
    res = runner.invoke(app, ["simulate", str(path), *FAST, "--json"])
    assert res.exit_code == 0, res.output
    assert "skipped 1 bad row(s)" in _skipped_line(res.stderr) and "row 2" in res.stderr
    assert json.loads(res.stdout)["summary"]["num_requests"] == 2


def test_a_clean_trace_prints_no_warning(tmp_path: Path) -> None:
    path = tmp_path / "ok.csv"
    path.write_text("req_id,arrival_time_s,prompt_len,output_len\na,0,10,5\n")
    res = runner.invoke(app, ["simulate", str(path), *FAST, "--json"])
    assert res.exit_code == 0 and "warning: skipped" not in res.stderr
    assert json.loads(res.stdout)["trace_provenance"]["num_dropped"] == 0


def test_hash_block_size_lets_every_command_read_native_hash_ids(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    rows = [
        {"req_id": f"r{i}", "arrival_time_s": i * 0.1, "prompt_len": 64, "output_len": 4, "hash_ids": [1, 2]}
        for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("simulate", "cluster", "trace inspect"):
        without = runner.invoke(app, _args(name, path))
        assert without.exit_code == 2 and "--hash-block-size" in without.stderr, (name, without.output)
        res = runner.invoke(app, _args(name, path, "--hash-block-size", "32"))
        assert res.exit_code == 0, (name, res.output)
    report = json.loads(
        runner.invoke(app, _args("simulate", path, "--hash-block-size", "32", "--json")).stdout
    )
    assert report["trace_provenance"]["hash_block_size"] == 32
    assert report["summary"]["prefix_cache_hit_rate"] > 0  # the shared 2x32-token prefix is reused


#: Each reader's file with a NaN in row 2 (as its users' tools write one), and the field named.
NAN_ROWS: dict[str, tuple[str, str, str]] = {
    "mooncake hash_ids": (
        "mc.jsonl",
        '{"timestamp": 0, "input_length": 64, "output_length": 4, "hash_ids": [1]}\n'
        '{"timestamp": 10, "input_length": 64, "output_length": 4, "hash_ids": NaN}\n',
        "hash_ids",
    ),
    "burstgpt tokens": (
        "bg.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "0,ChatGPT,50,4,54,Conversation log\n1,ChatGPT,nan,4,54,Conversation log\n",
        "Request tokens",
    ),
    "azure tokens": (
        "az.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,50,4\n2023-11-16 18:15:47.6805900,50,NaN\n",
        "GeneratedTokens",
    ),
    "seed req_id": (
        "seed.json",
        '{"arrival_distribution": "poisson_5_rps", "requests": [{"req_id": "s1", "prompt_len": 50, '
        '"expected_out": 4}, {"req_id": NaN, "prompt_len": 50, "expected_out": 4}]}',
        "req_id",
    ),
    "native priority": (
        "n.csv",
        "req_id,arrival_time_s,prompt_len,output_len,priority\na,0,50,4,1\nb,0.5,50,4,NaN\n",
        "priority",
    ),
}


@pytest.mark.parametrize("case", list(NAN_ROWS))
def test_a_nan_is_a_skipped_row_in_every_reader(tmp_path: Path, case: str) -> None:
    name, text, field = NAN_ROWS[case]
    path = tmp_path / name
    path.write_text(text)
    res = runner.invoke(app, ["simulate", str(path), *FAST, "--json"])
    assert res.exit_code == 0, res.output
    assert f"row 2, {field}:" in _skipped_line(res.stderr)
    prov = json.loads(res.stdout)["trace_provenance"]
    assert [(d["row"], d["field"]) for d in prov["dropped"]] == [(2, field)]
    strict = runner.invoke(app, ["simulate", str(path), *FAST, "--strict"])
    assert strict.exit_code == 2 and "row 2" in strict.stderr and f"'{field}'" in strict.stderr


def test_a_huge_bad_value_is_shown_truncated(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    rows = [
        {"req_id": "a", "arrival_time_s": 0, "prompt_len": 50, "output_len": 4},
        {"req_id": "b", "arrival_time_s": 1, "prompt_len": 50, "output_len": 4, "priority": "x" * 100_000},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = runner.invoke(app, ["simulate", str(path), *FAST, "--strict"])
    assert res.exit_code == 2 and "row 2" in res.stderr and "'priority'" in res.stderr
    assert "100,002 characters" in res.stderr and len(res.stderr) < 400
