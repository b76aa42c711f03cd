"""The canonical request and trace types: every reader produces them, every consumer reads them.

A trace is columnar (a pandas DataFrame with the columns in ``COLUMNS``) so that a million-row
file stays cheap; ``RequestRecord`` is the validated shape of one row at the boundaries (JSON
input, JSON Schema export, ``Trace.records()``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servesim.errors import InputError, shown

#: Canonical column order of ``Trace.df``.
COLUMNS: tuple[str, ...] = (
    "req_id",
    "arrival_time_s",
    "prompt_len",
    "output_len",
    "priority",
    "tenant",
    "sla_ttft_ms",
    "sla_e2e_ms",
    "prefix_group",
    "prefix_len",
    "hash_ids",
    "spec_accept_rate",
    "lora",
)

TraceFormat = Literal[
    "native-csv",
    "native-jsonl",
    "native-json",
    "native-parquet",
    "azure",
    "burstgpt",
    "mooncake",
    "seed-json",
    "vidur",
    "synthetic",
    "empty",
]


class RequestRecord(BaseModel):
    """One request: when it arrives, how long its prompt is, how many tokens it generates.

    Prefix sharing is described either by ``prefix_group`` + ``prefix_len`` (the first
    ``prefix_len`` prompt tokens are identical for every request of the group, the rest are
    unique) or by ``hash_ids`` (one content id per ``hash_block_size``-token block of the
    prompt, as Mooncake writes them; equal ids at equal positions mean equal tokens).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    req_id: str = Field(min_length=1, description="Unique request id.")
    arrival_time_s: float = Field(ge=0, allow_inf_nan=False, description="Arrival time in seconds.")
    prompt_len: int = Field(ge=1, description="Prompt (input) tokens.")
    output_len: int = Field(ge=1, description="Output tokens the request generates (max_tokens).")
    priority: int = Field(0, description="vLLM priority: lower is served first (policy=priority).")
    tenant: str | None = Field(None, description="Tenant / client label for per-tenant metrics.")
    sla_ttft_ms: float | None = Field(None, gt=0, allow_inf_nan=False, description="Per-request TTFT SLO.")
    sla_e2e_ms: float | None = Field(None, gt=0, allow_inf_nan=False, description="Per-request E2E SLO.")
    prefix_group: str | None = Field(None, description="Shared-prefix group name.")
    prefix_len: int = Field(0, ge=0, description="Tokens shared with the prefix group (<= prompt_len).")
    hash_ids: list[int] | None = Field(None, description="Content id per hash block of the prompt.")
    spec_accept_rate: float | None = Field(
        None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Speculative decoding: the request's per-position draft acceptance rate (each "
        "draft accepted with this probability given the one before it was); none: the method's model.",
    )
    lora: str | None = Field(
        None,
        min_length=1,
        description="The LoRA adapter the request names (vLLM's model field); none: the base model.",
    )

    @model_validator(mode="after")
    def _check_prefix(self) -> RequestRecord:
        if self.prefix_len > self.prompt_len:
            raise InputError(f"prefix_len {self.prefix_len} exceeds prompt_len {self.prompt_len}")
        if self.prefix_len > 0 and self.prefix_group is None:
            raise InputError("prefix_len is set but prefix_group is missing")
        if self.prefix_group is not None and self.hash_ids is not None:
            raise InputError("give prefix_group/prefix_len or hash_ids, not both")
        return self


class DroppedRow(BaseModel):
    """A row a reader skipped, and why (1-based row number as a user counts it in the file)."""

    model_config = ConfigDict(frozen=True)

    row: int
    field: str | None
    reason: str


class TraceProvenance(BaseModel):
    """Where a trace came from and what the reader did to it; nothing is dropped silently."""

    source: str = Field(description="File path, or a generator description.")
    format: TraceFormat
    rows_read: int = Field(ge=0)
    rows_kept: int = Field(ge=0)
    num_dropped: int = Field(0, ge=0)
    dropped: list[DroppedRow] = Field(
        default_factory=list, description="The dropped rows (the first 1000; num_dropped counts all)."
    )
    reordered: bool = Field(False, description="True when rows were stably sorted by arrival time.")
    hash_block_size: int | None = Field(None, description="Tokens per hash_ids entry, if hash_ids exist.")
    generator: dict[str, Any] | None = Field(None, description="Generator name, parameters and seed.")
    notes: list[str] = Field(default_factory=list)


def _empty_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "req_id": pd.Series([], dtype=object),
            "arrival_time_s": pd.Series([], dtype="float64"),
            "prompt_len": pd.Series([], dtype="int64"),
            "output_len": pd.Series([], dtype="int64"),
            "priority": pd.Series([], dtype="int64"),
            "tenant": pd.Series([], dtype=object),
            "sla_ttft_ms": pd.Series([], dtype="float64"),
            "sla_e2e_ms": pd.Series([], dtype="float64"),
            "prefix_group": pd.Series([], dtype=object),
            "prefix_len": pd.Series([], dtype="int64"),
            "hash_ids": pd.Series([], dtype=object),
            "spec_accept_rate": pd.Series([], dtype="float64"),
            "lora": pd.Series([], dtype=object),
        }
    )


class Trace:
    """A validated, arrival-sorted request trace.

    ``df`` has exactly the columns of ``COLUMNS`` with these dtypes: ``req_id``/``tenant``/
    ``prefix_group`` object (str or None), ``arrival_time_s``/``sla_*`` float64 (NaN = none),
    ``prompt_len``/``output_len``/``priority``/``prefix_len`` int64, ``hash_ids`` object (list of
    int or None), ``spec_accept_rate`` float64 (NaN = none), ``lora`` object (adapter name or
    None). Rows are sorted by arrival (stable), ``req_id`` is unique, the index is 0..n-1.
    """

    __slots__ = ("df", "provenance")

    def __init__(self, df: pd.DataFrame, provenance: TraceProvenance) -> None:
        self.df = df
        self.provenance = provenance

    def __len__(self) -> int:
        return len(self.df)

    def __repr__(self) -> str:
        p = self.provenance
        return f"Trace({len(self)} requests from {p.source!r}, format={p.format})"

    @property
    def hash_block_size(self) -> int | None:
        return self.provenance.hash_block_size

    def default_max_model_len(self) -> int:
        """The context limit the engine assumes when none is given: the longest request + 1
        (prompt + output; 2 for an empty trace)."""
        df = self.df
        return int((df["prompt_len"] + df["output_len"]).max()) + 1 if len(df) else 2

    @classmethod
    def empty(cls, source: str = "<empty>") -> Trace:
        return cls(_empty_frame(), TraceProvenance(source=source, format="empty", rows_read=0, rows_kept=0))

    @classmethod
    def from_records(
        cls,
        records: Sequence[RequestRecord | dict[str, Any]],
        source: str = "<records>",
        format: TraceFormat = "native-json",
        hash_block_size: int | None = None,
        generator: dict[str, Any] | None = None,
    ) -> Trace:
        """Build a trace from records (validated); rows are stably sorted by arrival."""
        recs = [r if isinstance(r, RequestRecord) else RequestRecord.model_validate(r) for r in records]
        if not recs:
            t = cls.empty(source)
            t.provenance = TraceProvenance(
                source=source, format=format, rows_read=0, rows_kept=0, generator=generator
            )
            return t
        ids = [r.req_id for r in recs]
        if len(set(ids)) != len(ids):
            dup = next(i for i, n in Counter(ids).items() if n > 1)
            raise InputError(f"duplicate req_id {shown(dup)}")
        df = pd.DataFrame(
            {
                "req_id": pd.Series(ids, dtype=object),
                "arrival_time_s": np.array([r.arrival_time_s for r in recs], dtype=np.float64),
                "prompt_len": np.array([r.prompt_len for r in recs], dtype=np.int64),
                "output_len": np.array([r.output_len for r in recs], dtype=np.int64),
                "priority": np.array([r.priority for r in recs], dtype=np.int64),
                "tenant": pd.Series([r.tenant for r in recs], dtype=object),
                "sla_ttft_ms": np.array(
                    [np.nan if r.sla_ttft_ms is None else r.sla_ttft_ms for r in recs], dtype=np.float64
                ),
                "sla_e2e_ms": np.array(
                    [np.nan if r.sla_e2e_ms is None else r.sla_e2e_ms for r in recs], dtype=np.float64
                ),
                "prefix_group": pd.Series([r.prefix_group for r in recs], dtype=object),
                "prefix_len": np.array([r.prefix_len for r in recs], dtype=np.int64),
                "hash_ids": pd.Series([r.hash_ids for r in recs], dtype=object),
                "spec_accept_rate": np.array(
                    [np.nan if r.spec_accept_rate is None else r.spec_accept_rate for r in recs],
                    dtype=np.float64,
                ),
                "lora": pd.Series([r.lora for r in recs], dtype=object),
            }
        )
        order = np.argsort(df["arrival_time_s"].to_numpy(), kind="stable")
        reordered = bool(np.any(order != np.arange(len(order))))
        if reordered:
            df = df.iloc[order].reset_index(drop=True)
        if hash_block_size is None and any(r.hash_ids is not None for r in recs):
            raise InputError("hash_ids are given but hash_block_size is not")
        prov = TraceProvenance(
            source=source,
            format=format,
            rows_read=len(recs),
            rows_kept=len(recs),
            reordered=reordered,
            hash_block_size=hash_block_size,
            generator=generator,
        )
        return cls(df, prov)

    def records(self) -> Iterator[RequestRecord]:
        """Iterate the rows as validated records (slow path: for small traces and exports)."""
        for row in self.df.to_dict(orient="records"):
            yield _record_from_row(row)


def _opt_float(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and np.isnan(x)) else float(x)


def _record_from_row(row: Mapping[Any, Any]) -> RequestRecord:
    ids = row["hash_ids"]
    return RequestRecord(
        req_id=str(row["req_id"]),
        arrival_time_s=float(row["arrival_time_s"]),
        prompt_len=int(row["prompt_len"]),
        output_len=int(row["output_len"]),
        priority=int(row["priority"]),
        tenant=None if row["tenant"] is None else str(row["tenant"]),
        sla_ttft_ms=_opt_float(row["sla_ttft_ms"]),
        sla_e2e_ms=_opt_float(row["sla_e2e_ms"]),
        prefix_group=None if row["prefix_group"] is None else str(row["prefix_group"]),
        prefix_len=int(row["prefix_len"]),
        hash_ids=None if ids is None else [int(h) for h in ids],
        spec_accept_rate=_opt_float(row["spec_accept_rate"]),
        lora=None if row["lora"] is None else str(row["lora"]),
    )
