"""Issue 47: a result document whose table row is one cell short (or long) is refused by
``servesim report`` naming the table and the row (exit 2), not a renderer's zip() traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.views.model import Column, Table

runner = CliRunner()


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    res = runner.invoke(app, ["simulate", "poisson_20_rps", "-n", "50", "--json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


@pytest.mark.parametrize("fmt", ["html", "md"])
@pytest.mark.parametrize("delta", [-1, 1])
def test_a_row_of_the_wrong_length_is_refused_naming_table_and_row(
    tmp_path: Path, document: dict[str, object], fmt: str, delta: int
) -> None:
    doc = json.loads(json.dumps(document))
    table = doc["sections"][1]["tables"][0]
    row = table["rows"][2]
    if delta < 0:
        row.pop()
    else:
        row.append(1)
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    res = runner.invoke(app, ["report", str(path), "--format", fmt, "-o", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in res.output
    n = len(table["columns"])
    assert line.startswith("error: doc.json: not a valid simulate result"), line
    assert f"table {table['key']!r}" in line and f"row 3 has {n + delta} cells for its {n} columns" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_table_is_built_with_one_cell_per_column() -> None:
    cols = [Column(key="a", label="a"), Column(key="b", label="b")]
    assert Table(key="t", title="T", columns=cols, rows=[[1, 2]]).rows == [[1, 2]]
    with pytest.raises(ValueError, match=r"table 't' \(T\): row 1 has 1 cells for its 2 columns"):
        Table(key="t", title="T", columns=cols, rows=[[1]])
