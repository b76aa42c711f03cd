"""Shared inputs of the report tests: the committed demo outputs (examples/demo)."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "demo"
#: The demo's results, in the order the demo hands them to the report.
DOCUMENTS = [
    "simulate.json",
    "saturate.json",
    "tune.json",
    "cluster.json",
    "recover.json",
    "reschedule.json",
    "advise.json",
]


@pytest.fixture(scope="session")
def example_docs() -> list[Path]:
    return [EXAMPLES / name for name in DOCUMENTS]
