"""Fuzz each reliability class of issue 29 with hypothesis (bounded: a few dozen examples each).

* outputs: a hostile path for any output flag fails before any work and leaves nothing new;
* bounds: a size over its bound, in any flag or trace format, is refused (never run, never capped);
* documents: a result document with a field removed or retyped is one line naming the file.

Each generator found failures on the old code (it wrote the step log, ran the plan, raised KeyError).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FAST = ["--step-time-ms", "5", "--num-gpu-blocks", "400"]
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


def _clean_error(res: Any) -> None:
    assert res.exit_code == 2, (res.exit_code, res.output[-300:])
    assert "Traceback" not in res.output and res.output.startswith("error: "), res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


BAD_PATHS = st.sampled_from(["afile/x.json", "afile/deeper/x.json", "adir", "adir/", "n" * 300 + ".json"])
OUT_FLAGS = st.sampled_from(["--out", "--step-log", "--requests-out"])


@SETTINGS
@given(bad=BAD_PATHS, bad_flag=OUT_FLAGS, good_flags=st.sets(OUT_FLAGS, max_size=2))
def test_any_bad_output_path_fails_first_and_leaves_nothing(
    bad: str, bad_flag: str, good_flags: set[str]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "afile").write_text("x")
        (folder / "adir").mkdir()
        args = ["simulate", "default", "-n", "20", *FAST]
        for i, flag in enumerate(sorted(good_flags - {bad_flag})):
            args += [flag, str(folder / f"ok{i}.jsonl")]
        args += [bad_flag, str(folder / bad) + ("/" if bad.endswith("/") else "")]
        before = _listing(folder)
        _clean_error(runner.invoke(app, args))
        assert _listing(folder) == before


@SETTINGS
@given(
    case=st.sampled_from(
        [
            ("--survivors", 1024),
            ("--max-num-seqs", 1 << 20),
            ("--block-size", 1 << 12),
            ("--max-num-batched-tokens", 1 << 24),
        ]
    ),
    over=st.integers(min_value=1, max_value=10**12),
)
def test_recover_flags_over_their_bound_are_refused(case: tuple[str, int], over: int) -> None:
    flag, bound = case
    args = ["recover", str(EXAMPLES / "failure.json"), flag, str(bound + over), "--no-manifests", "--json"]
    _clean_error(runner.invoke(app, args))


@SETTINGS
@given(
    fmt=st.sampled_from(["csv", "jsonl", "json", "parquet"]),
    column=st.sampled_from(["prompt_len", "output_len"]),
    value=st.integers(min_value=(1 << 24) + 1, max_value=2**62),
)
def test_trace_token_counts_over_the_bound_are_refused_with_strict(fmt: str, column: str, value: int) -> None:
    rows = [{"req_id": "a", "arrival_time_s": 0.0, "prompt_len": 10, "output_len": 4}]
    rows[0][column] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"t.{fmt}"
        if fmt == "csv":
            pd.DataFrame(rows).to_csv(path, index=False)
        elif fmt == "jsonl":
            path.write_text(json.dumps(rows[0]) + "\n")
        elif fmt == "json":
            path.write_text(json.dumps({"requests": rows}))
        else:
            pd.DataFrame(rows).to_parquet(path)
        _clean_error(runner.invoke(app, ["trace", "inspect", str(path), "--strict"]))


_DOC: dict[str, Any] = {}


def _simulate_doc() -> dict[str, Any]:
    if not _DOC:
        res = runner.invoke(app, ["simulate", "default", "-n", "20", *FAST, "--json"])
        assert res.exit_code == 0, res.output
        _DOC.update(json.loads(res.stdout))
    return _DOC


@SETTINGS
@given(data=st.data())
def test_a_mutated_result_document_is_a_result_or_one_line(data: st.DataObject) -> None:
    doc = json.loads(json.dumps(_simulate_doc()))
    key = data.draw(st.sampled_from(sorted(k for k in doc if k != "sections")))
    target, name = doc, key
    if isinstance(doc[key], dict) and doc[key] and data.draw(st.booleans()):
        target, name = doc[key], data.draw(st.sampled_from(sorted(doc[key])))
    if data.draw(st.booleans()):
        del target[name]
    else:
        target[name] = data.draw(st.sampled_from([None, 7, "x", [], {}, True, -1.5]))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        path.write_text(json.dumps(doc))
        res = runner.invoke(app, ["report", str(path), "-o", str(Path(tmp) / "rep"), "-f", "md"])
        if res.exit_code != 0:
            _clean_error(res)
            assert "run.json" in res.output
