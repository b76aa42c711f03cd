"""Every user error a command lets through becomes one line on stderr and exit status 2: the
CLI maps the error root once (cli.common.invoke_mapped), never a traceback. Anything else is a
bug in servesim: its traceback, then one line saying so and where to report it, exit status 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from servesim.cli.common import ErrorMappingGroup
from servesim.cli.main import app
from servesim.errors import ConfigError, EngineStallError, InputError, InternalError, UnknownNameError


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
        (UnknownNameError("unknown bundled trace 'x'; known: azure-code"), "unknown bundled trace 'x'"),
    ],
)
def test_a_user_error_is_one_line_and_exit_2(exc: BaseException, shown: str) -> None:
    res = CliRunner().invoke(_app_raising(exc), ["boom"])
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ") and shown in res.stderr
    assert "Traceback" not in res.output + res.stderr and res.stderr.count("\n") == 1


def test_the_servesim_app_maps_errors_too() -> None:
    res = CliRunner().invoke(app, ["simulate", "bursty", "-n", "10", "--max-num-seqs", "0"])
    assert res.exit_code == 2 and "--max-num-seqs" in res.stderr and "Traceback" not in res.stderr


#: Commands that leave their errors to the root group (no catch of their own): the line a user
#: sees is the one they printed when each caught its own tuple (exit 2, the file or flag named).
ROOT_MAPPED = [
    (["simulate", "{tmp}/missing.csv"], "error: {tmp}/missing.csv: no such file, bundled trace or generator"),
    (["simulate", "{tmp}/bad.json"], "error: {tmp}/bad.json: invalid JSON (Expecting property name"),
    (
        ["simulate", "bursty", "-n", "5", "--max-num-seqs", "0"],
        "error: --max-num-seqs: Input should be greater",
    ),
    (["cluster", "bursty", "-n", "5", "--slo", "ttft_ms=5"], "error: --slo 'ttft_ms' names no percentile"),
    (["trace", "inspect", "{tmp}/bad.json"], "error: {tmp}/bad.json: invalid JSON (Expecting property"),
    (["trace", "convert", "{tmp}/ok.csv", "{tmp}/out.xyz"], "error: cannot tell the output format from"),
    (["generate", "nosuchpreset", "-o", "{tmp}/o.csv"], "error: unknown preset 'nosuchpreset'; known:"),
    (["recover", "{tmp}/bad.json"], "error: {tmp}/bad.json: not valid JSON (Expecting property name"),
    (["reschedule", "{tmp}/missing.json"], "error: {tmp}/missing.json: No such file or directory"),
    (
        ["generate-failures", "--jobs-mean", "-3"],
        "error: jobs_mean: Input should be greater than or equal to 1",
    ),
    (["log", "--since", "yesterday-ish"], "error: --since 'yesterday-ish': give an ISO time"),
    (["advise", "bursty", "-n", "5", "--advisor", "rules", "--slo", "ttft_ms=5"], "error: --slo 'ttft_ms'"),
]


@pytest.mark.parametrize(("args", "line"), ROOT_MAPPED, ids=[" ".join(a[:2]) for a, _ in ROOT_MAPPED])
def test_commands_without_their_own_catch_say_the_same_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], line: str
) -> None:
    monkeypatch.setenv("SERVESIM_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "ok.csv").write_text("req_id,arrival_time_s,prompt_len,output_len\na,0,1,1\n")
    res = CliRunner().invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(line.replace("{tmp}", str(tmp_path))), res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.output


BUG_LINE = "servesim: this is a bug in servesim, not your input — please report it with the command you ran: "


def _assert_reported_as_bug(res: object, raised: str) -> None:
    """Exit 1; the traceback on stderr (ending in the exception raised), then the bug line last."""
    assert res.exit_code == 1, (res.exit_code, res.output)  # type: ignore[attr-defined]
    err: str = res.stderr  # type: ignore[attr-defined]
    assert err.startswith("Traceback (most recent call last):"), err
    lines = err.rstrip("\n").split("\n")
    assert lines[-2] == raised, lines[-3:]
    assert lines[-1].startswith(BUG_LINE) and len(lines[-1]) > len(BUG_LINE), lines[-1]
    assert "error: " not in err  # not worded as the user's error


@pytest.mark.parametrize(
    ("exc", "raised"),
    [
        (ValueError("operands could not be broadcast"), "ValueError: operands could not be broadcast"),
        (KeyError("ttft_ms"), "KeyError: 'ttft_ms'"),
        (TypeError("unsupported operand"), "TypeError: unsupported operand"),
        (InternalError("invariant broken: x"), "servesim.errors.InternalError: invariant broken: x"),
    ],
)
def test_a_bug_prints_its_traceback_and_the_bug_line_and_exits_1(exc: BaseException, raised: str) -> None:
    _assert_reported_as_bug(CliRunner().invoke(_app_raising(exc), ["boom"]), raised)


def test_a_bare_value_error_inside_a_real_command_is_a_bug_not_the_users_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old mapping took every ValueError for bad input: one line, exit 2, the bug hidden."""
    monkeypatch.setenv("SERVESIM_DATA_DIR", str(tmp_path / "data"))
    trace = tmp_path / "ok.csv"
    trace.write_text("req_id,arrival_time_s,prompt_len,output_len\na,0,5,2\nb,0.5,7,3\n")

    def broken(*_args: object, **_kwargs: object) -> None:
        raise ValueError("an internal helper broke")

    monkeypatch.setattr("servesim.cli.trace_cmd.inspect_trace", broken)
    res = CliRunner().invoke(app, ["trace", "inspect", str(trace)])
    _assert_reported_as_bug(res, "ValueError: an internal helper broke")
    assert "in broken" in res.stderr  # the frame that raised is shown, to be reported


def test_a_user_error_in_the_same_command_stays_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("req_id,arrival_time_s,prompt_len,output_len\na,0,-5,2\n")
    res = CliRunner().invoke(app, ["trace", "inspect", str(bad), "--strict"])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and "bad.csv" in res.stderr and "row 1" in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr and "bug" not in res.stderr


def test_ctrl_c_exits_130_without_a_traceback() -> None:
    res = CliRunner().invoke(_app_raising(KeyboardInterrupt()), ["boom"])
    assert res.exit_code == 130 and "Traceback" not in res.stderr and "bug" not in res.stderr


def test_a_closed_stdout_pipe_is_quiet() -> None:
    res = CliRunner().invoke(_app_raising(BrokenPipeError(32, "Broken pipe")), ["boom"])
    assert res.exit_code == 1 and res.stderr == ""


def test_the_bug_line_names_where_to_report() -> None:
    from servesim.errors import bug_line, report_to

    assert bug_line().endswith(report_to()) and report_to()
