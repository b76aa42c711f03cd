"""`servesim cluster`: compare recovery strategies from the command line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()


def test_compare_strategies_as_json() -> None:
    args = ["cluster", "poisson_30_rps", "-n", "600", "--replicas", "3", "--fail", "n1@8+5", "--json"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    rows = {r["strategy"]: r for r in out["strategies"]}
    assert list(rows) == ["no failure", "planner", "migrate", "restart"]
    assert rows["no failure"]["interrupted"] == 0
    assert rows["migrate"]["interrupted"] == rows["restart"]["interrupted"] > 0
    assert rows["migrate"]["tokens_recomputed"] == 0 < rows["restart"]["tokens_recomputed"]
    assert all(r["num_finished"] == 600 for r in rows.values())
    assert out["failures"] == [{"node": "n1", "time_s": 8.0, "warning_s": 0.0, "recover_after_s": 5.0}]


def test_cluster_file_and_failure_file(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        "replicas:\n  - {name: a, max_num_seqs: 32}\n  - {name: b, max_num_seqs: 64}\n"
        "router: {policy: round_robin}\nlink: {bandwidth_gbps: 10, kv_checkpointing: none}\n"
    )
    fails = tmp_path / "f.json"
    fails.write_text(json.dumps([{"node": "a", "time_s": 5.0}]))
    args = ["cluster", "poisson_20_rps", "-n", "300", "--cluster", str(spec), "--failures", str(fails)]
    res = runner.invoke(app, [*args, "--recovery", "migrate", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["router"]["policy"] == "round_robin"
    row = out["strategies"][0]
    assert row["migrated"] == 0 and row["restarted"] > 0  # no KV survives without checkpointing
    assert row["num_finished"] == 300


def test_bad_cluster_input_is_one_line_exit_2(tmp_path: Path) -> None:
    for args in (
        ["cluster", "poisson_20_rps", "-n", "50", "--fail", "zz@3"],
        ["cluster", "poisson_20_rps", "-n", "50", "--fail", "n0"],
        ["cluster", "poisson_20_rps", "-n", "50", "--recovery", "teleport"],
        ["cluster", "poisson_20_rps", "-n", "50", "--router", "psychic"],
        ["cluster", "poisson_20_rps", "-n", "50", "--fail", "n0@1", "--fail", "n0@2"],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
