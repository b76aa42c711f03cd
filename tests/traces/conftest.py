"""Shared fixtures of the trace tests: where the small fixture files live."""

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "traces"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
