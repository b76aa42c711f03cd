"""The planners' and the step-time commands' deployment flags are the spec's (one name, bound and
help for every command), and their bad input is one line naming it (issue 47)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def _one_line_error(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.output and "bug" not in res.stderr
    return res.stderr


def test_an_advise_config_with_a_number_too_large_is_refused_as_simulate_refuses_it(tmp_path: Path) -> None:
    config = tmp_path / "vllm.json"
    config.write_text('{"max_num_seqs": 1e400}')
    said = _one_line_error(["advise", "default", "-n", "5", "--config", str(config), "--advisor", "rules"])
    assert str(config) in said and "max_num_seqs" in said
    assert said == _one_line_error(["simulate", "default", "-n", "5", "--config", str(config)])


@pytest.mark.parametrize(
    "command",
    [
        ["recover", str(EXAMPLES / "failure.json"), "--no-manifests"],
        ["reschedule", str(EXAMPLES / "interrupted.json")],
        ["advise", str(EXAMPLES / "interrupted.json"), "--advisor", "rules"],
        ["perf", "memory"],
        ["calibrate", str(EXAMPLES / "steps.csv")],
    ],
)
def test_tp_is_the_specs_flag_everywhere(command: list[str]) -> None:
    assert "--tp: Input should be less than or equal to 64" in _one_line_error([*command, "--tp", "65"])
    assert "--tp: Input should be greater than or equal to 1" in _one_line_error(
        [*command, "--tensor-parallel-size", "0"]
    )


def test_recover_reads_tensor_parallel_size_as_tp() -> None:
    args = ["recover", str(EXAMPLES / "failure.json"), "--no-manifests", "--json", "--model", "llama-3.1-70b"]
    short = runner.invoke(app, [*args, "--tp", "4"])
    long = runner.invoke(app, [*args, "--tensor-parallel-size", "4"])
    assert short.exit_code == long.exit_code == 0, short.output
    assert short.stdout == long.stdout
    assert json.loads(short.stdout)["context"]["tp"] == 4


def test_advise_times_a_reschedule_input_on_the_model_asked() -> None:
    args = ["advise", str(EXAMPLES / "interrupted.json"), "--advisor", "rules"]
    default = runner.invoke(app, args)
    asked = runner.invoke(app, [*args, "--model", "llama-3.1-70b", "--tp", "4"])
    assert default.exit_code == asked.exit_code == 0, asked.output
    assert default.stdout.startswith("timed as: llama-3.1-8b on 1 x h100")
    assert asked.stdout.startswith("timed as: llama-3.1-70b on 4 x h100")


def test_perf_memory_defaults_to_the_default_deployment() -> None:
    res = runner.invoke(app, ["perf", "memory", "--json"])
    assert res.exit_code == 0, res.output
    cap = json.loads(res.stdout)
    assert (cap["model"], cap["gpu"]) == ("llama-3.1-8b", "h100")
