"""A long-running command's clean stop on SIGTERM and SIGINT, in the foreground or not.

SIGTERM is what systemd, Docker and Kubernetes send; Python's default for it kills the process
without running ``finally`` blocks (and Ray's driver replaces it with a ``sys.exit`` that can abort
mid-shutdown). SIGINT is Ctrl-C, but a job a non-interactive shell starts with ``&`` inherits it
ignored, and Python then leaves it ignored: such a process could not be interrupted at all. So
both get an explicit handler that raises ``Stop`` once (the command's ``finally`` then shuts down
what it started); a second signal during that shutdown is ignored rather than aborting it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stop(Exception):
    """A stop signal arrived: shut down cleanly and exit 0."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class StopSignals:
    """The handlers ``stop_on_signals`` installed (see there)."""

    def __init__(self) -> None:
        self.stopping = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            return
        self.stopping = True
        raise Stop(signum)

    def reinstall(self) -> None:
        """Ours again, after a library replaced them (``ray.init`` sets its own for SIGTERM)."""
        for s in SIGNALS:
            signal.signal(s, self._handler)

    def hold(self) -> None:
        """From now on a signal changes nothing: the shutdown under way runs to its end."""
        self.stopping = True


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopSignals]:
    """Within the block, SIGTERM and SIGINT raise ``Stop`` (the first one; later ones, and any
    after ``hold()``, are ignored). The previous handlers are restored on the way out."""
    guard = StopSignals()
    saved = {s: signal.getsignal(s) for s in SIGNALS}
    guard.reinstall()
    try:
        yield guard
    finally:
        guard.hold()
        for s, previous in saved.items():
            signal.signal(s, previous)
