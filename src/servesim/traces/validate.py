"""Vectorized checks that turn one chunk of raw columns into clean ``Trace.df`` rows.

Every reader maps its file's columns onto the canonical names, then calls ``validate_chunk``.
Clean columns (the common case, e.g. a CSV of integers) are checked with whole-array numpy
operations; only columns that pandas could not type (text mixed with numbers, JSON values)
take the per-value path. Each bad row is reported once, for the first problem found, with the
row number and the field name *as written in the file*.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import infer_dtype, is_bool_dtype, is_float_dtype, is_integer_dtype

from servesim.bounds import MAX_TOKENS
from servesim.errors import shown
from servesim.traces.frame import canonical_frame

#: (row, field, reason): one dropped row, before it becomes a ``DroppedRow``.
Issue = tuple[int, str | None, str]

#: Texts that mean "no value" in numeric columns (CSV cells are matched exactly, JSON strings too).
NA_TEXTS = frozenset({"", "nan", "NaN", "NAN", "NA", "N/A", "n/a", "null", "NULL", "None", "-nan", "#N/A"})
#: Of those, the spellings of a literal NaN: an optional field given NaN is a bad row, never its
#: default (a required one given NaN is a missing value); an empty cell or null is the default.
NAN_TEXTS = frozenset({"nan", "NaN", "NAN", "-nan"})
#: What a CSV reader may turn into a missing cell (NaN spellings stay text, checked here).
MISSING_TEXTS = NA_TEXTS - NAN_TEXTS

NAN_REASON = "not a number ({}): leave the field empty (or out) for its default"

_INT64_MAX = 2**63 - 1
_TWO_63 = 2.0**63


class _Checker:
    """Collects at most one issue per row; a row flagged once is skipped by later checks."""

    def __init__(self, rows: np.ndarray, names: Mapping[str, str]) -> None:
        self.rows = rows
        self.names = names
        self.bad = np.zeros(len(rows), dtype=bool)
        self.issues: list[Issue] = []

    def flag(self, mask: np.ndarray, column: str | None, reason: str | Callable[[int], str]) -> None:
        idx = np.flatnonzero(mask & ~self.bad)
        if idx.size == 0:
            return
        field = None if column is None else self.names.get(column, column)
        for i in idx.tolist():
            self.issues.append((int(self.rows[i]), field, reason if isinstance(reason, str) else reason(i)))
        self.bad[idx] = True


@dataclass
class _Numbers:
    """A column read as numbers: float values plus exact ints where the input had them."""

    values: np.ndarray  # float64; NaN where missing or not a number
    exact: np.ndarray  # int64 exact value where ``is_exact``
    is_exact: np.ndarray  # bool: the input was an integer that fits int64
    missing: np.ndarray  # bool: empty / null (NaN in a float column: an empty cell)
    not_number: np.ndarray  # bool: text or another type that is not a number
    raw: np.ndarray | None  # object values, for messages (None for numeric dtypes)
    nan: np.ndarray | None = None  # bool: a literal NaN (a float NaN value or NaN text), not missing


def _numbers(s: pd.Series) -> _Numbers:
    n = len(s)
    no = np.zeros(n, dtype=bool)
    dtype = s.dtype
    if is_bool_dtype(dtype) and not isinstance(dtype, pd.CategoricalDtype):
        raw = s.to_numpy(dtype=object)
        return _Numbers(np.full(n, np.nan), np.zeros(n, np.int64), no, pd.isna(raw), ~pd.isna(raw), raw)
    if is_integer_dtype(dtype) and isinstance(dtype, np.dtype):
        if dtype.kind == "u":
            u = s.to_numpy()
            fits = u <= _INT64_MAX
            return _Numbers(u.astype(np.float64), np.where(fits, u, 0).astype(np.int64), fits, no, no, None)
        exact = s.to_numpy(dtype=np.int64)
        return _Numbers(exact.astype(np.float64), exact, ~no, no, no, None)
    if is_float_dtype(dtype) and isinstance(dtype, np.dtype):
        values = s.to_numpy(dtype=np.float64)
        return _Numbers(values, np.zeros(n, np.int64), no, np.isnan(values), no, None)
    return _numbers_object(s.to_numpy(dtype=object))


def _literal_nans(raw: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """Which of the values pandas calls missing are a literal NaN (a float), not None/null."""
    nan = np.zeros(len(raw), dtype=bool)
    idx = np.flatnonzero(missing)
    if idx.size:
        nan[idx] = [isinstance(v, float | np.floating) for v in raw[idx].tolist()]
    return nan


def _numbers_object(raw: np.ndarray) -> _Numbers:
    """Object columns: whole-array conversion when the values are all ints or all floats."""
    n = len(raw)
    missing = np.asarray(pd.isna(raw), dtype=bool)
    nan = _literal_nans(raw, missing)
    if nan.any():
        return _numbers_slow(raw)
    present = raw[~missing]
    kind = infer_dtype(present, skipna=False)
    no = np.zeros(n, dtype=bool)
    if kind == "integer":
        try:
            ints = present.astype(np.int64)
        except OverflowError:
            return _numbers_slow(raw)
        exact = np.zeros(n, np.int64)
        exact[~missing] = ints
        values = exact.astype(np.float64)
        values[missing] = np.nan
        return _Numbers(values, exact, ~missing, missing, no, raw)
    if kind in ("floating", "mixed-integer-float", "empty"):
        values = np.full(n, np.nan)
        values[~missing] = present.astype(np.float64)
        # Above 2**53 a float cannot hold every integer: let the per-value path keep them exact.
        if kind != "mixed-integer-float" or not (np.abs(values[~missing]) >= 2.0**53).any():
            return _Numbers(values, np.zeros(n, np.int64), no, missing, no, raw)
    return _numbers_slow(raw)


def _numbers_slow(raw: np.ndarray) -> _Numbers:
    """Per-value path for object columns (JSON values, CSV columns holding some text)."""
    n = len(raw)
    values = np.full(n, np.nan)
    exact = np.zeros(n, np.int64)
    is_exact = np.zeros(n, dtype=bool)
    missing = np.zeros(n, dtype=bool)
    not_number = np.zeros(n, dtype=bool)
    nan = np.zeros(n, dtype=bool)
    for i, v in enumerate(raw.tolist()):
        if isinstance(v, str):
            t = v.strip()
            if t in NAN_TEXTS:
                nan[i] = True
                continue
            if t in NA_TEXTS:
                missing[i] = True
                continue
            if "_" in t:  # Python would accept "1_000"; a trace should not
                not_number[i] = True
                continue
            try:
                v = int(t)
            except ValueError:
                try:
                    v = float(t)
                except ValueError:
                    not_number[i] = True
                    continue
        if isinstance(v, float | np.floating) and math.isnan(v):
            nan[i] = True
        elif v is None or v is pd.NA or v is pd.NaT:
            missing[i] = True
        elif isinstance(v, bool | np.bool_):
            not_number[i] = True
        elif isinstance(v, int | np.integer):
            iv = int(v)
            values[i] = float(iv)
            if -_INT64_MAX - 1 <= iv <= _INT64_MAX:
                exact[i] = iv
                is_exact[i] = True
        elif isinstance(v, float | np.floating):
            values[i] = float(v)
        else:
            not_number[i] = True
    return _Numbers(values, exact, is_exact, missing, not_number, raw, nan)


def _value_text(num: _Numbers, i: int) -> str:
    return shown(num.raw[i]) if num.raw is not None else shown(float(num.values[i]))


def _check_nan(chk: _Checker, num: _Numbers, column: str, required: bool) -> None:
    """A literal NaN: a missing value where the field is required, else a bad row of its own."""
    if num.nan is None:
        return
    if required:
        chk.flag(num.nan, column, "missing value")
    else:
        chk.flag(num.nan, column, lambda i: NAN_REASON.format(_value_text(num, i)))
    num.missing = num.missing | num.nan  # flagged: no later check looks at them


def _int_column(
    chk: _Checker,
    s: pd.Series,
    column: str,
    *,
    what: str,
    minimum: int | None,
    default: int | None,
    maximum: int | None = None,
) -> np.ndarray:
    """Integers (``12`` and ``12.0`` accepted, ``1.5`` not); ``default=None`` means required."""
    num = _numbers(s)
    _check_nan(chk, num, column, required=default is None)
    if default is None:
        chk.flag(num.missing, column, "missing value")
    chk.flag(num.not_number, column, lambda i: f"not a number ({_value_text(num, i)})")
    v = num.values
    present = ~num.missing & ~num.not_number
    finite = np.isfinite(v)
    chk.flag(present & ~finite & ~num.is_exact, column, lambda i: f"not a finite number ({float(v[i])})")
    with np.errstate(invalid="ignore"):
        integral = num.is_exact | (finite & (np.floor(v) == v))
        in_range = num.is_exact | (finite & (np.abs(v) < _TWO_63))
    chk.flag(present & ~integral, column, lambda i: f"non-integer {what} ({float(v[i])!r})")
    chk.flag(present & ~in_range, column, lambda i: f"{what} out of range ({_value_text(num, i)})")
    safe = np.where(in_range & integral & ~num.is_exact, v, 0.0)
    out = np.where(num.is_exact, num.exact, safe.astype(np.int64))
    if minimum is not None:
        chk.flag(present & (out < 0), column, lambda i: f"negative {what} ({int(out[i])})")
        chk.flag(
            present & (out < minimum),
            column,
            lambda i: f"{what} must be at least {minimum} (got {int(out[i])})",
        )
    if maximum is not None:  # the bound of every format (servesim.bounds), --strict or not
        chk.flag(
            present & in_range & (out > maximum),
            column,
            lambda i: f"{what} {int(out[i]):,} is over the bound of {maximum:,}",
        )
    if default is not None:
        out[num.missing] = default
    return out


def _float_column(
    chk: _Checker,
    s: pd.Series,
    column: str,
    *,
    what: str,
    positive: bool,
    required: bool,
    negative_ok: bool = False,
) -> np.ndarray:
    """Finite floats ``>= 0`` (``> 0`` when ``positive``); missing -> NaN unless ``required``."""
    num = _numbers(s)
    _check_nan(chk, num, column, required=required)
    if required:
        chk.flag(num.missing, column, "missing value")
    chk.flag(num.not_number, column, lambda i: f"not a number ({_value_text(num, i)})")
    v = num.values
    present = ~num.missing & ~num.not_number
    chk.flag(present & ~np.isfinite(v), column, lambda i: f"not a finite number ({float(v[i])})")
    with np.errstate(invalid="ignore"):
        if not negative_ok:
            chk.flag(present & (v < 0), column, lambda i: f"negative {what} ({float(v[i])!r})")
        if positive:
            chk.flag(present & (v == 0), column, lambda i: f"{what} must be positive (got {float(v[i])!r})")
    return np.where(present, v, np.nan)


def _label_column(chk: _Checker, s: pd.Series, column: str, *, required: bool) -> np.ndarray:
    """Text labels (integers become text); empty or null -> None (or a bad row if required)."""
    arr = s.to_numpy(dtype=object)
    if is_integer_dtype(s.dtype) and isinstance(s.dtype, np.dtype):
        return np.array([str(v) for v in arr.tolist()], dtype=object)
    missing = np.asarray(pd.isna(arr), dtype=bool)
    nan = _literal_nans(arr, missing)
    if nan.any():  # a float NaN is a value of the wrong type, not an empty label
        chk.flag(nan, column, lambda i: f"not a string ({shown(arr[i])})")
        missing &= ~nan
    if infer_dtype(arr, skipna=True) in ("string", "empty"):
        with np.errstate(invalid="ignore"):
            missing |= arr == ""
    else:
        arr = arr.copy()
        wrong = np.zeros(len(arr), dtype=bool)
        for i, v in enumerate(arr.tolist()):
            if missing[i] or isinstance(v, str):
                missing[i] = missing[i] or v == ""
            elif isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_):
                arr[i] = str(int(v))
            elif not nan[i]:
                wrong[i] = True
        chk.flag(wrong, column, lambda i: f"not a string ({shown(arr[i])})")
    if required:
        chk.flag(missing, column, "missing value")
    out = arr.copy()
    out[missing | nan] = None
    return out


def _hash_ids_column(chk: _Checker, s: pd.Series, column: str) -> np.ndarray:
    """Lists of int64 block ids, from lists/arrays or JSON text such as ``[1, 2, 3]``."""
    raw = s.to_numpy(dtype=object)
    out = np.full(len(raw), None, dtype=object)
    wrong: dict[int, str] = {}
    na = np.asarray(pd.isna(raw), dtype=bool)
    nan = _literal_nans(raw, na)
    for i in np.flatnonzero(nan).tolist():  # NaN is not "no ids": the prefix sharing would be lost
        wrong[i] = f"not a list of integers ({shown(raw[i])}): leave the field empty (or out) for none"
    for i in np.flatnonzero(~na).tolist():  # only rows with ids
        v = raw[i]
        if isinstance(v, str):
            if v.strip() == "":
                continue
            try:
                v = json.loads(v)
            except ValueError:
                wrong[i] = f"not a JSON list of integers ({_short(v)})"
                continue
        if isinstance(v, np.ndarray):
            v = v.tolist()
        if not isinstance(v, list | tuple):
            wrong[i] = f"not a list of integers ({_short(v)})"
            continue
        ids = []
        for h in v:
            if isinstance(h, bool | np.bool_) or not isinstance(h, int | np.integer):
                wrong[i] = f"hash id {shown(h)} is not an integer"
                break
            if not -_INT64_MAX - 1 <= int(h) <= _INT64_MAX:
                wrong[i] = f"hash id {h} is out of the int64 range"
                break
            ids.append(int(h))
        else:
            out[i] = ids
    mask = np.zeros(len(raw), dtype=bool)
    mask[list(wrong)] = True
    chk.flag(mask, column, lambda i: wrong[i])
    return out


def _short(v: Any) -> str:
    return shown(v)


def validate_chunk(
    columns: Mapping[str, pd.Series],
    rows: np.ndarray,
    *,
    names: Mapping[str, str],
    pre_issues: Sequence[tuple[int, str | None, str]] = (),
    hash_block_size: int | None = None,
    relative_arrivals: bool = False,
) -> tuple[pd.DataFrame, np.ndarray, list[Issue]]:
    """Check one chunk; return (clean canonical frame, its row numbers, issues of bad rows).

    ``columns`` maps canonical names to raw values (only ``req_id``, ``arrival_time_s``,
    ``prompt_len``, ``output_len`` are required); ``names`` maps canonical names to the file's
    field names for messages; ``pre_issues`` are (position, canonical column, reason) found by
    the format's own conversion (e.g. an unparsable timestamp) and win over later checks.
    ``relative_arrivals``: arrivals are offsets from a reference row and may be negative until
    the reader shifts them so that the earliest is 0 (Azure wall-clock timestamps).
    """
    chk = _Checker(rows, names)
    for pos, column, reason in pre_issues:
        one = np.zeros(len(rows), dtype=bool)
        one[pos] = True
        chk.flag(one, column, reason)

    out: dict[str, Any] = {}
    out["req_id"] = _label_column(chk, columns["req_id"], "req_id", required=True)
    out["arrival_time_s"] = _float_column(
        chk,
        columns["arrival_time_s"],
        "arrival_time_s",
        what="arrival time",
        positive=False,
        required=True,
        negative_ok=relative_arrivals,
    )
    for col in ("prompt_len", "output_len"):
        out[col] = _int_column(
            chk, columns[col], col, what="token count", minimum=1, default=None, maximum=MAX_TOKENS
        )
    if "priority" in columns:
        out["priority"] = _int_column(
            chk, columns["priority"], "priority", what="priority", minimum=None, default=0
        )
    if "tenant" in columns:
        out["tenant"] = _label_column(chk, columns["tenant"], "tenant", required=False)
    for col in ("sla_ttft_ms", "sla_e2e_ms"):
        if col in columns:
            out[col] = _float_column(chk, columns[col], col, what="SLO", positive=True, required=False)
    if "prefix_group" in columns:
        out["prefix_group"] = _label_column(chk, columns["prefix_group"], "prefix_group", required=False)
    if "prefix_len" in columns:
        out["prefix_len"] = _int_column(
            chk,
            columns["prefix_len"],
            "prefix_len",
            what="prefix length",
            minimum=0,
            default=0,
            maximum=MAX_TOKENS,
        )
    if "hash_ids" in columns:
        out["hash_ids"] = _hash_ids_column(chk, columns["hash_ids"], "hash_ids")
    if "spec_accept_rate" in columns:
        rate = _float_column(
            chk,
            columns["spec_accept_rate"],
            "spec_accept_rate",
            what="acceptance rate",
            positive=False,
            required=False,
        )
        with np.errstate(invalid="ignore"):
            chk.flag(
                rate > 1.0,
                "spec_accept_rate",
                lambda i: f"acceptance rate above 1 ({float(rate[i])!r}); give a probability in [0, 1]",
            )
        out["spec_accept_rate"] = rate
    if "lora" in columns:
        out["lora"] = _label_column(chk, columns["lora"], "lora", required=False)
    _cross_checks(chk, out, hash_block_size)

    good = ~chk.bad
    n_good = int(good.sum())
    frame = canonical_frame({k: v[good] for k, v in out.items()}, n_good)
    return frame, rows[good], chk.issues


def _cross_checks(chk: _Checker, out: Mapping[str, np.ndarray], hash_block_size: int | None) -> None:
    """Rules that involve two columns (prefix vs prompt, prefix vs hash_ids)."""
    prompt = out["prompt_len"]
    if "prefix_len" in out:
        plen = out["prefix_len"]
        chk.flag(
            plen > prompt, "prefix_len", lambda i: f"prefix_len ({plen[i]}) exceeds prompt_len ({prompt[i]})"
        )
        group = out.get("prefix_group")
        no_group = np.ones(len(plen), bool) if group is None else np.asarray(pd.isna(group), dtype=bool)
        chk.flag((plen > 0) & no_group, "prefix_len", "prefix_len is set but prefix_group is empty")
    hashes = out.get("hash_ids")
    if hashes is None:
        return
    has_hash = ~np.asarray(pd.isna(hashes), dtype=bool)
    if not has_hash.any():
        return
    if "prefix_group" in out:
        has_group = ~np.asarray(pd.isna(out["prefix_group"]), dtype=bool)
        chk.flag(has_hash & has_group, "hash_ids", "give prefix_group/prefix_len or hash_ids, not both")
    if hash_block_size is not None:
        counts = np.zeros(len(hashes), dtype=np.int64)
        counts[has_hash] = [len(h) for h in hashes[has_hash].tolist()]
        blocks = -(-prompt // hash_block_size)
        chk.flag(
            has_hash & (counts > blocks),
            "hash_ids",
            lambda i: (
                f"{counts[i]} hash blocks but a {prompt[i]}-token prompt has only {blocks[i]} "
                f"blocks of {hash_block_size} tokens"
            ),
        )
