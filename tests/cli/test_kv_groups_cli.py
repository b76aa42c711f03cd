"""A hybrid model's KV usage per KV cache group kind, as a person reads it: ``simulate``'s totals
and ``--json``, ``cluster``'s replica sections, and ``report``'s Markdown (docs/engine.md, "What a
run shows per group"). A model with one block table shows none of it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
TRACE = str(Path(__file__).resolve().parents[2] / "examples" / "trace.jsonl")
GPT_OSS = ["--model", "gpt-oss-20b"]


def _json(*args: str) -> dict:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _rows(doc: dict, section: str) -> dict[str, str]:
    """The totals table's rows of one section of a ``--json`` document with sections."""
    (sec,) = [s for s in doc["sections"] if s["key"] == section]
    (table,) = [t for t in sec["tables"] if t["key"] == "totals"]
    return {r[0]: r[1] for r in table["rows"]}


def _said(groups: list[dict]) -> str:
    """What the totals row must say, worded from the ``--json`` figures."""
    return "; ".join(f"{g['group']}: mean {g['mean_usage']:.1%}, max {g['max_usage']:.1%}" for g in groups)


def test_simulate_shows_each_group_kinds_share_of_the_kv_cache() -> None:
    s = _json("simulate", TRACE, *GPT_OSS)["summary"]
    groups = s["kv_usage_by_group"]
    assert [g["group"] for g in groups] == ["sliding_window(128)", "full"]  # as "timed as" words them
    assert sum(g["mean_usage"] for g in groups) == pytest.approx(s["mean_kv_usage"], abs=1e-12)
    assert max(g["max_usage"] for g in groups) <= s["max_kv_usage"]
    # a 128-token window holds fewer blocks than the full layers' whole context
    assert 0 < groups[0]["mean_usage"] < groups[1]["mean_usage"]
    res = runner.invoke(app, ["simulate", TRACE, *GPT_OSS], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    (line,) = [ln for ln in res.stdout.splitlines() if re.search(r"│ KV cache groups\s+│", ln)]
    assert _said(groups) in re.sub(r"\s*│\s*", " ", line)
    assert f"mean {s['mean_kv_usage']:.1%} used" in res.stdout


def test_a_dense_model_has_no_group_row_and_no_key() -> None:
    doc = _json("simulate", TRACE)
    assert "kv_usage_by_group" not in doc["summary"]
    res = runner.invoke(app, ["simulate", TRACE], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "│ KV cache " in res.stdout and "KV cache groups" not in res.stdout


def test_cluster_shows_the_split_for_the_fleet_and_each_replica() -> None:
    doc = _json("cluster", TRACE, *GPT_OSS, "--replicas", "2")
    for key in ("fleet", "replica.n0", "replica.n1"):
        row = _rows(doc, key)["KV cache groups"]
        assert row.startswith("sliding_window(128): mean ") and "; full: mean " in row
    for key in ("replica.n0", "replica.n1"):  # each replica's KV chart: a line per kind
        (sec,) = [s for s in doc["sections"] if s["key"] == key]
        (kv,) = [x for x in sec["series"] if x["key"] == "kv_usage"]
        assert [ln["label"] for ln in kv["lines"]] == ["sliding_window(128)", "full"]


def test_the_report_has_the_group_row(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    res = runner.invoke(app, ["simulate", TRACE, *GPT_OSS, "--no-requests", "--out", str(out)])
    assert res.exit_code == 0, res.output
    groups = json.loads(out.read_text())["summary"]["kv_usage_by_group"]
    res = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r"), "--format", "md"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "r" / "report.md").read_text()
    (line,) = [ln for ln in md.splitlines() if "KV cache groups" in ln]
    assert _said(groups) in line
