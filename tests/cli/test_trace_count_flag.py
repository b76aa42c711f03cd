"""``-n/--num-requests`` sizes a generated preset; a trace file is read whole. A count given with a
file used to be ignored in silence, so a run was not the size asked for (issue 47: a flag that
does nothing in a mode is refused, not ignored)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from servesim.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FAST = ["--step-time-ms", "5", "--num-gpu-blocks", "4000"]


def test_a_count_with_a_trace_file_is_refused_naming_the_file_and_the_flag() -> None:
    trace = str(EXAMPLES / "trace.jsonl")
    for extra in ([], ["--json"]):
        run = CliRunner().invoke(app, ["simulate", trace, "-n", "200", *FAST, *extra])
        assert run.exit_code != 0
        assert (
            "trace.jsonl: a trace file is read whole: num_requests (-n) 200 applies to generated presets"
            in (run.output)
        )
        assert "Traceback" not in run.output and not run.stdout.lstrip().startswith("{")
    # a bundled trace is a file too
    bundled = CliRunner().invoke(app, ["simulate", "azure-conv", "-n", "50", *FAST])
    assert bundled.exit_code != 0 and "azure-conv: a trace file is read whole" in bundled.output


def test_the_file_alone_and_a_preset_with_a_count_run() -> None:
    whole = CliRunner().invoke(app, ["simulate", str(EXAMPLES / "trace.jsonl"), *FAST, "--json"])
    assert whole.exit_code == 0, whole.output
    assert json.loads(whole.stdout)["summary"]["num_requests"] == 300
    preset = CliRunner().invoke(app, ["simulate", "poisson_5_rps", "-n", "40", *FAST, "--json"])
    assert preset.exit_code == 0, preset.output
    assert json.loads(preset.stdout)["summary"]["num_requests"] == 40
