"""Step-level measurements: read a CSV of engine steps (batch composition + duration) into
``StepGroup``s, one per (model, GPU, TP) setup, each of which can predict its steps' durations
under a profile (the roofline evaluated per row). ``servesim.perf.step_fit`` fits them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servesim.engine.step_time import BatchComposition
from servesim.errors import shown
from servesim.perf.catalog import Catalog, GPUSpec, ModelSpec, load_catalog, resolve_gpu, resolve_model
from servesim.perf.errors import CalibrationError
from servesim.perf.profile import HardwareProfile
from servesim.perf.roofline import RooflineStepTime


@dataclass
class StepGroup:
    """Measured steps of one (model, GPU, TP) setup."""

    model: ModelSpec
    gpu: GPUSpec
    tp: int
    batches: list[BatchComposition]
    durations: np.ndarray  # seconds
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 8192

    @property
    def key(self) -> str:
        return f"{self.model.name}/{self.gpu.name}/tp{self.tp}"

    def step_model(self, profile: HardwareProfile) -> RooflineStepTime:
        return RooflineStepTime(
            self.model,
            self.gpu,
            self.tp,
            profile,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
        )

    def predict(self, profile: HardwareProfile) -> np.ndarray:
        st = self.step_model(profile).step_time
        return np.fromiter((st(b) for b in self.batches), dtype=np.float64, count=len(self.batches))


_COLS = {
    "duration": ("duration_s", "duration_ms", "step_time_s", "step_time_ms", "duration_us"),
    "decodes": ("num_decodes", "decode_tokens", "num_decode_tokens"),
    "decode_ctx": ("decode_ctx_sum", "decode_context_sum", "context_sum", "decode_context_tokens"),
    "chunks": ("prefill_chunks",),
    "prefill_tokens": ("prefill_tokens", "num_prefill_tokens"),
    "num_prefills": ("num_prefills", "prefill_requests", "num_prefill_requests"),
    "prefill_ctx": ("prefill_ctx_sum", "prefill_context_sum", "prefill_cached_tokens"),
    "batch_size": ("batch_size", "num_requests", "num_seqs"),
    "model": ("model",),
    "gpu": ("gpu",),
    "tp": ("tp", "tensor_parallel_size"),
}


def _col(df: pd.DataFrame, key: str) -> str | None:
    lower = {c.lower().strip(): c for c in df.columns}
    for alias in _COLS[key]:
        if alias in lower:
            return lower[alias]
    return None


def _parse_chunks(text: Any, where: str) -> list[tuple[int, int]]:
    if text is None or (isinstance(text, float) and math.isnan(text)) or str(text).strip() in ("", "[]"):
        return []
    s = str(text).strip()
    try:
        if s.startswith("["):
            raw = json.loads(s)
            return [(int(c), int(p)) for c, p in raw]
        out = []
        for part in s.replace(",", ";").split(";"):
            if part.strip():
                c, _, p = part.partition(":")
                out.append((int(c), int(p or 0)))
        return out
    except (ValueError, TypeError) as e:
        raise CalibrationError(
            f"{where}: prefill_chunks {shown(s)} must be 'tokens:cached;tokens:cached' "
            "or a JSON list of pairs"
        ) from e


def step_groups_from_frame(
    df: pd.DataFrame,
    *,
    model: str | ModelSpec | None = None,
    gpu: str | GPUSpec | None = None,
    tp: int | None = None,
    catalog: Catalog | None = None,
    source: str = "<frame>",
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 8192,
) -> list[StepGroup]:
    """Step rows -> groups by (model, GPU, TP). Columns: see ``read_step_csv``."""
    if df.empty:
        raise CalibrationError(f"{source}: no rows")
    cat = catalog or load_catalog()
    dcol = _col(df, "duration")
    if dcol is None:
        raise CalibrationError(f"{source}: needs a duration column ({', '.join(_COLS['duration'])})")
    unit = 1e-3 if dcol.lower().endswith("_ms") else 1e-6 if dcol.lower().endswith("_us") else 1.0
    dur = pd.to_numeric(df[dcol], errors="coerce").to_numpy(dtype=np.float64) * unit
    if not np.all(np.isfinite(dur)) or np.any(dur <= 0):
        bad = int(np.argmax(~np.isfinite(dur) | (dur <= 0)))
        raise CalibrationError(f"{source}: row {bad + 2}: {dcol} must be a positive number")

    def ints(key: str, default: int = 0) -> np.ndarray:
        c = _col(df, key)
        if c is None:
            return np.full(len(df), default, dtype=np.int64)
        v = pd.to_numeric(df[c], errors="coerce")
        if v.isna().any() or (v < 0).any():
            bad = int(np.argmax(v.isna().to_numpy() | (v < 0).to_numpy()))
            raise CalibrationError(f"{source}: row {bad + 2}: {c} must be a non-negative integer")
        return v.to_numpy().astype(np.int64)

    nd = ints("decodes")
    dctx = ints("decode_ctx")
    if _col(df, "decode_ctx") is None and np.any(nd > 0):
        raise CalibrationError(
            f"{source}: rows with decodes need decode_ctx_sum (sum of their context lengths)"
        )
    chunk_col = _col(df, "chunks")
    ptok = ints("prefill_tokens")
    npf = ints("num_prefills", -1)
    pctx = ints("prefill_ctx")
    bs_col = _col(df, "batch_size")
    bsz = ints("batch_size") if bs_col else None
    mcol, gcol, tcol = _col(df, "model"), _col(df, "gpu"), _col(df, "tp")
    groups: dict[tuple[str, str, int], StepGroup] = {}
    durations: dict[tuple[str, str, int], list[float]] = {}
    for i in range(len(df)):
        where = f"{source}: row {i + 2}"
        if chunk_col is not None:
            chunks = _parse_chunks(df[chunk_col].iloc[i], where)
        elif ptok[i] > 0:
            k = int(npf[i]) if npf[i] > 0 else 1
            if bsz is not None and npf[i] < 0:
                k = max(1, int(bsz[i]) - int(nd[i]))
            base, rem = divmod(int(ptok[i]), k)
            cbase, crem = divmod(int(pctx[i]), k)
            chunks = [(base + (1 if j < rem else 0), cbase + (1 if j < crem else 0)) for j in range(k)]
        else:
            chunks = []
        if bsz is not None and chunk_col is not None and int(bsz[i]) != int(nd[i]) + len(chunks):
            raise CalibrationError(
                f"{where}: batch_size {int(bsz[i])} != decodes {int(nd[i])} + prefill chunks {len(chunks)}"
            )
        if nd[i] == 0 and not chunks:
            raise CalibrationError(f"{where}: a step with neither decodes nor prefill tokens")
        if nd[i] > 0 and dctx[i] < nd[i]:
            raise CalibrationError(f"{where}: decode_ctx_sum {int(dctx[i])} < num_decodes {int(nd[i])}")
        mname = str(df[mcol].iloc[i]) if mcol else None
        gname = str(df[gcol].iloc[i]) if gcol else None
        tval = int(df[tcol].iloc[i]) if tcol else None
        m_ = mname or model
        g_ = gname or gpu
        t_ = tval or tp or 1
        if m_ is None or g_ is None:
            raise CalibrationError(f"{where}: no model/gpu column and none given (--model, --gpu)")
        ms = resolve_model(m_, cat)
        gs = resolve_gpu(g_, cat)
        key = (ms.name, gs.name, t_)
        if key not in groups:
            groups[key] = StepGroup(ms, gs, t_, [], np.zeros(0), max_num_seqs, max_num_batched_tokens)
            durations[key] = []
        groups[key].batches.append(BatchComposition(int(nd[i]), int(dctx[i]), chunks))
        durations[key].append(float(dur[i]))
    for gkey, g in groups.items():
        g.durations = np.asarray(durations[gkey], dtype=np.float64)
    return list(groups.values())


def read_step_csv(
    path: str | Path,
    *,
    model: str | ModelSpec | None = None,
    gpu: str | GPUSpec | None = None,
    tp: int | None = None,
    catalog: Catalog | None = None,
) -> list[StepGroup]:
    """Read a step-level CSV.

    Columns (case-insensitive): a duration (``duration_s``, ``duration_ms`` or ``step_time_ms``);
    ``num_decodes`` and ``decode_ctx_sum`` (sum of the decoding requests' context lengths,
    including the new token); prefill work either as ``prefill_chunks``
    (``"tokens:cached;tokens:cached"``) or as aggregates ``prefill_tokens`` (+ ``num_prefills``,
    ``prefill_ctx_sum``: tokens already cached before the chunks; split evenly); optional
    ``batch_size`` (checked), and ``model``/``gpu``/``tp`` per row (else the arguments).
    """
    p = Path(path)
    try:
        df = pd.read_csv(p)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise CalibrationError(f"{p}: cannot read step CSV: {e}") from e
    return step_groups_from_frame(df, model=model, gpu=gpu, tp=tp, catalog=catalog, source=str(p))
