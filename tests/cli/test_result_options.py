"""Every command that writes a result takes ``--json`` (the document alone on stdout) and
``--out FILE`` (the same document as a file), and the same bad ``--slo`` gets the same words
from every command that takes one.

Why: ``tune`` once had no ``--out``, and ``saturate`` and ``simulate`` worded the same SLO error
differently. The commands are enumerated from the CLI itself, so a new result command without
the two options fails here until it has them (or is listed below with the reason it has none).
"""

from __future__ import annotations

import re

import pytest
import typer
from typer.core import TyperGroup as Group
from typer.testing import CliRunner

from servesim.cli.main import app

#: Commands that write no result document, and why (anything else must take --json and --out).
NO_RESULT = {
    "serve": "a server: the web workbench",
    "emulate": "a server: the OpenAI-compatible fleet",
    "demo": "writes a folder of documents (--out DIR) and prints its summary with --json",
    "log": "reads the action log back",
    "schema": "prints a JSON Schema (always JSON, on stdout)",
    "report": "writes HTML/Markdown reports, not a result document",
    "trace convert": "writes a trace in the format asked for (--out is the trace file)",
    "generate-failures": "writes an input file (the failure log for recover), always to --out",
    "perf models": "lists the model catalog",
    "perf gpus": "lists the GPU catalog",
    "perf profiles": "lists (or prints) the shipped calibration profiles",
}


def leaf_commands() -> dict[str, typer.core.TyperCommand]:
    out: dict[str, typer.core.TyperCommand] = {}

    def walk(group: Group, prefix: str) -> None:
        for name, cmd in group.commands.items():  # the root loads every command for this
            if isinstance(cmd, Group):
                walk(cmd, f"{prefix}{name} ")
            else:
                out[f"{prefix}{name}"] = cmd  # type: ignore[assignment]

    walk(typer.main.get_command(app), "")  # type: ignore[arg-type]
    return out


def _flags(cmd: typer.core.TyperCommand) -> set[str]:
    return {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}


COMMANDS = leaf_commands()


def test_the_cli_has_result_commands() -> None:
    assert {"simulate", "saturate", "tune", "cluster", "dashboard", "advise", "recover"} <= set(COMMANDS)
    assert set(NO_RESULT) <= set(COMMANDS), f"stale exemptions: {set(NO_RESULT) - set(COMMANDS)}"


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - set(NO_RESULT)))
def test_a_result_command_takes_json_and_out(name: str) -> None:
    flags = _flags(COMMANDS[name])
    missing = [f for f in ("--json", "--out") if f not in flags]
    assert not missing, f"`servesim {name}` writes a result but has no {' / '.join(missing)}"


#: Every command that takes --slo, with the arguments that make it otherwise runnable.
SLO_COMMANDS = {
    "simulate": ["simulate", "bursty", "-n", "5"],
    "saturate": ["saturate", "bursty", "-n", "5"],
    "tune": ["tune", "bursty", "-n", "5"],
    "cluster": ["cluster", "bursty", "-n", "5"],
    "dashboard": ["dashboard", "bursty", "-n", "5", "--headless"],
    "advise": ["advise", "bursty", "-n", "5"],
}

BAD_SLOS = ["ttft_ms=500", "ttft_p99_ms=fast", "ttft_p99_ms=-1", "ttft_p99_ms"]


def test_every_command_with_slo_is_checked_here() -> None:
    takes = {n for n, c in COMMANDS.items() if "--slo" in _flags(c)}
    assert takes == set(SLO_COMMANDS), f"commands taking --slo not compared: {takes ^ set(SLO_COMMANDS)}"


def _error(args: list[str]) -> str:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, (args, res.exit_code, res.output)
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    return re.sub(r"\s+", " ", " ".join(lines))


@pytest.mark.parametrize("bad", BAD_SLOS)
def test_the_same_bad_slo_gets_the_same_words_everywhere(bad: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SERVESIM_DATA_DIR", str(tmp_path))
    words = {name: _error([*args, "--slo", bad]) for name, args in SLO_COMMANDS.items()}
    first = words["simulate"]
    assert "slo" in first.lower(), first
    for name, text in words.items():
        assert text == first, f"`servesim {name} --slo {bad}` says {text!r}; simulate says {first!r}"
