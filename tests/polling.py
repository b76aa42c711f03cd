"""Waiting on something a server or a browser does in its own time.

Why: a test that polls needs a bound, or a broken server hangs the suite; the bound is a hang
guard that fails with what never happened, not a timing target (timings live in benchmarks/)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(done: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.2) -> None:
    """Poll ``done()`` until it is true; fails with ``what`` after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout_s:g} s")
        time.sleep(every_s)
