"""Errors of the performance model: every one says what was wrong and how to fix it.

They subclass ``ValueError`` so that callers treating bad input generically keep working; the
CLI prints them as one line and exits with status 2.
"""

from __future__ import annotations

from servesim.errors import InputError


class PerfError(InputError):
    """Bad input to the step-time / memory model (catalog, profile, calibration data)."""


class UnknownModelError(PerfError):
    """A model name that is in no catalog."""


class UnknownGPUError(PerfError):
    """A GPU name that is in no catalog."""


class CatalogError(PerfError):
    """A catalog file (shipped or user-supplied) or a Hugging Face config that cannot be used."""


class MemoryFitError(PerfError):
    """The model does not fit the GPUs, or leaves no room for one sequence of ``max_model_len``."""


class CalibrationError(PerfError):
    """Calibration input that cannot be fitted (empty, inconsistent, degenerate)."""


class BenchResultError(CalibrationError):
    """A ``vllm bench serve`` result file that cannot be used; ``errors`` lists each field's problem
    as ``{"field", "reason"}`` (what an interface shows in a table)."""

    def __init__(self, message: str, errors: list[dict[str, str | None]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []
