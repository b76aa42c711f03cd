"""Every user error a command lets through becomes one line on stderr and exit status 2: the
CLI maps the error root once (cli.common.ErrorMappingGroup), never a traceback."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from servesim.cli.common import ErrorMappingGroup
from servesim.cli.main import app
from servesim.errors import ConfigError, EngineStallError, InputError


def _app_raising(exc: BaseException) -> typer.Typer:
    demo = typer.Typer(cls=ErrorMappingGroup)

    @demo.command()
    def boom() -> None:
        raise exc

    @demo.command()
    def other() -> None:
        pass

    return demo


@pytest.mark.parametrize(
    ("exc", "shown"),
    [
        (InputError("trace.csv: row 3: field 'prompt_len': negative (-5)"), "row 3: field 'prompt_len'"),
        (ConfigError("max_num_seqs must be >= 1 (--max-num-seqs)"), "--max-num-seqs"),
        (EngineStallError("step 9: nothing could be scheduled"), "nothing could be scheduled"),
        (json.JSONDecodeError("Expecting value", "{", 1), "invalid JSON at line 1, column 2"),
        (RecursionError("maximum recursion depth exceeded"), "input nested too deeply"),
        (FileNotFoundError(2, "No such file or directory", "cfg.yaml"), "cfg.yaml: No such file"),
    ],
)
def test_a_user_error_is_one_line_and_exit_2(exc: BaseException, shown: str) -> None:
    res = CliRunner().invoke(_app_raising(exc), ["boom"])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ") and shown in res.stderr
    assert "Traceback" not in res.output + res.stderr and res.stderr.count("\n") == 1


def test_the_servesim_app_maps_errors_too() -> None:
    res = CliRunner().invoke(app, ["simulate", "bursty", "-n", "10", "--max-num-seqs", "0"])
    assert res.exit_code == 2 and "max_num_seqs" in res.stderr and "Traceback" not in res.stderr
