"""Shared fixtures for the step-time and memory model tests."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

SIM2REAL_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "sim2real"


@pytest.fixture(scope="session")
def sim2real_dir() -> Path:
    return SIM2REAL_DIR


@pytest.fixture(scope="session")
def sim2real_files() -> list[dict[str, object]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(SIM2REAL_DIR.glob("*.json"))]


@pytest.fixture(autouse=True)
def _quiet_extrapolation() -> Iterator[None]:
    """Tests that check warnings opt in with pytest.warns; the rest ignore them."""
    from servesim.perf import ExtrapolationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        yield
