"""``servesim report`` of a cluster result: the fleet's and each replica's charts, the failure
drawn on the queue and throughput series, and the fleet's bottleneck verdict, from the
``sections`` that ``servesim cluster --json`` (and the web's cluster run) writes."""

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
ARGS = ["cluster", "default", "-n", "400", "--replicas", "3", "--fail", "n1@2+3", "--step-time-ms", "20"]


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    res = runner.invoke(app, [*ARGS, "--recovery", "restart", "--json"])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def test_the_document_holds_the_fleet_and_replica_views(doc: dict[str, Any]) -> None:
    assert doc["kind"] == "cluster"
    keys = [s["key"] for s in doc["sections"]]
    assert keys == ["fleet", "replica.n0", "replica.n1", "replica.n2"]
    fleet = Section.model_validate(doc["sections"][0])
    assert fleet.title == "fleet of 3 replicas, restart recovery"
    queue = fleet.chart("num_waiting")
    moved = doc["strategies"][0]["interrupted"]
    assert [m.label for m in queue.marks] == ["n1 down at 2 s", "n1 back (empty)"]
    assert queue.spans[0].label == f"n1 down (restart); {moved} requests moved: RECOMPUTE {moved}"
    assert queue.spans[0].x0 == 2.0 and queue.spans[0].x1 == 5.0
    assert fleet.verdicts[-1].key == "fleet_bottleneck"


def test_the_report_draws_the_same_charts_and_verdict(doc: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(doc))
    report = build_report([read_document(path)])
    sections = report.parts[0].sections
    assert [s.key for s in sections] == ["cluster", "fleet", "replica.n0", "replica.n1", "replica.n2"]
    assert [s.model_dump(mode="json") for s in sections[1:]] == doc["sections"]  # as written
    assert report.kpis[0].title.startswith("node failure") and report.kpis[1].title.startswith("the fleet")
    res = runner.invoke(app, ["report", str(path), "-o", str(tmp_path / "rep"), "-f", "html,md"])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "rep" / "report.html").read_text()
    fleet = Section.model_validate(doc["sections"][0])
    verdict = fleet.verdicts[-1].text
    assert f'data-verdict="fleet_bottleneck"><b>fleet bottleneck</b>{verdict}' in html.replace("&#x27;", "'")
    assert 'data-section="replica.n2"' in html
    # the outage: a shaded rect and its label on the fleet's queue chart, its marks in the caption
    assert '"type":"rect"' in html.replace(" ", "") and "n1 down (restart)<br>" in html
    assert "marked: n1 down at 2 s, n1 back (empty); shaded: n1 down (restart); " in html
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "fleet bottleneck" in md and "load per replica" in md


def test_the_table_is_followed_by_the_fleet_verdict() -> None:
    res = runner.invoke(app, [*ARGS, "--recovery", "compare"])
    assert res.exit_code == 0, res.output
    assert "fleet bottleneck:" in res.output


def test_a_broken_sections_list_is_one_line(doc: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**doc, "sections": [{"key": "fleet"}]}))
    res = runner.invoke(app, ["report", str(path), "-o", str(tmp_path / "rep")])
    assert res.exit_code == 2 and res.output.startswith("error: bad.json: not a valid cluster result")
    assert len(res.output.strip().splitlines()) == 1
