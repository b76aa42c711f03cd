"""``servesim report`` of a disaggregated run: ``servesim cluster --prefill-replicas ... --out``
writes the ``disaggregated`` document (the same bytes as ``--json``), and the report draws its
view (``servesim.views.disagg``): the per-leg breakdown stacked, the pools' table, the SLO tiles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.report import build_report
from servesim.report.documents import read_document
from servesim.views.model import Section

runner = CliRunner()
ARGS = [
    "cluster",
    "poisson_20_rps",
    "-n",
    "120",
    "--step-time-ms",
    "10",
    "--prefill-replicas",
    "1",
    "--decode-replicas",
    "2",
    "--slo",
    "ttft_p99_ms=40",
]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("pd") / "pd.json"
    res = runner.invoke(app, [*ARGS, "--out", str(path)])
    assert res.exit_code == 0, res.output
    return path, res.stdout


def test_out_writes_the_json_document_and_the_human_output_says_so(written: tuple[Path, str]) -> None:
    path, human = written
    assert human.rstrip().endswith(f"result written to {path}")
    assert "per leg over 120 disaggregated requests" in human and "the pools, per replica" in human
    res = runner.invoke(app, [*ARGS, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(path.read_text()) == json.loads(res.stdout)
    doc: dict[str, Any] = json.loads(res.stdout)
    assert doc["kind"] == "disaggregated" and doc["schema_version"] == 1
    assert doc["title"] == "poisson_20_rps: 120 requests, disaggregated"
    assert doc["run"]["disaggregated"]["decode"]["replicas"] == 2 and doc["run"]["slo"]["ttft_p99_ms"] == 40
    view, dist = (Section.model_validate(s) for s in doc["sections"])
    assert dist.key == "disaggregated.distributions" and dist.histogram("ttft_ms").slo == 40
    assert view.key == "disaggregated" and view.kpi("goodput").value == doc["summary"]["goodput"]
    bar = view.chart("leg_breakdown")
    assert bar.stacked and bar.y[0] == pytest.approx(
        doc["summary"]["legs"]["prefill_queue"]["mean_ms"], abs=1e-3
    )


def test_the_report_draws_the_breakdown_and_the_pools(written: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = written
    doc = json.loads(path.read_text())
    report = build_report([read_document(path)])
    (part,) = report.parts
    assert [s.key for s in part.sections] == ["disaggregated", "disaggregated.distributions"]
    assert part.kind == "disaggregated"
    assert [s.model_dump(mode="json") for s in part.sections] == doc["sections"]  # as written
    assert report.kpis[0].title == "prefill/decode pools (pd.json)"
    assert [k.key for k in report.kpis[0].kpis] == [
        "ttft_ms_p99",
        "tpot_ms_p99",
        "e2e_ms_p99",
        "goodput",
        "output_token_throughput",
    ]
    res = runner.invoke(app, ["report", str(path), "-o", str(tmp_path / "rep"), "-f", "html,md"])
    assert res.exit_code == 0, res.output
    assert "read pd.json: disaggregated" in res.output
    html = (tmp_path / "rep" / "report.html").read_text()
    assert 'data-section="disaggregated"' in html
    assert (
        "where a request&#x27;s time goes, per leg" in html or "where a request's time goes, per leg" in html
    )
    assert '"barmode":"stack"' in html.replace(" ", "")
    assert "the pools, per replica" in html and "KV received" in html
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "prefill queue" in md and "KV transfer" in md


def test_a_document_without_its_view_is_drawn_again_from_its_result(
    written: tuple[Path, str], tmp_path: Path
) -> None:
    path, _ = written
    doc = json.loads(path.read_text())
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({k: v for k, v in doc.items() if k != "sections"}))
    (part,) = build_report([read_document(bare)]).parts
    assert [s.model_dump(mode="json") for s in part.sections] == doc["sections"]


def test_a_broken_document_is_one_line(written: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = written
    doc = json.loads(path.read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**doc, "summary": {**doc["summary"], "ttft_p99_ms": "slow"}}))
    res = runner.invoke(app, ["report", str(bad), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 2 and f"error: {bad}: not a valid disaggregated result" in res.output
    assert "summary.ttft_p99_ms" in res.output and len(res.output.strip().splitlines()) == 1
