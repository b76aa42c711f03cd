"""Token-length models for synthetic prompts and outputs.

* ``fixed``: always ``value``.
* ``lognormal``: parametrised by its *mean* (not by mu): mu = ln(mean) - sigma²/2, so the
  draws average ``mean`` before rounding to integers and clipping to [min, max] (clipping a
  heavy tail lowers the mean a little; ``inspect_trace`` shows the result).
* ``uniform``: integers in [min, max], both ends included.
* ``resample``: bootstrap (draw rows with replacement) from a real trace: a bundled name
  (``azure-conv``, ``azure-code``) or any file ``load_trace`` reads, plus Vidur's length-only
  CSVs. When the prompt and output models resample the same source, they draw the same rows,
  so prompt/output pairs (and their correlation) are kept.
"""

from __future__ import annotations

import functools
import os
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servesim.errors import InputError
from servesim.traces.bundled import resolve_trace_path


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FixedLength(_Model):
    kind: Literal["fixed"] = "fixed"
    value: int = Field(ge=1, description="Tokens.")


class LogNormalLength(_Model):
    kind: Literal["lognormal"] = "lognormal"
    mean: float = Field(gt=0, allow_inf_nan=False, description="Mean tokens (before rounding and clipping).")
    sigma: float = Field(1.0, ge=0, allow_inf_nan=False, description="Sigma of the underlying normal.")
    min: int = Field(1, ge=1, description="Smallest value (clip).")
    max: int | None = Field(None, ge=1, description="Largest value (clip); None = no limit.")

    @model_validator(mode="after")
    def _order(self) -> LogNormalLength:
        if self.max is not None and self.max < self.min:
            raise InputError(f"max ({self.max}) < min ({self.min})")
        return self


class UniformLength(_Model):
    kind: Literal["uniform"] = "uniform"
    min: int = Field(ge=1, description="Smallest value (included).")
    max: int = Field(ge=1, description="Largest value (included).")

    @model_validator(mode="after")
    def _order(self) -> UniformLength:
        if self.max < self.min:
            raise InputError(f"max ({self.max}) < min ({self.min})")
        return self


class ResampledLength(_Model):
    kind: Literal["resample"] = "resample"
    source: str = Field(description="Bundled trace name (azure-conv, azure-code) or a trace / length file.")


LengthModel = Annotated[
    FixedLength | LogNormalLength | UniformLength | ResampledLength, Field(discriminator="kind")
]
#: Models that need no file (used for prefix lengths).
ParametricLength = Annotated[FixedLength | LogNormalLength | UniformLength, Field(discriminator="kind")]


def sample_parametric(
    model: FixedLength | LogNormalLength | UniformLength, n: int, rng: np.random.Generator
) -> np.ndarray:
    """``n`` int64 lengths from a fixed / log-normal / uniform model."""
    if isinstance(model, FixedLength):
        return np.full(n, model.value, dtype=np.int64)
    if isinstance(model, UniformLength):
        return rng.integers(model.min, model.max, size=n, endpoint=True, dtype=np.int64)
    mu = np.log(model.mean) - model.sigma**2 / 2
    draws = np.rint(rng.lognormal(mu, model.sigma, size=n))
    upper = np.inf if model.max is None else model.max
    return np.clip(draws, model.min, upper).astype(np.int64)


def length_table(source: str) -> tuple[np.ndarray, np.ndarray]:
    """(prompt lengths, output lengths) of a trace or length file, cached per file version."""
    path = resolve_trace_path(source)
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = (str(path), 0, 0)  # load_length_source reports the missing file properly
    return _length_table(source, key)


@functools.lru_cache(maxsize=8)
def _length_table(source: str, key: tuple[str, int, int]) -> tuple[np.ndarray, np.ndarray]:
    from servesim.traces.load import load_length_source  # load imports arrivals, not lengths

    trace = load_length_source(source)
    prompt = trace.df["prompt_len"].to_numpy(dtype=np.int64)
    output = trace.df["output_len"].to_numpy(dtype=np.int64)
    prompt.flags.writeable = False
    output.flags.writeable = False
    return prompt, output


def describe_source(source: str) -> str:
    """A short provenance line for a resample source."""
    prompt, _ = length_table(source)
    return f"lengths resampled from {os.fspath(source)!r} ({len(prompt)} rows)"
