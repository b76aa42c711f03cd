"""`servesim dashboard` from a shell: --headless prints what `simulate` prints for the same inputs,
--ui simple prints progress lines, bad flags are one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
FLAGS = ["bursty", "-n", "150", "--max-num-seqs", "16", "--num-gpu-blocks", "600", "--slo", "ttft_p99_ms=800"]


def test_headless_prints_the_summary_simulate_prints() -> None:
    dash = runner.invoke(app, ["dashboard", *FLAGS, "--headless"])
    sim = runner.invoke(app, ["simulate", *FLAGS])
    assert dash.exit_code == 0 and sim.exit_code == 0, dash.output + sim.output
    assert dash.stdout == sim.stdout
    assert "TTFT" in dash.stdout and "goodput" in dash.stdout


def test_headless_json_is_simulates_report() -> None:
    dash = json.loads(runner.invoke(app, ["dashboard", *FLAGS, "--headless", "--json"]).stdout)
    sim = json.loads(runner.invoke(app, ["simulate", *FLAGS, "--json"]).stdout)
    assert dash == sim


def test_headless_with_a_cpu_tier_is_simulates_report() -> None:
    """Issue 31.4: --kv-offloading-size runs vLLM's CPU tier in the dashboard too (it stopped with
    'needs a connector'): --headless --json is simulate's document, the tier's figures included."""
    flags = [*FLAGS, "--kv-offloading-size", "2"]
    res = runner.invoke(app, ["dashboard", *flags, "--headless", "--json"])
    assert res.exit_code == 0, res.output
    dash, sim = json.loads(res.stdout), json.loads(runner.invoke(app, ["simulate", *flags, "--json"]).stdout)
    assert dash == sim and dash["summary"]["offload"]["stored_tokens"] > 0


def test_headless_cluster_with_a_failure_is_the_cluster_commands_row() -> None:
    args = ["bursty", "-n", "150", "--fail", "n1@4", "--json"]
    dash = json.loads(runner.invoke(app, ["dashboard", *args, "--replicas", "2", "--headless"]).stdout)
    clus = json.loads(
        runner.invoke(app, ["cluster", *args, "--replicas", "2", "--recovery", "planner"]).stdout
    )
    assert dash == clus
    assert dash["strategies"][0]["interrupted"] > 0


def test_simple_ui_prints_progress_lines_then_the_summary() -> None:
    res = runner.invoke(app, ["dashboard", *FLAGS, "--ui", "simple", "--speed", "1000x"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("t ") and "done 150/150" in lines[0] and "running" in lines[0]
    assert any("TTFT" in line for line in lines[1:])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speed", "fast"], "--speed 'fast'"),
        (["--ui", "fancy"], "--ui 'fancy'"),
        (["--replicas", "2", "--fail", "n7@1"], "replicas: n0..n1"),
        (["--fail", "n0"], "NODE@TIME"),
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--json"], "--json needs --headless"),
    ],
)
def test_bad_flags_are_one_line_errors(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["dashboard", "bursty", "-n", "20", *args])
    assert res.exit_code == 2
    assert message in res.stderr and "Traceback" not in res.output
