"""README commands read ``examples/...``: run outside the checkout, the error says where that
path is relative to (issue 46: "no such file" alone left a new user guessing)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
HINT = "is relative to the servesim checkout: examples/ ships there; run the command from the checkout's root"


@pytest.mark.parametrize(
    "args",
    [
        ["simulate", "examples/trace.jsonl"],
        ["simulate", "poisson_20_rps", "-n", "10", "--config", "examples/vllm.yaml"],
        ["reschedule", "examples/interrupted.json"],
        ["scenario", "examples/inputs/s001_saturated.input.json"],
        ["calibrate", "examples/steps.csv"],
    ],
)
def test_a_missing_examples_file_is_said_relative_to_the_checkout(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, args)
    said = " ".join(res.stderr.split())
    assert res.exit_code == 2 and f"{args[-1]} {HINT}" in said, said
    assert "Traceback" not in res.output


def test_a_missing_file_elsewhere_gets_no_checkout_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["reschedule", "mine/interrupted.json"])
    assert res.exit_code == 2 and "checkout" not in res.stderr


def test_the_readme_says_where_to_run_its_commands() -> None:
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert "run the commands below from the checkout's root" in text
