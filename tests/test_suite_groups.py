"""The suite's xdist groups hold: the tests of a module that share a module-scoped fixture run on
one worker, so the fixture is built once (``make unit`` runs ``--dist loadgroup``).

Why: under pytest 9, pytest-xdist 3.8's own way of tagging a test with its group had no effect,
and every group was silently split across workers: vLLM's oracle started once per worker for
the same answers, and two Ray instances started at once on a 2-core machine (issue 47). The
grouping is tests/conftest.py's; this runs two real modules under two workers and reads, from
pytest's own verbose lines, which worker ran each test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Two cheap modules whose tests share a module-scoped fixture.
MODULES = ("tests/views/test_sparklines.py", "tests/views/test_overlay.py")
XDIST = ("-n", "2", "--dist", "loadgroup", "-vv", "-p", "no:cacheprovider")


def test_a_modules_shared_fixture_keeps_its_tests_on_one_worker() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *XDIST, *MODULES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    workers: dict[str, set[str]] = defaultdict(set)
    for worker, nodeid in re.findall(r"\[(gw\d+)\] \[ *\d+%\] PASSED (\S+@module:\S+)", run.stdout):
        module = nodeid.split("::")[0]
        assert nodeid.endswith("@module:" + module), nodeid  # the group ends the id xdist reads
        workers[module].add(worker)
    assert set(workers) == set(MODULES), run.stdout[-3000:]  # each module's fixture users are tagged
    assert all(len(w) == 1 for w in workers.values()), dict(workers)
