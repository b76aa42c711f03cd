"""Build and check ``Trace.df`` frames column-wise (no per-row Python objects).

Readers and the generator both end here, so the dtypes promised in ``schema.Trace`` are set
in one place; ``check_frame`` states the invariants for tests and for the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from servesim.errors import InputError, InternalError
from servesim.traces.schema import COLUMNS

_INT_COLUMNS = ("prompt_len", "output_len", "priority", "prefix_len")
_FLOAT_COLUMNS = ("arrival_time_s", "sla_ttft_ms", "sla_e2e_ms", "spec_accept_rate")
_OBJECT_COLUMNS = ("req_id", "tenant", "prefix_group", "hash_ids", "lora")


def object_array(values: Any, n: int) -> np.ndarray:
    """An object array of length ``n``; ``None`` fills it when ``values`` is None."""
    if values is None:
        return np.full(n, None, dtype=object)
    if isinstance(values, np.ndarray) and values.dtype == object:
        arr = values
    else:
        # Through a Series so that list elements (hash_ids) stay elements, not a 2-D array.
        arr = pd.Series(list(values), dtype=object).to_numpy(dtype=object)
    if len(arr) != n:
        raise InputError(f"column has {len(arr)} values, expected {n}")
    return arr


def canonical_frame(columns: Mapping[str, Any], n: int) -> pd.DataFrame:
    """A frame with exactly ``COLUMNS`` and their dtypes; absent columns get their defaults.

    Defaults: priority 0, prefix_len 0, SLOs and spec_accept_rate NaN, tenant/prefix_group/hash_ids/lora None.
    ``req_id``, ``arrival_time_s``, ``prompt_len`` and ``output_len`` must be given.
    """
    unknown = set(columns) - set(COLUMNS)
    if unknown:
        raise InputError(f"unknown trace columns: {sorted(unknown)}")
    for col in ("req_id", "arrival_time_s", "prompt_len", "output_len"):
        if col not in columns:
            raise InputError(f"column {col!r} is required")
    data: dict[str, Any] = {}
    for col in COLUMNS:
        value = columns.get(col)
        if col in _INT_COLUMNS:
            data[col] = np.zeros(n, np.int64) if value is None else np.asarray(value, dtype=np.int64)
        elif col in _FLOAT_COLUMNS:
            data[col] = np.full(n, np.nan) if value is None else np.asarray(value, dtype=np.float64)
        else:
            data[col] = object_array(value, n)
    # pd.Series(..., dtype=object) keeps object dtype even where pandas would infer "str".
    return pd.DataFrame({c: pd.Series(v, dtype=v.dtype, copy=False) for c, v in data.items()})


def check_frame(df: pd.DataFrame) -> None:
    """Raise ``AssertionError`` unless ``df`` satisfies every ``Trace.df`` invariant."""
    if not (tuple(df.columns) == COLUMNS):
        raise InternalError(f"columns {tuple(df.columns)} != {COLUMNS}")
    for col in _INT_COLUMNS:
        if not (df[col].dtype == np.int64):
            raise InternalError(f"{col} dtype {df[col].dtype}")
    for col in _FLOAT_COLUMNS:
        if not (df[col].dtype == np.float64):
            raise InternalError(f"{col} dtype {df[col].dtype}")
    for col in _OBJECT_COLUMNS:
        if not (df[col].dtype == object):
            raise InternalError(f"{col} dtype {df[col].dtype}")
    if not (isinstance(df.index, pd.RangeIndex) and df.index.start == 0):
        raise InternalError("index is not 0..n-1")
    arrival = df["arrival_time_s"].to_numpy()
    if not (np.all(np.isfinite(arrival)) and np.all(arrival >= 0)):
        raise InternalError("bad arrival times")
    if not np.all(np.diff(arrival) >= 0):
        raise InternalError("not sorted by arrival")
    if df["req_id"].duplicated().any():
        raise InternalError("duplicate req_id")
    if not ((df["prompt_len"] >= 1).all() and (df["output_len"] >= 1).all()):
        raise InternalError("token counts < 1")
    if not ((df["prefix_len"] >= 0).all() and (df["prefix_len"] <= df["prompt_len"]).all()):
        raise InternalError("bad prefix_len")
