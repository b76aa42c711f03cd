"""The doc lines the suite runs at a smaller size (tests/doc_sizes.py) are lines the docs show,
and only flags are added to them: a line edited in the docs runs as typed again instead of
keeping a stale entry, and the smaller run is the same command on the same input."""

from __future__ import annotations

import shlex

from doc_sizes import SMALLER, as_run
from test_docs_run import COMMANDS
from test_readme import commands


def test_every_smaller_line_is_one_the_docs_show() -> None:
    shown = set(commands()) | {cmd for _, cmd in COMMANDS}
    assert sorted(set(SMALLER) - shown) == []


def test_the_smaller_run_only_adds_flags_before_the_redirection() -> None:
    for cmd, extra in SMALLER.items():
        run = as_run(cmd)
        words, typed = shlex.split(run.split(" > ")[0]), shlex.split(cmd.split(" > ")[0])
        assert words[: len(typed)] == typed and words[len(typed) :] == shlex.split(extra), run
        assert run.split(" > ")[1:] == cmd.split(" > ")[1:], run
        assert shlex.split(extra)[0].startswith("--"), extra
    assert as_run("servesim simulate x.csv > out.json") == "servesim simulate x.csv > out.json"
    tune = (
        "servesim tune my-trace.csv --slo ttft_p99_ms=500,tpot_p99_ms=50 --trials 12 --storage memory  --json"
    )
    assert as_run(f"{tune} > study.json") == (
        f"{tune} --trials 4 --trial-seeds 1 --verify-seeds 1 > study.json"
    )
