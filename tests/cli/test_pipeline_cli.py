"""``--pipeline-parallel-size`` from a user's shell: ``simulate`` and ``cluster``, human and JSON,
and the refusals that name the flag (issue 51, item 1)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
PP = ["--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "2", "--pipeline-parallel-size", "2"]


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    rows = [
        {"req_id": f"r{i}", "arrival_time_s": 0.05 * i, "prompt_len": 200 + 37 * i, "output_len": 8 + i % 5}
        for i in range(30)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_simulate_says_the_stages_and_their_layers(tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", str(_trace(tmp_path)), *PP])
    assert res.exit_code == 0, res.output
    assert "llama-3.1-70b on 4 x h100 in 2 pipeline stages of 2 GPUs (layers 40+40)" in res.output
    assert "30 (30 finished" in res.output


def test_simulate_json_carries_the_stages_and_is_deterministic(tmp_path: Path) -> None:
    args = ["simulate", str(_trace(tmp_path)), *PP, "--json"]
    first, second = runner.invoke(app, args), runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    doc = json.loads(first.stdout)
    assert doc["config"]["pipeline_parallel_size"] == 2
    assert doc["config"]["async_scheduling"] is True  # vLLM 0.33's default with PP
    model = doc["step_time_model"]
    assert model["kind"] == "pipeline" and model["stage_layers"] == [40, 40] and model["tp"] == 2
    assert doc["summary"]["num_finished"] == 30


def test_refusals_name_the_flag(tmp_path: Path) -> None:
    trace = str(_trace(tmp_path))
    res = runner.invoke(app, ["simulate", trace, "--pipeline-parallel-size", "40"])
    assert res.exit_code == 2
    assert "pipeline_parallel_size 40 exceeds llama-3.1-8b's 32 layers" in res.output
    assert "Traceback" not in res.output
    res = runner.invoke(app, ["simulate", trace, "--pipeline-parallel-size", "2", "--no-async-scheduling"])
    assert res.exit_code == 2 and "pipeline_parallel_size 2 with async_scheduling false" in res.output
    res = runner.invoke(
        app, ["cluster", trace, "--replicas", "2", "--pipeline-parallel-size", "2", "--mtbf-s", "1"]
    )
    assert res.exit_code == 2 and "pipeline_parallel_size with a replica failure" in res.output


def test_cluster_runs_pipeline_replicas(tmp_path: Path) -> None:
    res = runner.invoke(app, ["cluster", str(_trace(tmp_path)), "--replicas", "2", *PP, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["run"]["deployment"]["engine"] == {"pipeline_parallel_size": 2}
    assert doc["strategies"][0]["num_finished"] == 30
