"""Every result document is validated at the door: a field removed or of the wrong type is one
line naming the file (and the field), never a KeyError/TypeError/AttributeError in a view or an
IndexError in the HTML. The old code checked only the document's kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
FAST = ["--step-time-ms", "5"]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind, args in {
        "simulate": ["simulate", "default", "-n", "30", *FAST, "--num-gpu-blocks", "400", "--json"],
        "cluster": ["cluster", "default", "-n", "30", *FAST, "--json"],
    }.items():
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        out[kind] = json.loads(res.stdout)
    return out


def _mutants(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for key in sorted(doc):
        found.append((f"no {key}", {k: v for k, v in doc.items() if k != key}))
        for bad in (7, "text", [], None):
            found.append((f"{key}={bad!r}", {**doc, key: bad}))
        value = doc[key]
        if isinstance(value, dict):
            for sub in sorted(value)[:12]:
                found.append((f"no {key}.{sub}", {**doc, key: {k: v for k, v in value.items() if k != sub}}))
                found.append((f"{key}.{sub}='x'", {**doc, key: {**value, sub: "x"}}))
    return found


@pytest.mark.parametrize("kind", ["simulate", "cluster"])
def test_a_broken_result_document_is_one_line_naming_the_file(
    kind: str, results: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    broken = []
    for i, (label, doc) in enumerate(_mutants(results[kind])):
        path = tmp_path / f"{kind}.json"
        path.write_text(json.dumps(doc))
        # a folder each: a report is never written over a previous one
        res = runner.invoke(app, ["report", str(path), "-o", str(tmp_path / f"rep{i}"), "-f", "html,md"])
        ok = res.exit_code == 0 or (
            res.exit_code == 2
            and res.output.startswith("error: ")
            and len(res.output.strip().splitlines()) == 1
            and f"{kind}.json" in res.output
        )
        if not ok or (res.exception is not None and not isinstance(res.exception, SystemExit)):
            broken.append((label, res.exit_code, repr(res.exception)[:120]))
    assert broken == []


def test_the_error_names_the_field(results: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    doc = results["simulate"]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({**doc, "summary": {**doc["summary"], "ttft_ms": "fast"}}))
    res = runner.invoke(app, ["report", str(path), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 2 and "run.json" in res.output and "summary.ttft_ms" in res.output
    assert not (tmp_path / "rep").exists()


def test_a_tune_document_is_checked_part_by_part(tmp_path: Path) -> None:
    """``tune --json`` is {study, recommendation}: the committed demo's passes (the door checked
    it as one TuneResult and refused every real tune document), a study lacking a field does not."""
    demo = json.loads((Path(__file__).parents[2] / "examples" / "demo" / "tune.json").read_text())
    good = tmp_path / "tune.json"
    good.write_text(json.dumps(demo))
    res = runner.invoke(app, ["report", str(good), "-o", str(tmp_path / "ok"), "-f", "md"])
    assert res.exit_code == 0, res.output
    study = {k: v for k, v in demo["study"].items() if k != "trials"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**demo, "study": study}))
    res = runner.invoke(app, ["report", str(bad), "-o", str(tmp_path / "rep"), "-f", "md"])
    assert res.exit_code == 2 and "bad.json" in res.output and "trials" in res.output, res.output
    assert not (tmp_path / "rep").exists()
