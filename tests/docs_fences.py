"""The fenced blocks of a Markdown page, paired as a reader sees them.

Why: a pattern that only knows shell fences (```` ```bash ````) mis-pairs the page after any other
block (```` ```python ````): its closing fence reads as an opening one, so the shell blocks after
it were skipped and the code between blocks was read as commands."""

from __future__ import annotations

import re

FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", flags=re.S | re.M)
SHELL = ("bash", "sh", "console", "shell")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block as (language, body), in order; "" where no language is given."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def shell_or_plain_blocks(text: str) -> list[tuple[str, str]]:
    """The blocks a reader may type from: shell ones, and plain ones (their servesim lines)."""
    return [(lang, body) for lang, body in fenced_blocks(text) if lang in SHELL or not lang]
