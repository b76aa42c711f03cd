"""A port for a test's server that no other test worker and no outgoing connection will take.

Binding port 0 and handing the number to a server started later races: the kernel hands the
same number to the next outgoing connection (ephemeral ports, 32768-60999 on Linux) or to a
server another xdist worker starts at the same moment, and the server then dies with "address
already in use" (a red CI by chance). So ports come from 20000-31999, below the ephemeral range
and above Ray's worker ports (10002-19999), and each xdist worker draws from its own slice.
"""

from __future__ import annotations

import os
import random
import socket

LOW, HIGH = 20_000, 32_000
SLICES = 8  # xdist workers gw0..gw7 each own a slice; more workers share them round-robin


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    width = (HIGH - LOW) // SLICES
    start = LOW + (index % SLICES) * width
    return range(start, start + width)


def free_port() -> int:
    """A port in this worker's slice that nothing listens on now."""
    ports = _slice()
    for _ in range(200):
        port = random.choice(ports)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")
