"""Row layouts: which columns each known trace format has and how they map to servesim's.

A layout is independent of the container (CSV, JSONL, JSON, Parquet): the Azure columns in a
JSONL file are read like the Azure CSV. Each layout's ``convert`` renames columns to the
canonical names and does the format's own work (parse Azure timestamps, flag BurstGPT's
failed requests); the generic checks happen afterwards in ``validate``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from servesim.errors import shown
from servesim.traces.errors import TraceError
from servesim.traces.schema import COLUMNS

#: (position in chunk, canonical column, reason): a problem found while converting.
PreIssue = tuple[int, str | None, str]


@dataclass
class Converted:
    columns: dict[str, pd.Series]
    pre_issues: list[PreIssue] = field(default_factory=list)


#: convert(frame of file columns, 1-based row numbers, per-file state) -> canonical columns.
ConvertFn = Callable[[pd.DataFrame, np.ndarray, dict[str, Any]], Converted]


@dataclass(frozen=True)
class Layout:
    """One known row format."""

    name: str
    required: tuple[str, ...]  # file columns that must exist
    optional: tuple[str, ...]  # file columns used when they exist
    names: Mapping[str, str]  # canonical column -> file column, for messages
    text_columns: tuple[str, ...]  # file columns to keep as text when reading CSV
    convert: ConvertFn
    help: str  # the expected columns, for "missing column" messages
    arrival_divisor: float = 1.0  # divide validated arrival values by this (1000: ms -> s)
    default_hash_block_size: int | None = None
    shift_to_first: bool = False  # arrivals are wall-clock offsets: shift so the earliest is 0
    notes: tuple[str, ...] = ()

    @property
    def known(self) -> tuple[str, ...]:
        return self.required + self.optional


def _row_ids(rows: np.ndarray) -> pd.Series:
    return pd.Series(rows.astype(str), dtype=object)


def _rename(frame: pd.DataFrame, mapping: Mapping[str, str]) -> dict[str, pd.Series]:
    """Canonical name -> column, for the file columns of ``mapping`` that are present."""
    return {
        canon: frame[src].reset_index(drop=True) for canon, src in mapping.items() if src in frame.columns
    }


# --- native -------------------------------------------------------------------------------

NATIVE_REQUIRED = ("arrival_time_s", "prompt_len", "output_len")


def _convert_native(frame: pd.DataFrame, rows: np.ndarray, state: dict[str, Any]) -> Converted:
    cols = _rename(frame, {c: c for c in COLUMNS})
    if "req_id" not in cols:
        cols["req_id"] = _row_ids(rows)
    return Converted(cols)


NATIVE = Layout(
    name="native",
    required=NATIVE_REQUIRED,
    optional=(
        "req_id",
        "priority",
        "tenant",
        "sla_ttft_ms",
        "sla_e2e_ms",
        "prefix_group",
        "prefix_len",
        "hash_ids",
        "spec_accept_rate",
        "lora",
    ),
    names={c: c for c in COLUMNS},
    text_columns=("req_id", "tenant", "prefix_group", "hash_ids", "lora"),
    convert=_convert_native,
    help=(
        "req_id (filled with row numbers when the column is absent), arrival_time_s, prompt_len, "
        "output_len; optional: priority, tenant, sla_ttft_ms, sla_e2e_ms, prefix_group, prefix_len, "
        "hash_ids, spec_accept_rate, lora (a LoRA adapter's name; none: the base model)"
    ),
)

# --- Azure LLM inference 2023/2024 ----------------------------------------------------------


def _convert_azure(frame: pd.DataFrame, rows: np.ndarray, state: dict[str, Any]) -> Converted:
    raw = frame["TIMESTAMP"].reset_index(drop=True)
    parsed = pd.to_datetime(raw, format="ISO8601", errors="coerce", utc=True)
    ns = parsed.dt.tz_convert(None).astype("datetime64[ns]").to_numpy().view(np.int64)
    ok = ~np.asarray(parsed.isna(), dtype=bool)
    issues: list[PreIssue] = [
        (int(i), "arrival_time_s", f"unparsable timestamp ({shown(raw.iloc[i])})")
        for i in np.flatnonzero(~ok & np.asarray(raw.notna(), dtype=bool)).tolist()
    ]
    if "ref_ns" not in state and ok.any():
        state["ref_ns"] = int(ns[ok][0])
        state["ref_text"] = str(raw[ok].iloc[0])
    ref = state.get("ref_ns", 0)
    arrival = np.where(ok, (ns - ref) / 1e9, np.nan)
    cols = _rename(frame, {"prompt_len": "ContextTokens", "output_len": "GeneratedTokens"})
    cols["arrival_time_s"] = pd.Series(arrival)
    cols["req_id"] = _row_ids(rows)
    return Converted(cols, issues)


AZURE = Layout(
    name="azure",
    required=("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    optional=(),
    names={"arrival_time_s": "TIMESTAMP", "prompt_len": "ContextTokens", "output_len": "GeneratedTokens"},
    text_columns=("TIMESTAMP",),
    convert=_convert_azure,
    help="TIMESTAMP (e.g. 2023-11-16 18:17:03.9799600), ContextTokens, GeneratedTokens",
    shift_to_first=True,
    notes=("req_id = row number; arrival_time_s = TIMESTAMP minus the earliest TIMESTAMP",),
)

# --- BurstGPT -------------------------------------------------------------------------------

_BURSTGPT_MAP = {
    "arrival_time_s": "Timestamp",
    "prompt_len": "Request tokens",
    "output_len": "Response tokens",
    "tenant": "Model",
}


def _convert_burstgpt(frame: pd.DataFrame, rows: np.ndarray, state: dict[str, Any]) -> Converted:
    cols = _rename(frame, _BURSTGPT_MAP)
    response = pd.to_numeric(cols["output_len"], errors="coerce")
    failed = np.flatnonzero(np.asarray(response == 0, dtype=bool))
    issues: list[PreIssue] = [(int(i), "output_len", "failed request (Response tokens = 0)") for i in failed]
    cols["req_id"] = _row_ids(rows)
    return Converted(cols, issues)


BURSTGPT = Layout(
    name="burstgpt",
    required=("Timestamp", "Request tokens", "Response tokens"),
    optional=("Model", "Total tokens", "Log Type"),
    names=_BURSTGPT_MAP,
    text_columns=("Model", "Log Type"),
    convert=_convert_burstgpt,
    help="Timestamp (seconds), Model, Request tokens, Response tokens, Total tokens, Log Type",
    notes=(
        "req_id = row number; Model -> tenant; Total tokens and Log Type are not used; "
        "failed requests (Response tokens = 0) are dropped",
    ),
)

# --- Mooncake -------------------------------------------------------------------------------

_MOONCAKE_MAP = {
    "arrival_time_s": "timestamp",
    "prompt_len": "input_length",
    "output_len": "output_length",
    "hash_ids": "hash_ids",
}


def _convert_mooncake(frame: pd.DataFrame, rows: np.ndarray, state: dict[str, Any]) -> Converted:
    cols = _rename(frame, _MOONCAKE_MAP)
    cols["req_id"] = _row_ids(rows)
    return Converted(cols)


MOONCAKE_BLOCK_SIZE = 512

MOONCAKE = Layout(
    name="mooncake",
    required=("timestamp", "input_length", "output_length"),
    optional=("hash_ids",),
    names=_MOONCAKE_MAP,
    text_columns=("hash_ids",),
    convert=_convert_mooncake,
    help="timestamp (milliseconds), input_length, output_length, hash_ids",
    arrival_divisor=1000.0,
    default_hash_block_size=MOONCAKE_BLOCK_SIZE,
    notes=("req_id = row number; arrival_time_s = timestamp / 1000",),
)

# --- Vidur processed traces -----------------------------------------------------------------

_VIDUR_MAP = {
    "arrival_time_s": "arrived_at",
    "prompt_len": "num_prefill_tokens",
    "output_len": "num_decode_tokens",
}


def _convert_vidur(frame: pd.DataFrame, rows: np.ndarray, state: dict[str, Any]) -> Converted:
    cols = _rename(frame, _VIDUR_MAP)
    cols["req_id"] = _row_ids(rows)
    return Converted(cols)


VIDUR = Layout(
    name="vidur",
    required=("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
    optional=(),
    names=_VIDUR_MAP,
    text_columns=(),
    convert=_convert_vidur,
    help="arrived_at (seconds since the first request), num_prefill_tokens, num_decode_tokens",
    notes=("req_id = row number",),
)


def _convert_lengths(frame: pd.DataFrame, rows: np.ndarray, state: dict[str, Any]) -> Converted:
    cols = _rename(frame, _VIDUR_MAP)
    cols["arrival_time_s"] = pd.Series(np.zeros(len(frame)))
    cols["req_id"] = _row_ids(rows)
    return Converted(cols)


#: Vidur's length-only statistics files: a length source for the generator, not a trace.
VIDUR_LENGTHS = Layout(
    name="vidur-lengths",
    required=("num_prefill_tokens", "num_decode_tokens"),
    optional=("num_total_tokens", "pd_ratio"),
    names=_VIDUR_MAP,
    text_columns=(),
    convert=_convert_lengths,
    help="num_prefill_tokens, num_decode_tokens (no arrival times)",
)

# --- seed JSON: {"arrival_distribution": ..., "requests": [{req_id, prompt_len, expected_out}]} ---

_SEED_MAP = {"req_id": "req_id", "prompt_len": "prompt_len", "output_len": "expected_out"}


def _convert_seed(frame: pd.DataFrame, rows: np.ndarray, state: dict[str, Any]) -> Converted:
    cols = _rename(frame, _SEED_MAP)
    if "req_id" not in cols:
        cols["req_id"] = _row_ids(rows)
    cols["arrival_time_s"] = pd.Series(np.zeros(len(frame)))  # drawn after validation
    return Converted(cols)


SEED = Layout(
    name="seed",
    required=("prompt_len", "expected_out"),
    optional=("req_id",),
    names=_SEED_MAP,
    text_columns=("req_id",),
    convert=_convert_seed,
    help=(
        'an object {"arrival_distribution": NAME, "requests": [{"req_id", "prompt_len", "expected_out"}]} '
        "(req_id filled with row numbers when absent)"
    ),
)

#: Layouts tried by auto-detection, in tie-break order.
DETECTABLE: tuple[Layout, ...] = (NATIVE, AZURE, BURSTGPT, MOONCAKE, VIDUR)
LAYOUTS: dict[str, Layout] = {lay.name: lay for lay in (*DETECTABLE, VIDUR_LENGTHS, SEED)}


def is_length_only(columns: Sequence[str]) -> bool:
    cols = set(columns)
    return set(VIDUR_LENGTHS.required) <= cols and "arrived_at" not in cols


def length_only_error(display: str) -> TraceError:
    return TraceError(
        display,
        "a length-only file (num_prefill_tokens, num_decode_tokens, no arrival times) is not a trace; "
        "use it as a length source for the generator: servesim generate --lengths-from FILE, or "
        "ResampledLength(source=FILE) in a GeneratorSpec",
    )


def detect_layout(columns: Sequence[str], display: str) -> Layout:
    """The layout whose required columns best match ``columns`` (ties: DETECTABLE order)."""
    cols = set(columns)
    if is_length_only(columns):
        raise length_only_error(display)
    best = max(DETECTABLE, key=lambda lay: len(cols & set(lay.required)))
    if not cols & set(best.required):
        known = "; ".join(f"{lay.name}: {lay.help}" for lay in DETECTABLE)
        found = ", ".join(shown(c) for c in list(columns)[:12]) or "none"
        raise TraceError(display, f"unrecognised columns ({found}); expected one of these formats - {known}")
    return best


def check_columns(layout: Layout, columns: Sequence[str], display: str) -> None:
    """Raise a ``TraceError`` naming the missing columns and the ones the layout expects."""
    missing = [c for c in layout.required if c not in columns]
    if not missing:
        return
    if layout is VIDUR and is_length_only(columns):
        raise length_only_error(display)
    listed = ", ".join(repr(c) for c in missing)
    raise TraceError(
        display,
        f"missing column(s) {listed}; the {layout.name} format needs: {layout.help}",
        field=missing[0],
    )
