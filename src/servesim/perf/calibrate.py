"""Calibration: fit a ``HardwareProfile``'s efficiency factors and overheads to measurements.

Two kinds of measurements:

* **Step timings** (``calibrate_steps``): one row per engine step with its batch composition and
  duration (``read_step_csv``). The roofline model is evaluated directly; the fit minimises
  relative (log) errors.
* **Workload results** (``calibrate_workloads``): latency statistics of whole benchmark runs,
  e.g. the JSON ``vllm bench serve --save-result`` writes (``read_bench_result``) or the
  sim2real experiments. Each evaluation re-simulates every run's workload with the candidate
  profile (client closed loops, async-scheduling lag and front-end latency included, see
  ``servesim.perf.replay``) and compares its mean TTFT/TPOT/ITL/E2E with the measured ones.

Both report the fit's error before and after, each coefficient's approximate relative
standard error, and which coefficients the data could not determine (they stay at their
starting values, pulled there by a weak prior). The fitted profile records the range the data
covered (``FittedRange``); using it far outside warns (``ExtrapolationWarning``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from servesim.engine import EngineConfig
from servesim.engine.step_time import BatchComposition
from servesim.perf.catalog import Catalog, GPUSpec, ModelSpec, load_catalog, resolve_gpu, resolve_model
from servesim.perf.errors import CalibrationError, PerfError
from servesim.perf.fit import LMResult, levenberg_marquardt
from servesim.perf.memory import kv_capacity, weight_bytes_per_gpu
from servesim.perf.profile import FIT_BOUNDS, FittedRange, HardwareProfile
from servesim.perf.replay import ReplayOutcome, RequestSet, replay, summarize_latencies
from servesim.perf.roofline import RooflineStepTime


class ErrorStats(BaseModel):
    """Relative errors of predictions against measurements (percent)."""

    n: int
    mape: float = Field(description="Mean absolute percentage error.")
    median_ape: float
    p90_ape: float
    max_ape: float
    rms_log_error: float = Field(description="Root mean square of ln(predicted / measured).")

    @classmethod
    def of(cls, predicted: np.ndarray, measured: np.ndarray) -> ErrorStats:
        p = np.asarray(predicted, dtype=np.float64)
        m = np.asarray(measured, dtype=np.float64)
        ok = np.isfinite(p) & np.isfinite(m) & (m != 0)
        if not np.any(ok):
            return cls(
                n=0,
                mape=math.nan,
                median_ape=math.nan,
                p90_ape=math.nan,
                max_ape=math.nan,
                rms_log_error=math.nan,
            )
        ape = 100.0 * np.abs(p[ok] - m[ok]) / np.abs(m[ok])
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.log(p[ok] / m[ok])
        lr = lr[np.isfinite(lr)]
        return cls(
            n=int(ok.sum()),
            mape=float(ape.mean()),
            median_ape=float(np.median(ape)),
            p90_ape=float(np.percentile(ape, 90)),
            max_ape=float(ape.max()),
            rms_log_error=float(np.sqrt(np.mean(lr**2))) if lr.size else math.nan,
        )


class FittedParameter(BaseModel):
    name: str
    start: float
    value: float
    relative_std_error: float | None = Field(description="Approximate 1-sigma relative uncertainty.")
    determined: bool = Field(description="False when the data barely constrain it (it stays near its start).")


class CalibrationReport(BaseModel):
    """What a calibration fitted, how well, and the resulting profile."""

    kind: str = Field(description="'steps' or 'workloads'.")
    profile: HardwareProfile
    parameters: list[FittedParameter]
    before: ErrorStats
    after: ErrorStats
    per_group: dict[str, ErrorStats] = Field(default_factory=dict)
    iterations: int
    evaluations: int
    converged: bool
    message: str
    notes: list[str] = Field(default_factory=list)
    predictions: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="Workload fits: each case's predicted metrics (ms) with the fitted profile.",
    )
    jacobian: dict[str, list[list[float]]] = Field(
        default_factory=dict,
        description="Workload fits: each case's rows of d residual / d ln(coefficient) near the optimum.",
    )


def _bounds(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    lo = np.log([FIT_BOUNDS[n][0] for n in names])
    hi = np.log([FIT_BOUNDS[n][1] for n in names])
    return lo, hi


def _check_fit_names(names: Iterable[str]) -> list[str]:
    out = list(dict.fromkeys(names))
    unknown = [n for n in out if n not in FIT_BOUNDS]
    if unknown:
        raise CalibrationError(f"cannot fit {unknown}: calibratable coefficients are {sorted(FIT_BOUNDS)}")
    if not out:
        raise CalibrationError("nothing to fit: give at least one coefficient")
    return out


def _parameters(names: list[str], start: HardwareProfile, res: LMResult) -> list[FittedParameter]:
    rse = res.relative_std_errors()
    jn = np.linalg.norm(res.jacobian, axis=0) if res.jacobian.size else np.zeros(len(names))
    scale = float(np.max(jn)) if jn.size else 0.0
    out = []
    for k, n in enumerate(names):
        se = float(rse[k]) if np.isfinite(rse[k]) else None
        determined = bool(scale > 0 and jn[k] > 1e-3 * scale and (se is None or se < 0.5))
        out.append(
            FittedParameter(
                name=n,
                start=float(getattr(start, n)),
                value=float(math.exp(res.x[k])),
                relative_std_error=se,
                determined=determined,
            )
        )
    return out


# ====================================================================== step-level calibration
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
            f"{where}: prefill_chunks {s!r} must be 'tokens:cached;tokens:cached' or a JSON list of pairs"
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


def default_step_fit(groups: Sequence[StepGroup]) -> tuple[list[str], list[str]]:
    """The coefficients the step data can determine, and notes on those left out."""
    notes: list[str] = []
    names: list[str] = []
    has_prefill = any(b.prefill_chunks for g in groups for b in g.batches)
    has_decode_only = any(not b.prefill_chunks for g in groups for b in g.batches)
    has_ctx = any(b.decode_ctx_sum > 0 for g in groups for b in g.batches)
    weights = {round(weight_bytes_per_gpu(g.model, g.tp)) for g in groups}
    layers = {g.model.num_layers for g in groups}
    if has_prefill:
        names += ["gemm_compute_efficiency", "attention_compute_efficiency"]
    else:
        notes.append("no prefill steps: compute efficiencies are not fitted")
    if len(weights) > 1:
        names.append("gemm_bandwidth_efficiency")
    else:
        notes.append(
            "one weight size (one model and TP degree): weight-streaming time and the fixed step overhead "
            "cannot be told apart, so gemm_bandwidth_efficiency keeps its start value"
        )
    if has_ctx:
        names.append("attention_bandwidth_efficiency")
    names += ["step_overhead_s", "per_sequence_overhead_s"]
    if len(layers) > 1:
        names.append("per_layer_overhead_s")
    if has_prefill and has_decode_only:
        names.append("mixed_step_overhead_s")
    if any(g.tp > 1 for g in groups):
        names.append("allreduce_latency_s")
    return names, notes


def step_fitted_range(groups: Sequence[StepGroup]) -> FittedRange:
    toks = [b.num_tokens for g in groups for b in g.batches]
    ctx = [b.decode_ctx_sum / b.num_decodes for g in groups for b in g.batches if b.num_decodes]
    w = [weight_bytes_per_gpu(g.model, g.tp) for g in groups]
    gpus = {g.gpu.name for g in groups}
    return FittedRange(
        gpu=gpus.pop() if len(gpus) == 1 else None,
        tp=sorted({g.tp for g in groups}),
        models=sorted({g.model.name for g in groups}),
        weight_bytes_per_gpu=(float(min(w)), float(max(w))),
        tokens_per_step=(float(min(toks)), float(max(toks))),
        decode_ctx_per_seq=(float(min(ctx)), float(max(ctx))) if ctx else None,
    )


def calibrate_steps(
    groups: Sequence[StepGroup],
    *,
    base: HardwareProfile | None = None,
    fit: Sequence[str] | None = None,
    prior_weight: float = 1e-3,
    max_iter: int = 100,
    name: str | None = None,
) -> CalibrationReport:
    """Fit ``fit`` coefficients (default: what the data determine) to measured step durations."""
    if not groups or not any(len(g.batches) for g in groups):
        raise CalibrationError("no step measurements to fit")
    base = base or HardwareProfile()
    notes: list[str] = []
    if fit is None:
        names, notes = default_step_fit(groups)
    else:
        names = _check_fit_names(fit)
    n_rows = sum(len(g.batches) for g in groups)
    if n_rows < len(names) + 1:
        raise CalibrationError(
            f"{n_rows} steps cannot determine {len(names)} coefficients; measure more steps"
        )
    measured = np.concatenate([g.durations for g in groups])

    def profile_at(x: np.ndarray) -> HardwareProfile:
        return base.with_coefficients({n: float(math.exp(v)) for n, v in zip(names, x, strict=True)})

    def predict(prof: HardwareProfile) -> np.ndarray:
        return np.concatenate([g.predict(prof) for g in groups])

    def residuals(x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.log(predict(profile_at(x)) / measured)
        return out

    x0 = np.log([getattr(base, n) for n in names])
    lo, hi = _bounds(names)
    before = ErrorStats.of(predict(base), measured)
    res = levenberg_marquardt(residuals, x0, lower=lo, upper=hi, prior_weight=prior_weight, max_iter=max_iter)
    fitted = profile_at(res.x)
    pred = predict(fitted)
    per_group: dict[str, ErrorStats] = {}
    k = 0
    for g in groups:
        n = len(g.batches)
        per_group[g.key] = ErrorStats.of(pred[k : k + n], measured[k : k + n])
        k += n
    after = ErrorStats.of(pred, measured)
    rng = step_fitted_range(groups)
    fitted = fitted.model_copy(
        update={
            "name": name or f"calibrated-{rng.gpu or 'mixed'}",
            "gpu": rng.gpu,
            "fitted_range": rng,
            "calibration": {
                "method": "step-level least squares on ln(predicted/measured)",
                "fitted": names,
                "rows": n_rows,
                "mape_after": after.mape,
            },
        }
    )
    return CalibrationReport(
        kind="steps",
        profile=fitted,
        parameters=_parameters(names, base, res),
        before=before,
        after=after,
        per_group=per_group,
        iterations=res.iterations,
        evaluations=res.evaluations,
        converged=res.converged,
        message=res.message,
        notes=notes,
    )


def synthetic_steps(
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int,
    profile: HardwareProfile,
    *,
    n: int = 400,
    seed: int = 0,
    noise: float = 0.0,
    max_num_batched_tokens: int = 2048,
    max_num_seqs: int = 128,
) -> StepGroup:
    """Steps generated by the roofline model itself (for testing that calibration recovers it).

    Batches mix decode-only steps (1..max_num_seqs decodes, contexts 16..8192) and steps with
    1-3 prefill chunks (with or without cached context), up to the token budget.
    """
    rng = np.random.default_rng(seed)
    st = RooflineStepTime(
        model, gpu, tp, profile, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens
    )
    batches: list[BatchComposition] = []
    for _ in range(n):
        nd = int(rng.integers(0, max_num_seqs + 1))
        ctx = int(nd * rng.uniform(16, 8192)) if nd else 0
        chunks: list[tuple[int, int]] = []
        if rng.random() < 0.5 or nd == 0:
            budget = max_num_batched_tokens - nd
            for _ in range(int(rng.integers(1, 4))):
                if budget <= 1:
                    break
                c = int(rng.integers(2, max(3, budget // 2 + 1)))
                p = int(rng.integers(0, 6000)) if rng.random() < 0.5 else 0
                chunks.append((c, p))
                budget -= c
        if nd == 0 and not chunks:
            nd, ctx = 1, 100
        batches.append(BatchComposition(nd, max(ctx, nd), chunks))
    dur = np.array([st.step_time(b) for b in batches])
    if noise:
        dur = dur * np.exp(rng.normal(0.0, noise, len(dur)))
    return StepGroup(model, gpu, tp, batches, dur, max_num_seqs, max_num_batched_tokens)


def write_step_csv(groups: Sequence[StepGroup], path: str | Path) -> Path:
    """Write step groups in ``read_step_csv``'s format (with model, gpu, tp and chunk columns)."""
    rows = []
    for g in groups:
        for b, d in zip(g.batches, g.durations, strict=True):
            rows.append(
                {
                    "model": g.model.name,
                    "gpu": g.gpu.name,
                    "tp": g.tp,
                    "num_decodes": b.num_decodes,
                    "decode_ctx_sum": b.decode_ctx_sum,
                    "prefill_chunks": ";".join(f"{c}:{p}" for c, p in b.prefill_chunks),
                    "batch_size": b.num_decodes + len(b.prefill_chunks),
                    "duration_ms": d * 1e3,
                }
            )
    p = Path(path)
    pd.DataFrame(rows).to_csv(p, index=False)
    return p


# ====================================================================== workload-level calibration
@dataclass
class WorkloadCase:
    """One measured benchmark run: its workload, server settings and measured metrics (ms).

    ``targets`` keys are ``metric`` or ``stage:metric`` (stage = index in ``requests.stage``),
    metrics as ``summarize_latencies`` names them (``ttft_mean``, ``tpot_mean``, ``itl_mean``,
    ``itl_pooled_mean``, ``e2e_mean``, ...). ``counted_output_tokens`` (keys ``"-1"`` for the
    whole run, else the stage) is the client's mean output count where it is not what the engine
    generated (``summarize_latencies``).
    """

    name: str
    requests: RequestSet
    config: EngineConfig
    model: ModelSpec
    gpu: GPUSpec
    tp: int
    targets: dict[str, float]
    weight: float = 1.0
    max_rounds: int = 12
    info: dict[str, Any] = field(default_factory=dict)
    counted_output_tokens: dict[str, float] = field(default_factory=dict)

    def step_model(self, profile: HardwareProfile) -> RooflineStepTime:
        return RooflineStepTime(
            self.model,
            self.gpu,
            self.tp,
            profile,
            max_num_seqs=self.config.max_num_seqs,
            max_num_batched_tokens=self.config.max_num_batched_tokens,
        )

    def run(self, profile: HardwareProfile, warm: np.ndarray | None = None) -> ReplayOutcome:
        return replay(
            self.requests,
            self.config,
            self.step_model(profile),
            profile,
            max_rounds=self.max_rounds,
            initial_duration=warm,
        )

    def metrics(self, out: ReplayOutcome) -> dict[str, float]:
        res: dict[str, float] = {}
        stages = {k.split(":", 1)[0] for k in self.targets if ":" in k}
        counted = self.counted_output_tokens
        base = summarize_latencies(out, counted_output_tokens=counted.get("-1"))
        for k in self.targets:
            if ":" not in k and k in base:
                res[k] = base[k]
        for s in stages:
            assert self.requests.stage is not None, f"{self.name}: stage targets need requests.stage"
            sm = summarize_latencies(out, self.requests.stage == int(s), counted_output_tokens=counted.get(s))
            for k in self.targets:
                st, _, metric = k.partition(":")
                if st == s and metric in sm:
                    res[k] = sm[metric]
        return res


def _evaluate_case(
    args: tuple[WorkloadCase, HardwareProfile, np.ndarray | None],
) -> tuple[dict[str, float], np.ndarray]:
    case, profile, warm = args
    out = case.run(profile, warm)
    return case.metrics(out), out.e2e


class _Evaluator:
    """Evaluates all cases for a profile. Closed-loop cases start from ``warm`` (client-side
    latencies of an earlier replay), which saves most fixed-point rounds."""

    def __init__(self, cases: Sequence[WorkloadCase], workers: int = 1) -> None:
        self.cases = list(cases)
        self.warm: list[np.ndarray | None] = [None] * len(self.cases)
        self._pool: Any = None
        if workers > 1 and len(self.cases) > 1:
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(max_workers=min(workers, len(self.cases)))

    def __call__(self, profile: HardwareProfile) -> tuple[list[dict[str, float]], list[np.ndarray | None]]:
        jobs = [(c, profile, w) for c, w in zip(self.cases, self.warm, strict=True)]
        results = (
            list(self._pool.map(_evaluate_case, jobs)) if self._pool else [_evaluate_case(j) for j in jobs]
        )
        closed = [
            c.requests.predecessor is not None or c.requests.max_concurrency is not None for c in self.cases
        ]
        durations = [e2e if cl else None for cl, (_, e2e) in zip(closed, results, strict=True)]
        return [m for m, _ in results], durations

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


MISSING_PENALTY = math.log(10.0)


def soft_l1(r: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Residuals ``g(r)`` whose squares sum to the soft-L1 loss ``2 s^2 (sqrt(1 + (r/s)^2) - 1)``,
    and ``dg/dr``. Quadratic for ``|r| << s``, linear beyond: one badly predicted run cannot
    dominate the fit."""
    u = np.sqrt(1.0 + (r / scale) ** 2)
    g = np.sign(r) * scale * np.sqrt(2.0 * (u - 1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(np.abs(r) > 1e-12 * scale, r / (u * g), 1.0)
    return g, d


def cauchy(r: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Residuals whose squares sum to the Cauchy loss ``s^2 ln(1 + (r/s)^2)``, and ``dg/dr``.
    Quadratic for ``|r| << s``; beyond, a residual's pull on the fit falls off (it redescends), so
    a run no setting of the coefficients can explain is effectively left out rather than
    dragging every other run towards it."""
    z = 1.0 + (r / scale) ** 2
    g = np.sign(r) * scale * np.sqrt(np.log(z))
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(np.abs(r) > 1e-12 * scale, r / (z * g), 1.0)
    return g, d


LOSSES = {"soft_l1": soft_l1, "cauchy": cauchy}


def workload_residuals(cases: Sequence[WorkloadCase], preds: Sequence[Mapping[str, float]]) -> np.ndarray:
    """``weight / sqrt(n targets) x ln(predicted / measured)`` per case and target."""
    out: list[float] = []
    for c, p in zip(cases, preds, strict=True):
        w = c.weight / math.sqrt(max(len(c.targets), 1))
        for k in sorted(c.targets):
            v = p.get(k)
            t = c.targets[k]
            if v is None or not math.isfinite(v) or v <= 0:
                out.append(w * MISSING_PENALTY)
            else:
                out.append(w * math.log(v / t))
    return np.asarray(out, dtype=np.float64)


DEFAULT_WORKLOAD_FIT = [
    "gemm_bandwidth_efficiency",
    "gemm_compute_efficiency",
    "step_overhead_s",
    "frontend_latency_s",
]


def workload_fitted_range(cases: Sequence[WorkloadCase]) -> FittedRange:
    w = [weight_bytes_per_gpu(c.model, c.tp) for c in cases]
    gpus = {c.gpu.name for c in cases}
    rates = []
    for c in cases:
        sched = c.requests.scheduled
        if len(sched) > 1 and sched[-1] > sched[0]:
            rates.append((len(sched) - 1) / (sched[-1] - sched[0]))
    return FittedRange(
        gpu=gpus.pop() if len(gpus) == 1 else None,
        tp=sorted({c.tp for c in cases}),
        models=sorted({c.model.name for c in cases}),
        weight_bytes_per_gpu=(float(min(w)), float(max(w))),
        tokens_per_step=(1.0, float(max(c.config.max_num_batched_tokens for c in cases))),
        requests_per_second=(float(min(rates)), float(max(rates))) if rates else None,
    )


def calibrate_workloads(
    cases: Sequence[WorkloadCase],
    *,
    base: HardwareProfile | None = None,
    fit: Sequence[str] | None = None,
    prior_weight: float = 0.05,
    diff_step: float = 0.05,
    max_iter: int = 15,
    workers: int = 1,
    name: str | None = None,
    progress: Callable[[str], None] | None = None,
    start: HardwareProfile | None = None,
    frozen_jacobian: Mapping[str, np.ndarray] | None = None,
    loss: str = "soft_l1",
    loss_scale: float = 0.1,
    ftol: float = 1e-4,
) -> CalibrationReport:
    """Fit coefficients so that re-simulating each case reproduces its measured metrics.

    The prior is centred on ``base``; the search starts at ``start`` (default ``base``).
    ``frozen_jacobian`` (case name -> its rows of d residual / d ln coefficient, e.g. from a
    fit on a superset of the cases, see ``CalibrationReport.jacobian``) replaces the
    finite-difference Jacobian: each iteration then costs one re-simulation instead of one per
    coefficient. The optimum still uses only these cases' residuals. Each accepted step updates
    that Jacobian along the step it took (Broyden's rank-one update, no extra re-simulation), so
    a coefficient that moves far from where the Jacobian was taken (an efficiency halves, the
    time it governs doubles) is steered by its real sensitivity, not the one at the start.

    ``loss="soft_l1"`` (default) makes errors beyond ``loss_scale`` (in ln units, ~10 %) count
    linearly rather than quadratically, so a run the model cannot explain does not drag the
    others; ``"cauchy"`` goes further (an outlier's pull falls off); ``"linear"`` is plain
    least squares.
    """
    if not cases:
        raise CalibrationError("no workload measurements to fit")
    base = base or HardwareProfile()
    names = _check_fit_names(fit if fit is not None else DEFAULT_WORKLOAD_FIT)
    n_targets = sum(len(c.targets) for c in cases)
    if n_targets < len(names):
        raise CalibrationError(
            f"{n_targets} measured metrics cannot determine {len(names)} coefficients ({', '.join(names)}); "
            "fit fewer (--fit) or add runs"
        )
    jac_fixed: np.ndarray | None = None
    if frozen_jacobian is not None:
        missing = [c.name for c in cases if c.name not in frozen_jacobian]
        if missing:
            raise CalibrationError(f"frozen_jacobian lacks the cases {missing}")
        jac_fixed = np.vstack([np.asarray(frozen_jacobian[c.name]) for c in cases])
        if jac_fixed.shape != (n_targets, len(names)):
            raise CalibrationError(
                f"frozen_jacobian has shape {jac_fixed.shape}, expected {(n_targets, len(names))}"
            )
    if loss != "linear" and loss not in LOSSES:
        raise CalibrationError(f"unknown loss {loss!r}: use linear, soft_l1 or cauchy")
    ev = _Evaluator(cases, workers)
    count = 0
    raw_at: dict[bytes, np.ndarray] = {}

    def profile_at(x: np.ndarray) -> HardwareProfile:
        return base.with_coefficients({n: float(math.exp(v)) for n, v in zip(names, x, strict=True)})

    def raw(x: np.ndarray) -> np.ndarray:
        """Residuals at x; the last point's are cached (the LM asks for its Jacobian next)."""
        key = x.tobytes()
        if key in raw_at:
            return raw_at[key]
        r = evaluate(x)
        raw_at.clear()
        raw_at[key] = r
        return r

    def evaluate(x: np.ndarray) -> np.ndarray:
        nonlocal count
        count += 1
        preds, _ = ev(profile_at(x))
        r = workload_residuals(cases, preds)
        if progress is not None:
            progress(f"evaluation {count}: rms log error {math.sqrt(float(np.mean(r**2))):.4f}")
        return r

    def robust(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if loss == "linear":
            return r, np.ones_like(r)
        return LOSSES[loss](r, loss_scale)

    def residuals(x: np.ndarray) -> np.ndarray:
        return robust(raw(x))[0]

    last_jac: list[np.ndarray] = []
    last_point: list[tuple[np.ndarray, np.ndarray]] = []

    def jacobian(x: np.ndarray, _r: np.ndarray) -> np.ndarray:
        nonlocal jac_fixed
        r0_ = raw(x)
        if jac_fixed is not None:
            if last_point:
                # Broyden: make the Jacobian exact along the step just taken.
                x_prev, r_prev = last_point[0]
                dx = x - x_prev
                dd = float(dx @ dx)
                if dd > 0:
                    jac_fixed = jac_fixed + np.outer(r0_ - r_prev - jac_fixed @ dx, dx) / dd
            last_point[:] = [(x.copy(), r0_.copy())]
            j_raw = jac_fixed
        else:
            cols = []
            for k in range(len(names)):
                step = diff_step if x[k] + diff_step <= hi[k] else -diff_step
                xk = x.copy()
                xk[k] += step
                cols.append((evaluate(xk) - r0_) / step)
            j_raw = np.column_stack(cols)
        last_jac[:] = [j_raw]
        weighted: np.ndarray = robust(r0_)[1][:, None] * j_raw
        return weighted

    x_center = np.log([getattr(base, n) for n in names])
    x_start = np.log([getattr(start or base, n) for n in names])
    lo, hi = _bounds(names)
    try:
        # Closed-loop cases start every evaluation from the base profile's fixed point, so that
        # the objective is a deterministic function of the coefficients.
        pred0, ev.warm = ev(base)
        r0 = workload_residuals(cases, pred0)
        res = levenberg_marquardt(
            residuals,
            x_start,
            lower=lo,
            upper=hi,
            prior_weight=prior_weight,
            prior_center=x_center,
            max_iter=max_iter,
            ftol=ftol,
            jacobian=jacobian,
        )
        fitted = profile_at(res.x)
        pred1, _ = ev(fitted)
    finally:
        ev.close()
    j_final = last_jac[0] if last_jac else np.zeros((n_targets, len(names)))
    keys = [(i, k) for i, c in enumerate(cases) for k in sorted(c.targets)]
    meas = np.array([cases[i].targets[k] for i, k in keys])

    def flat(preds: Sequence[Mapping[str, float]]) -> np.ndarray:
        return np.array([preds[i].get(k, math.nan) for i, k in keys])

    per_case = {
        c.name: ErrorStats.of(
            np.array([pred1[i].get(k, math.nan) for k in sorted(c.targets)]),
            np.array([c.targets[k] for k in sorted(c.targets)]),
        )
        for i, c in enumerate(cases)
    }
    blocks: dict[str, list[list[float]]] = {}
    row = 0
    for c in cases:
        n = len(c.targets)
        blocks[c.name] = j_final[row : row + n].tolist()
        row += n
    after = ErrorStats.of(flat(pred1), meas)
    rng = workload_fitted_range(cases)
    fitted = fitted.model_copy(
        update={
            "name": name or f"calibrated-{rng.gpu or 'mixed'}",
            "gpu": rng.gpu,
            "fitted_range": rng,
            "calibration": {
                "method": f"workload re-simulation, {loss} loss on ln(predicted/measured)",
                "fitted": names,
                "cases": [c.name for c in cases],
                "targets": n_targets,
                "mape_after": after.mape,
                "rms_log_error_before": float(np.sqrt(np.mean(r0**2))),
            },
        }
    )
    return CalibrationReport(
        kind="workloads",
        profile=fitted,
        parameters=_parameters(names, base, res),
        before=ErrorStats.of(flat(pred0), meas),
        after=after,
        per_group=per_case,
        iterations=res.iterations,
        evaluations=count + 2,
        converged=res.converged,
        message=res.message,
        predictions={c.name: pred1[i] for i, c in enumerate(cases)},
        jacobian=blocks,
    )


def workload_jacobian(
    cases: Sequence[WorkloadCase],
    profile: HardwareProfile,
    fit: Sequence[str],
    *,
    diff_step: float = 0.05,
    workers: int = 1,
    progress: Callable[[str], None] | None = None,
) -> dict[str, np.ndarray]:
    """Each case's rows of d ln(predicted/measured) / d ln(coefficient) at ``profile``
    (forward differences). Depends on the model and the profile only, not on how well the
    targets are met, so it can serve as a chord-method Jacobian for fits on subsets."""
    names = _check_fit_names(fit)
    ev = _Evaluator(cases, workers)
    try:
        p0, ev.warm = ev(profile)
        r0 = workload_residuals(cases, p0)
        cols = []
        for k, n in enumerate(names):
            v = float(getattr(profile, n))
            hi = FIT_BOUNDS[n][1]
            step = diff_step if v * math.exp(diff_step) <= hi else -diff_step
            pk, _ = ev(profile.with_coefficients({n: v * math.exp(step)}))
            cols.append((workload_residuals(cases, pk) - r0) / step)
            if progress is not None:
                progress(f"jacobian column {k + 1}/{len(names)} ({n})")
    finally:
        ev.close()
    j = np.column_stack(cols)
    out: dict[str, np.ndarray] = {}
    row = 0
    for c in cases:
        n_t = len(c.targets)
        out[c.name] = j[row : row + n_t]  # a case's residual rows (its weight included) do not
        row += n_t  # depend on the other cases, so subsets can stack them
    return out


def predict_workloads(
    cases: Sequence[WorkloadCase], profile: HardwareProfile, workers: int = 1
) -> list[dict[str, float]]:
    ev = _Evaluator(cases, workers)
    try:
        return ev(profile)[0]
    finally:
        ev.close()


# ====================================================================== vllm bench serve results
BENCH_TARGETS = {
    "mean_ttft_ms": "ttft_mean",
    "mean_tpot_ms": "tpot_mean",
    "mean_itl_ms": "itl_pooled_mean",
    "mean_e2el_ms": "e2e_mean",
}


def bench_arrivals(n: int, rate: float, burstiness: float, seed: int, rescale: bool = True) -> np.ndarray:
    """``vllm bench serve`` send times: gamma gaps (shape ``burstiness``, mean ``1/rate``) from t=0;
    with ``rescale`` the last request is sent at exactly ``n / rate`` (vLLM >= 0.3x behaviour).
    ``rate`` inf sends everything at t=0."""
    if n <= 0:
        return np.zeros(0)
    if not math.isfinite(rate):
        return np.zeros(n)
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    gaps[0] = 0.0
    t = np.cumsum(gaps)
    if rescale and t[-1] > 0:
        t *= (n / rate) / t[-1]
    return t


def read_bench_result(
    path: str | Path,
    *,
    model: str | ModelSpec,
    gpu: str | GPUSpec,
    tp: int = 1,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 2048,
    num_gpu_blocks: int | None = None,
    gpu_memory_utilization: float = 0.9,
    seed: int = 0,
    rescale_arrivals: bool = True,
    catalog: Catalog | None = None,
) -> WorkloadCase:
    """A ``WorkloadCase`` from a ``vllm bench serve --save-result`` JSON file.

    The workload is re-created from the file: ``num_prompts`` requests (``completed`` if the
    count of prompts is missing), arrivals from ``request_rate``/``burstiness`` (seeded; the
    file does not record send times), ``max_concurrency`` as a client-side limit, per-request
    ``input_lens``/``output_lens`` when the file has them (``--save-detailed``) or else the mean
    lengths from ``total_input_tokens``/``total_output_tokens``. No prefix sharing (vllm bench's
    random dataset). Targets are the file's mean TTFT, TPOT, ITL and E2E latency.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CalibrationError(f"{p}: cannot read benchmark result: {e}") from e
    if not isinstance(data, dict):
        raise CalibrationError(f"{p}: a vllm bench result is a JSON object")
    cat = catalog or load_catalog()
    ms = resolve_model(model, cat)
    gs = resolve_gpu(gpu, cat)
    completed = data.get("completed")
    n = int(data.get("num_prompts") or completed or 0)
    if n <= 0:
        raise CalibrationError(f"{p}: no num_prompts / completed count")
    rate_raw = data.get("request_rate", "inf")
    rate = math.inf if str(rate_raw).lower() in ("inf", "infinity", "none") else float(rate_raw)
    burst = float(data.get("burstiness") or 1.0)
    conc = data.get("max_concurrency")
    ins = data.get("input_lens")
    outs = data.get("output_lens")
    if isinstance(ins, list) and isinstance(outs, list) and len(ins) == len(outs) and ins:
        prompt = np.asarray(ins, dtype=np.int64)
        output = np.maximum(np.asarray(outs, dtype=np.int64), 1)
        n = len(prompt)
    else:
        done = int(completed or n)
        tin, tout = data.get("total_input_tokens"), data.get("total_output_tokens")
        if not tin or not tout or done <= 0:
            raise CalibrationError(
                f"{p}: needs input_lens/output_lens (--save-detailed) or "
                "total_input_tokens/total_output_tokens"
            )
        prompt = np.full(n, max(1, round(float(tin) / done)), dtype=np.int64)
        output = np.full(n, max(1, round(float(tout) / done)), dtype=np.int64)
    targets = {
        ours: float(data[theirs])
        for theirs, ours in BENCH_TARGETS.items()
        if isinstance(data.get(theirs), int | float) and float(data[theirs]) > 0
    }
    if not targets:
        raise CalibrationError(f"{p}: no latency means ({', '.join(BENCH_TARGETS)}) to fit")
    rs = RequestSet(
        scheduled=bench_arrivals(n, rate, burst, seed, rescale_arrivals),
        prompt_len=prompt,
        output_len=output,
        prefix_group=[None] * n,
        prefix_len=np.zeros(n, dtype=np.int64),
        max_concurrency=int(conc) if conc else None,
        label=f"vllm bench {p.name}",
    )
    longest = int(prompt.max() + output.max() + 1)
    if num_gpu_blocks is None:
        num_gpu_blocks = kv_capacity(
            ms,
            gs,
            tp,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=longest,
        ).num_gpu_blocks
    try:
        config = EngineConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            num_gpu_blocks=num_gpu_blocks,
        )
    except ValueError as e:
        raise PerfError(f"{p}: engine settings: {e}") from e
    return WorkloadCase(
        name=p.stem,
        requests=rs,
        config=config,
        model=ms,
        gpu=gs,
        tp=tp,
        targets=targets,
        info={"request_rate": rate, "burstiness": burst, "max_concurrency": conc, "num_prompts": n},
    )


def write_bench_result(
    case: WorkloadCase, metrics: Mapping[str, float], path: str | Path, *, detailed: bool = True
) -> Path:
    """Write ``metrics`` (ours) as a ``vllm bench serve`` result JSON (for round-trip tests)."""
    rs = case.requests
    n = len(rs)
    rate = case.info.get("request_rate", math.inf)
    data: dict[str, Any] = {
        "date": "synthetic",
        "backend": "vllm",
        "model_id": case.model.hf_id or case.model.name,
        "num_prompts": n,
        "request_rate": "inf" if not math.isfinite(rate) else rate,
        "burstiness": case.info.get("burstiness", 1.0),
        "max_concurrency": rs.max_concurrency,
        "completed": n,
        "total_input_tokens": int(rs.prompt_len.sum()),
        "total_output_tokens": int(rs.output_len.sum()),
    }
    for theirs, ours in BENCH_TARGETS.items():
        if ours in metrics:
            data[theirs] = float(metrics[ours])
    if detailed:
        data["input_lens"] = [int(x) for x in rs.prompt_len]
        data["output_lens"] = [int(x) for x in rs.output_len]
    p = Path(path)
    p.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return p
