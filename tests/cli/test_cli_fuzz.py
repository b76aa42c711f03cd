"""Fuzz the command line: random flag values and mutated JSON/CSV inputs never end in a traceback.

Every run must end as a result (exit 0) or one-line error (exit 2) within its bound. Hypothesis
draws the hostile values a first-contact user produces: NaN, 1e14, 1e18, negative numbers, JSON
``true`` for integers, ``[]``/``null`` documents, deep nesting, huge strings, wrong types.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

HOSTILE_NUMBERS = st.sampled_from(
    ["nan", "inf", "-1", "0", "1e14", "1e18", "100000000000000", "2.5", "fast", "", "-0", "1" * 40]
)
HOSTILE_JSON = st.sampled_from(
    [
        math.nan,
        1e18,
        1e11,
        -5,
        0,
        True,
        None,
        [],
        {},
        "x" * 100_000,
        "12",
        [[[[[]]]]],
        2**63,
    ]
)
FAST = ["--step-time-ms", "5", "--num-gpu-blocks", "400"]


def _ok_or_clean_error(args: list[str]) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code in (0, 2), (args, res.exit_code, res.output[-500:])
    if res.exception is not None:
        assert isinstance(res.exception, SystemExit), (args, repr(res.exception))
    assert "Traceback" not in res.output


def _trace(tmp: Path) -> Path:
    path = tmp / "t.csv"
    path.write_text("req_id,arrival_time_s,prompt_len,output_len\na,0,50,4\nb,0.1,60,3\n")
    return path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    flag=st.sampled_from(
        [
            "--max-num-seqs",
            "--max-num-batched-tokens",
            "--block-size",
            "--num-gpu-blocks",
            "--max-model-len",
            "--watermark",
            "--queue-timeout-s",
            "--step-time-ms",
            "--gpu-memory-utilization",
            "--tp",
            "--seed",
            "--hash-block-size",
            "--long-prefill-token-threshold",
        ]
    ),
    value=HOSTILE_NUMBERS,
)
def test_simulate_flags(tmp_path: Path, flag: str, value: str) -> None:
    base = ["simulate", str(_trace(tmp_path)), "--json"]
    extra = [] if flag in ("--step-time-ms", "--num-gpu-blocks") else ["--step-time-ms", "5"]
    _ok_or_clean_error([*base, *extra, flag, value])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(slo=st.text(alphabet="tfpe_ms0123456789=,.-nai", max_size=40))
def test_slo_text(tmp_path: Path, slo: str) -> None:
    _ok_or_clean_error(["simulate", str(_trace(tmp_path)), *FAST, "--json", "--slo", slo])


def _mutate(doc: Any, path: list[Any], value: Any) -> Any:
    if not path:
        return value
    head, *rest = path
    doc = json.loads(json.dumps(doc))
    doc[head] = _mutate(doc[head], rest, value)
    return doc


def _paths(doc: Any, prefix: list[Any] | None = None) -> list[list[Any]]:
    prefix = prefix or []
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, [*prefix, k])
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, [*prefix, i])
    return out


JSON_INPUTS = {
    "reschedule": EXAMPLES / "interrupted.json",
    "recover": EXAMPLES / "failure.json",
    "scenario": EXAMPLES / "inputs" / "s000_poisson.input.json",
    "scenario-load": EXAMPLES / "inputs" / "s001_stable.input.json",
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(sorted(JSON_INPUTS)), data=st.data())
def test_json_inputs_every_field(tmp_path: Path, which: str, data: st.DataObject) -> None:
    doc = json.loads(JSON_INPUTS[which].read_text())
    path = data.draw(st.sampled_from([[], *_paths(doc)]))
    value = data.draw(HOSTILE_JSON)
    mutated = _mutate(doc, path, value)
    f = tmp_path / "in.json"
    f.write_text(json.dumps(mutated))  # NaN is written as NaN, as Python users produce it
    command = which.split("-")[0]
    extra = ["--no-manifests"] if command == "recover" else []
    _ok_or_clean_error([command, str(f), "--json", *extra])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    column=st.sampled_from(
        ["req_id", "arrival_time_s", "prompt_len", "output_len", "priority", "prefix_len"]
    ),
    value=st.sampled_from(["nan", "1e18", "-1", "true", "", "x" * 10_000, "1e20", "0", "3.5", "null"]),
)
def test_csv_trace_cells(tmp_path: Path, column: str, value: str) -> None:
    cols = ["req_id", "arrival_time_s", "prompt_len", "output_len", "priority", "prefix_group", "prefix_len"]
    rows = [["a", "0", "50", "4", "0", "g", "16"], ["b", "0.5", "60", "3", "1", "g", "16"]]
    rows[1][cols.index(column)] = value
    f = tmp_path / "t.csv"
    f.write_text("\n".join(",".join(r) for r in [cols, *rows]) + "\n")
    _ok_or_clean_error(["simulate", str(f), *FAST, "--json"])
    _ok_or_clean_error(["simulate", str(f), *FAST, "--json", "--strict"])
    _ok_or_clean_error(["trace", "inspect", str(f), "--json"])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.sampled_from(
        [
            "[]",
            "null",
            "",
            "max_num_seq: 4",
            "max_num_seqs: true",
            "max_num_seqs: .nan",
            "num_gpu_blocks: 1e14",
            "[" * 3000,
            "{a: [1, {b: 2}]}",
            "max_num_seqs: -3",
        ]
    )
)
def test_config_files(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text(text)
    _ok_or_clean_error(
        ["simulate", str(_trace(tmp_path)), "--config", str(cfg), "--step-time-ms", "5", "--json"]
    )


# --- optional trace fields: a NaN or a wrong type is a reported bad row, never the default ---

#: Good values of the optional fields (row 1 keeps them: only row 2 is mutated).
OPTIONAL_FIELDS: dict[str, Any] = {
    "priority": 1,
    "tenant": "t",
    "sla_ttft_ms": 500.0,
    "sla_e2e_ms": 9000.0,
    "prefix_group": "g",
    "prefix_len": 16,
    "hash_ids": [1, 2],
}
NUMERIC_FIELDS = ("priority", "sla_ttft_ms", "sla_e2e_ms", "prefix_len")
#: Per container, the bad values a user's tool writes into an optional field (all but hash_ids,
#: which is a list, and the labels, which take any text, are numbers).
NAN_TEXT = st.sampled_from(["nan", "NaN", "NAN", "-nan"])
BAD_JSON_NUMBER = st.sampled_from([math.nan, "NaN", "nan", True, False, [], {}, "fast", [1]])
BAD_JSON_LABEL = st.sampled_from([math.nan, True, [], {}, 1.5, ["t"]])
BAD_JSON_HASH_IDS = st.sampled_from([math.nan, "NaN", True, 3, 1.5, {}, [1.5], [True], ["x"]])


def _rows(field: str, bad: Any) -> list[dict[str, Any]]:
    """Two requests; prefix fields and hash_ids exclude each other, so each case keeps its own."""
    keep = ("hash_ids",) if field == "hash_ids" else tuple(k for k in OPTIONAL_FIELDS if k != "hash_ids")
    base = {k: v for k, v in OPTIONAL_FIELDS.items() if k in keep}
    one = {"req_id": "a", "arrival_time_s": 0.0, "prompt_len": 64, "output_len": 4, **base}
    two = {"req_id": "b", "arrival_time_s": 0.5, "prompt_len": 64, "output_len": 3, **base, field: bad}
    return [one, two]


def _write(tmp: Path, container: str, rows: list[dict[str, Any]]) -> Path:
    if container == "csv":
        cols = list(rows[0])
        path = tmp / "t.csv"
        with path.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(cols)
            for r in rows:
                out.writerow(json.dumps(r[c]) if isinstance(r[c], list) else r[c] for c in cols)
    elif container == "jsonl":
        path = tmp / "t.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # NaN as JSON's NaN literal
    elif container == "json":
        path = tmp / "t.json"
        path.write_text(json.dumps({"hash_block_size": 32, "requests": rows}))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp / "t.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)  # a float column: NaN stays NaN, not null
    return path


@st.composite
def _bad_optional_field(draw: st.DrawFn) -> tuple[str, str, Any]:
    container = draw(st.sampled_from(["csv", "jsonl", "json", "parquet"]))
    if container == "parquet":  # a typed column: the bad value is a float NaN of a numeric field
        return container, draw(st.sampled_from(NUMERIC_FIELDS)), math.nan
    field = draw(st.sampled_from(sorted(OPTIONAL_FIELDS)))
    if container == "csv":
        if field in ("tenant", "prefix_group"):  # CSV text: "nan" is a name like any other
            field = draw(st.sampled_from(NUMERIC_FIELDS))
        return container, field, draw(NAN_TEXT if field != "hash_ids" else st.sampled_from(["NaN", "[1.5]"]))
    if field == "hash_ids":
        return container, field, draw(BAD_JSON_HASH_IDS)
    if field in ("tenant", "prefix_group"):
        return container, field, draw(BAD_JSON_LABEL)
    return container, field, draw(BAD_JSON_NUMBER)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_bad_optional_field())
def test_bad_optional_fields_are_reported_never_defaulted(tmp_path: Path, case: tuple[str, str, Any]) -> None:
    container, field, bad = case
    trace = _write(tmp_path, container, _rows(field, bad))
    args = ["simulate", str(trace), *FAST, "--hash-block-size", "32", "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, (case, res.output[-500:])
    report = json.loads(res.stdout)
    dropped = [(d["row"], d["field"]) for d in report["trace_provenance"]["dropped"]]
    assert dropped == [(2, field)], (case, report["trace_provenance"])
    assert [r["req_id"] for r in report["requests"]] == ["a"]  # row 1 still runs
    assert f"row 2, {field}" in res.stderr, res.stderr
    strict = runner.invoke(app, [*args, "--strict"])
    assert strict.exit_code == 2 and "row 2" in strict.stderr and repr(field) in strict.stderr, strict.output
    assert "Traceback" not in strict.output
