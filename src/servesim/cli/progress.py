"""Progress bars on stderr, for people only (never with ``--json`` or without a terminal).

``progress_sink`` adapts a service's ``Progress`` (``phase, done, total``) to Rich: one bar per
phase (``simulating``, ``rates``, ``trials``, ``verifying``), each replacing the last.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from servesim.services.inputs import Progress as ServiceProgress


def _bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )


@contextmanager
def progress_bar(enabled: bool, label: str) -> Iterator[Callable[[int, int], None] | None]:
    """One bar labelled ``label``; yields its ``update(done, total)`` (None when not shown)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    with _bar() as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@contextmanager
def progress_sink(enabled: bool) -> Iterator[ServiceProgress | None]:
    """A service's progress as bars: a new bar when the phase changes (None when not shown)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    with _bar() as bar:
        tasks: dict[str, TaskID] = {}

        def update(phase: str, done: int, total: int, detail: Mapping[str, Any] | None = None, /) -> None:
            if phase not in tasks:
                for other in tasks.values():
                    bar.remove_task(other)
                tasks.clear()
                tasks[phase] = bar.add_task(phase, total=None)
            bar.update(tasks[phase], completed=done, total=total)

        yield update


__all__ = ["progress_bar", "progress_sink"]
