"""Output that fits: at 80 columns no number is cut, nothing to measure says so, help has metavars."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _at_80(args: list[str]) -> str:
    res = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["recover", str(EXAMPLES / "failure.json"), "--no-manifests"],
        ["reschedule", str(EXAMPLES / "interrupted.json")],
        ["reschedule", str(EXAMPLES / "inputs" / "s002_a.input.json"), "--model", "llama-3.2-1b"],
        ["trace", "inspect", str(EXAMPLES / "trace.jsonl")],
        ["perf", "models"],
        ["perf", "gpus"],
    ],
)
def test_tables_at_80_columns_never_cut_a_word(args: list[str]) -> None:
    out = _at_80(args)
    assert "…" not in out, out  # a cut cell ends in an ellipsis
    # A table whose columns just fit used to lose its last column's right edge: every table is
    # closed, and none is wider than the terminal.
    for line in out.splitlines():
        if line.startswith(("┏", "┃", "└")):
            assert len(line) <= 80 and line.endswith(("┓", "┃", "┘")), line


def test_the_recovery_plan_keeps_every_number_whole() -> None:
    flat = " ".join(_at_80(["recover", str(EXAMPLES / "failure.json"), "--no-manifests"]).split())
    assert "6,700" in flat and "4,200" in flat and "930" in flat


def test_empty_traffic_says_no_requests_not_zero_ms() -> None:
    sim = _at_80(["simulate", str(EXAMPLES / "inputs" / "s000_empty.input.json")])
    assert "no requests" in sim and "0.0" not in sim.split("\n", 1)[1]
    scen = _at_80(["scenario", str(EXAMPLES / "inputs" / "s000_empty.input.json")])
    assert "no requests" in scen and "No traffic detected" in scen


def test_the_kv_block_count_explains_the_null_block() -> None:
    first = _at_80(["simulate", str(EXAMPLES / "trace.jsonl"), "--num-gpu-blocks", "5000"]).splitlines()[0]
    assert "5,000 KV blocks" in first and "4,999 usable" in first and "null block" in first


def test_help_shows_metavars_not_bool_placeholders() -> None:
    for args in (["--help"], ["simulate", "--help"], ["recover", "--help"], ["tune", "--help"]):
        out = _at_80(args)
        assert "<bool>" not in out, args
    assert "--hash-block-size TOKENS" in _at_80(["simulate", "--help"])


@pytest.mark.parametrize("command", ["simulate", "tune", "saturate", "cluster"])
def test_each_flag_states_its_default_once(command: str) -> None:
    """``--model``'s help read "default llama-3.1-8b; default: None": two defaults, one wrong."""
    flat = " ".join(_at_80([command, "--help"]).split())
    flags = re.split(r" (?=--[a-z])", flat)
    for flag in flags:
        assert len(re.findall(r"\bdefault\b[ :]", flag)) <= 1 or "by default" in flag, flag
    model = next(f for f in flags if f.startswith("--model "))
    assert "default llama-3.1-8b." in model and "None" not in model
