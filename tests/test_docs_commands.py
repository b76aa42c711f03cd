"""Every ``servesim`` command line the docs show parses as typed: its command exists, every flag
and choice is one the CLI has, and every ``--slo`` is in the one SLO syntax.

Why: docs/dashboard.md once showed ``--slo ttft_ms=...``, which the CLI refuses; a reader copies
these lines. The README's commands are *run* as typed (tests/test_readme.py); the docs' lines
include servers and long studies, so here each is parsed by the CLI's own option parser (Click's
``make_context``: unknown flags, bad choices and missing arguments fail) and its SLO by the one
parser (``servesim.spec.parse_slo``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from typer._click.core import Context  # Typer vendors Click (pinned in uv.lock)
from typer._click.exceptions import UsageError
from typer.core import TyperGroup as Group
from typer.exceptions import Exit

from docs_fences import shell_or_plain_blocks
from servesim.cli.main import app
from servesim.spec import parse_slo

ROOT = Path(__file__).resolve().parents[1]


def doc_commands() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for doc in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        for _, block in shell_or_plain_blocks(text):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                cmd = line.strip().removeprefix("$ ").split(" # ")[0].strip()
                cmd = cmd.removeprefix("uv run ").removeprefix(".venv/bin/")
                if cmd.startswith("servesim "):
                    out.append((doc.name, cmd.split(" | ")[0].split(" > ")[0].split(" &")[0]))
    return out


COMMANDS = doc_commands()


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) >= 30 and {d for d, _ in COMMANDS} >= {"tuning.md", "dashboard.md", "README.md"}


@pytest.mark.parametrize(("doc", "cmd"), COMMANDS, ids=[f"{d}:{c[:60]}" for d, c in COMMANDS])
def test_a_docs_command_parses_as_typed(doc: str, cmd: str) -> None:
    words = shlex.split(cmd)[1:]
    root = typer.main.get_command(app)
    try:
        name, command, rest = root.resolve_command(Context(root), words)
        assert command is not None, f"{doc}: {cmd}: no such command"
        while isinstance(command, Group) and rest:
            name, command, rest = command.resolve_command(Context(command), rest)
        command.make_context(name or "", list(rest))
    except Exit:
        pass  # --help
    except UsageError as e:
        pytest.fail(f"{doc}: `{cmd}`: {e.format_message()}")
    for i, w in enumerate(words[:-1]):
        if w == "--slo":
            parse_slo(words[i + 1])  # the one syntax; raises naming the bad key
