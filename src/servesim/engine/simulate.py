"""``simulate()``: run one replica over a trace and return its results (the engine's public API)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from servesim.engine.admission import admission_summary
from servesim.engine.config import EngineConfig
from servesim.engine.engine import Engine, StepLogSink
from servesim.engine.kv_connector import OffloadingConnector
from servesim.engine.kv_connector_base import KVConnector
from servesim.engine.kv_groups import KVCacheGroup, group_kinds
from servesim.engine.recorder import Recorder
from servesim.engine.request import OUTCOME_FINISHED, OUTCOME_LENGTH_CAPPED, OUTCOMES
from servesim.engine.results import (
    KV_GROUP_COLUMN,
    SLO,
    LatencyStats,
    LoRASummary,
    OffloadSummary,
    SimulationResult,
    SpeculativeSummary,
    good_mask,
    itl_stats,
    summarize,
    tokens_per_verifying_step,
)
from servesim.engine.step_time import LinearStepTime, StepTimeModel
from servesim.engine.streaming import chunk_gaps_s
from servesim.engine.trace_arrays import TraceArrays
from servesim.errors import InternalError
from servesim.events import Observer
from servesim.heap import gc_paused
from servesim.traces.schema import Trace


def describe_model(model: StepTimeModel) -> dict[str, Any]:
    """A JSON-able description of a step-time model (for reports and reproducibility)."""
    dump = getattr(model, "model_dump", None)
    if callable(dump):
        d = dump()
        if isinstance(d, dict):
            return d
    return {"kind": type(model).__name__}


def simulate(
    trace: Trace,
    config: EngineConfig | None = None,
    step_time: StepTimeModel | None = None,
    *,
    slo: SLO | None = None,
    fast: bool = True,
    step_log: StepLogSink | None = None,
    check_invariants: bool = False,
    record_token_times: bool = False,
    observers: Sequence[Observer] = (),
    kv_connector: KVConnector | None = None,
    progress: Callable[[int, int], None] | None = None,
    pooled_itl: bool = True,
) -> SimulationResult:
    """Replay ``trace`` through one vLLM V1 replica and measure it.

    ``fast=False`` runs the naive loop (every request touched every step): the reference the
    fast path is tested against. ``observers`` receive the run's typed events
    (``servesim.events``: steps, request lifecycle, progress); ``step_log`` receives each step's
    log record as a dict (``StepEvent.log_record``).
    ``check_invariants`` checks block and token conservation after every step (slow).
    ``kv_connector`` plugs vLLM's KV connector seam (``kv_connector_base.KVConnector``; e.g.
    ``kv_connector.OffloadingConnector``: a CPU tier); None, the default, is the engine without one.
    ``record_token_times`` keeps every output token's time (``SimulationResult.token_times``).
    ``progress(done, total)`` is called a few times a second from the engine's own counter
    (``run_sliced``): unlike a ``Progress`` observer it builds no event per step, so a run with a
    progress bar costs what one without does.
    ``pooled_itl=False`` leaves the pooled inter-token latency out of the summary (``itl_ms``
    then has no sample): sorting every step's duration is a fifth of a short run's CPU, and the
    tuner, which never reads it, runs thousands of them. Nothing else in the result changes.
    """
    config = config or EngineConfig()
    model = step_time or LinearStepTime()
    engine = Engine(
        trace,
        config,
        model,
        fast=fast,
        step_log=step_log,
        check_invariants=check_invariants,
        record_token_times=record_token_times,
        observers=observers,
        kv_connector=kv_connector,
    )
    if progress is None:
        engine.run()
    else:
        run_sliced(engine, progress)
    harvested = harvest(engine, trace, slo, pooled_itl=pooled_itl)
    del engine  # its trace lists and step-end times go before the ITL sort and the summary
    return finish_result(harvested, slo, describe_model(model), pooled_itl=pooled_itl)


def run_sliced(engine: Engine, progress: Callable[[int, int], None], every_s: float = 0.25) -> None:
    """``engine.run()`` in slices of simulated time, reporting ``(closed, total)`` after each.

    A slice's length adapts so that one takes about ``every_s`` of wall time. ``run_until`` stops
    only between steps (a step that starts before the limit runs whole), so the steps, and
    therefore the result, are exactly those of one ``run()``: tests compare the two documents."""
    n = engine.trace.n
    arrival = engine.trace.arrival
    span = (arrival[n - 1] - arrival[0]) if n else 0.0
    dt_sim = max(span / 1000.0, 1e-3)
    with gc_paused():
        while engine.live or engine._next < n:
            t0 = time.perf_counter()
            # An idle engine jumps to its next arrival: a slice never ends empty in a gap.
            start = engine.now if engine.live else max(engine.now, arrival[engine._next])
            engine.run_until(start + dt_sim)
            progress(engine.num_closed, n)
            wall = time.perf_counter() - t0
            dt_sim *= min(4.0, max(0.25, every_s / max(wall, 1e-4)))
    engine.finish()
    progress(engine.num_closed, n)


def build_result(
    engine: Engine, trace: Trace, slo: SLO | None, model_desc: dict[str, Any], *, pooled_itl: bool = True
) -> SimulationResult:
    """Turn a finished engine's records into a ``SimulationResult`` (``pooled_itl``: see
    ``simulate``)."""
    return finish_result(
        harvest(engine, trace, slo, pooled_itl=pooled_itl), slo, model_desc, pooled_itl=pooled_itl
    )


@dataclass
class Harvest:
    """What a result needs of a finished engine, taken before the summary is computed, so that
    ``simulate`` can drop the engine (its trace as Python lists, its step-end times, its
    scheduler: a few hundred MB for a million requests) before the per-request frame, the ITL
    sort and the summary's temporaries take their memory. The per-request frame is built in
    ``finish_result`` from the recorder's request columns and the trace's frame (the same values
    as the engine's lists of the trace hold)."""

    config: EngineConfig
    weights: np.ndarray
    gaps: np.ndarray
    step_table: np.ndarray  # the steps frame is built in finish_result, once the engine is gone
    durations: np.ndarray  # the steps' duration_s (Recorder.step_durations)
    usable_blocks: int
    spec_steps: Any
    kv_group_steps: Any
    trace: Trace
    request_columns: RequestColumns
    preemptions: pd.DataFrame
    starvation: pd.DataFrame
    prefix_queries: int
    prefix_hits: int
    max_model_len: int
    token_steps: dict[str, list[int]] | None
    speculative: SpeculativeSummary | None
    stream_itl_ms: LatencyStats | None
    gated: bool
    tier: OffloadingConnector | None
    lora_skips: Any = None  # Recorder.lora_skips (None without LoRA)
    lora: LoRASummary | None = None


def harvest(engine: Engine, trace: Trace, slo: SLO | None, *, pooled_itl: bool = True) -> Harvest:
    """The frames and figures of a finished engine (``finish_result`` makes them a result)."""
    rec = engine.rec
    if rec.rolling:
        raise RuntimeError("a rolling recorder kept the latest records only: this run has no result")
    weights, gaps = itl_samples(engine)
    preemptions = event_frame(rec.preemption_events, engine.trace)
    starvation = event_frame(rec.starvation_events, engine.trace)
    token_steps = None
    if rec.token_steps is not None:
        token_steps = {engine.trace.req_id[i]: s for i, s in rec.token_steps.items()}
    cfg = engine.config
    stream_itl = None
    if cfg.stream_interval > 1 and pooled_itl and rec.token_steps is not None:
        # a streaming client's ITL: the gaps between its chunks (streaming.py)
        codes = np.frombuffer(rec.outcome, dtype=np.int64)
        done = (codes == OUTCOME_FINISHED) | (codes == OUTCOME_LENGTH_CAPPED)
        ends = np.asarray(rec.step_end)
        gaps_s = chunk_gaps_s(rec.token_steps, ends, dict(enumerate(done)), cfg.stream_interval)
        stream_itl = LatencyStats.of(gaps_s * 1e3)
    return Harvest(
        cfg,
        weights,
        gaps,
        rec.step_table(),
        rec.step_durations(),
        engine.pool.usable_blocks,
        rec.spec_steps,
        rec.kv_group_steps,
        trace,
        request_columns(rec),
        preemptions,
        starvation,
        rec.prefix_queries,
        rec.prefix_hits,
        engine.max_model_len,
        token_steps,
        speculative_summary(engine),
        stream_itl,
        engine.gate is not None,
        engine.kv_connector.cpu_tier() if engine.kv_connector is not None else None,
        rec.lora_skips,
        lora_summary(engine),
    )


def lora_summary(engine: Engine) -> LoRASummary | None:
    """The run's adapter figures (None without LoRA): skips from the recorder, loads from the
    replica's adapter caches (None where the step time is fixed: nothing times them)."""
    cfg = engine.config
    if not cfg.enable_lora:
        return None
    skips = engine.rec.lora_skips
    loads = engine.adapters.summary() if engine.adapters is not None else {}
    return LoRASummary(
        max_loras=cfg.max_loras,
        max_cpu_loras=cfg.max_cpu_loras if cfg.max_cpu_loras is not None else cfg.max_loras,
        skipped_request_steps=int(sum(skips[1::2])) if skips is not None else 0,
        gpu_loads=loads.get("gpu_loads"),
        disk_reads=loads.get("disk_reads"),
        load_s=loads.get("load_s"),
    )


def speculative_summary(engine: Engine) -> SpeculativeSummary | None:
    """The run's drafts and acceptances (None without speculative decoding)."""
    spec = engine.config.speculative_config
    if spec is None:
        return None
    sched = engine.scheduler
    v, dr, ac = sched.spec_verifications, sched.spec_drafted, sched.spec_accepted
    return SpeculativeSummary(
        method=spec.method,
        num_speculative_tokens=spec.num_speculative_tokens,
        verifications=v,
        draft_tokens=dr,
        accepted_tokens=ac,
        acceptance_rate=ac / dr if dr else None,
        mean_acceptance_length=tokens_per_verifying_step(ac, v),
        draft_time_s=engine.draft_time_s,
        draft_timing=engine.draft_timing(),
    )


def finish_result(
    h: Harvest, slo: SLO | None, model_desc: dict[str, Any], *, pooled_itl: bool = True
) -> SimulationResult:
    """The summary and the result of a harvested engine (``pooled_itl``: see ``simulate``)."""
    cfg = h.config
    # The ITL sort first: its temporaries are gone before the per-request and steps frames take
    # their memory.
    itl = itl_stats(h.durations, h.weights, h.gaps) if pooled_itl else LatencyStats()
    requests = requests_frame_of([h.request_columns], trace_frame_columns(h.trace), h.trace, slo)
    requests["starved"] = requests["req_id"].isin(set(h.starvation["req_id"]))
    steps = steps_frame_of(
        h.step_table,
        h.durations,
        h.usable_blocks,
        h.spec_steps,
        lora_skips=h.lora_skips,
        group_steps=h.kv_group_steps,
        groups=cfg.kv_cache_groups,
    )
    summary = summarize(
        requests,
        steps,
        h.weights,
        h.gaps,
        slo,
        h.prefix_queries,
        h.prefix_hits,
        cfg.enable_prefix_caching,
        h.max_model_len,
        itl_ms=itl,
    )
    result = SimulationResult(
        cfg,
        model_desc,
        summary,
        requests,
        steps,
        h.preemptions,
        h.starvation,
        h.token_steps,
        (h.weights, h.gaps),
    )
    if h.speculative is not None:
        summary.speculative = h.speculative
    if h.lora is not None:
        summary.lora = h.lora
    if h.stream_itl_ms is not None:
        summary.itl_ms = h.stream_itl_ms
    if h.gated:
        summary.admission = admission_summary(requests, cfg.max_num_queued_reqs, cfg.max_num_queued_tokens)
    if h.tier is not None:
        summary.offload = offload_summary(
            [[h.tier]], summary.prefix_cache_hit_rate, summary.recomputed_tokens
        )
    return result


def offload_summary(
    tiers: Sequence[Sequence[OffloadingConnector]], gpu_hit_rate: float | None, recomputed_tokens: int
) -> OffloadSummary | None:
    """The CPU tiers' figures summed: ``tiers`` holds one list per replica, its connectors in the
    order its engines ran (a replica back from a failure starts a fresh, empty tier). Counters
    (tokens, jobs, evictions) add up over every connector; the CPU hit rate is their hits over
    their queries; the tier's size is each replica's (its last engine's) summed over replicas,
    and so is what it held at the end. ``gpu_hit_rate`` and ``recomputed_tokens`` come from the
    summary the figures go with. None when no tier is given."""
    conns = [c for lives in tiers for c in lives]
    if not conns:
        return None
    stats = [c.stats for c in conns]
    queried = sum(st.queried_tokens for st in stats)
    last = [lives[-1] for lives in tiers if lives]
    return OffloadSummary(
        cpu_chunks=sum(c.manager.num_chunks for c in last),
        blocks_per_chunk=last[0].bpc,
        gpu_hit_rate=gpu_hit_rate,
        cpu_hit_rate=sum(st.hit_tokens for st in stats) / queried if queried else None,
        loaded_tokens=sum(st.loaded_tokens for st in stats),
        stored_tokens=sum(st.stored_tokens for st in stats),
        recomputed_tokens=recomputed_tokens,
        load_jobs=sum(st.load_jobs for st in stats),
        store_jobs=sum(st.store_jobs for st in stats),
        store_failures=sum(st.store_failures for st in stats),
        chunks_evicted=sum(c.manager.evicted_chunks for c in conns),
        cpu_chunks_stored_at_end=sum(c.manager.num_stored() for c in last),
    )


_REQUEST_ARRAYS = (
    ("first_scheduled", np.float64),
    ("first_token", np.float64),
    ("finish", np.float64),
    ("num_output", np.int64),
    ("preemptions", np.int64),
    ("recomputed", np.int64),
    ("reused", np.int64),
    ("prefix_hit", np.int64),
    ("outcome", np.int64),
)


#: A recorder's per-request columns by name (``_REQUEST_ARRAYS``), without the recorder.
RequestColumns = dict[str, Any]

#: The trace's columns a per-request frame shows: req_id, arrival (s), prompt and output
#: lengths, priority.
TraceColumns = tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def request_columns(rec: Recorder) -> RequestColumns:
    """``rec``'s per-request columns (the arrays themselves, not copies)."""
    return {name: getattr(rec, name) for name, _ in _REQUEST_ARRAYS}


def trace_array_columns(t: TraceArrays) -> TraceColumns:
    """The frame's trace columns from the engine's lists of the trace."""
    return (
        t.req_id,
        np.asarray(t.arrival, dtype=np.float64),
        np.asarray(t.prompt_len, dtype=np.int64),
        np.asarray(t.output_len, dtype=np.int64),
        np.asarray(t.priority, dtype=np.int64),
    )


def trace_frame_columns(trace: Trace) -> TraceColumns:
    """``trace_array_columns`` from the trace's frame, the same values (``TraceArrays`` converts
    these columns alike), without the engine's lists of the trace: ``simulate`` drops them first."""
    df = trace.df
    return (
        [str(x) for x in df["req_id"].tolist()],
        df["arrival_time_s"].to_numpy(dtype=np.float64, copy=True),
        df["prompt_len"].to_numpy(dtype=np.int64, copy=True),
        df["output_len"].to_numpy(dtype=np.int64, copy=True),
        df["priority"].to_numpy(dtype=np.int64, copy=True),
    )


def requests_frame(engines: Sequence[Engine], trace: Trace, slo: SLO | None) -> pd.DataFrame:
    """One row per trace request, from the engine that closed it (a request moved off a lost
    replica is closed by the replica it ended on)."""
    return requests_frame_of(
        [request_columns(e.rec) for e in engines], trace_array_columns(engines[0].trace), trace, slo
    )


def requests_frame_of(
    engine_columns: Sequence[RequestColumns], trace_columns: TraceColumns, trace: Trace, slo: SLO | None
) -> pd.DataFrame:
    """``requests_frame`` of each engine's request columns (``request_columns``, in the engines'
    order) and the trace's (``trace_array_columns`` or ``trace_frame_columns``)."""
    cols: dict[str, np.ndarray] = {}
    closed_by = np.full(len(trace), -1, dtype=np.int64)
    for k, ec in enumerate(engine_columns):
        closed_by[np.frombuffer(ec["outcome"], dtype=np.int64) != 0] = k
    # Each engine's rows (the last engine to close a request has it), found once: merging a
    # fleet's columns then costs its rows, not its engines times the trace's rows.
    rows = [np.flatnonzero(closed_by == k) for k in range(1, len(engine_columns))]
    for name, dtype in _REQUEST_ARRAYS:
        # A view of the first engine's column (closed: never written again), or a merged copy.
        col = np.frombuffer(engine_columns[0][name], dtype=dtype)
        if rows:
            col = col.copy()
            for ec, idx in zip(engine_columns[1:], rows, strict=True):
                col[idx] = np.frombuffer(ec[name], dtype=dtype)[idx]
        cols[name] = col
    req_id, arrival, prompt_len, output_len, priority = trace_columns
    codes = cols["outcome"]
    first_tok, finish, num_output = cols["first_token"], cols["finish"], cols["num_output"]
    finished = (codes == OUTCOME_FINISHED) | (codes == OUTCOME_LENGTH_CAPPED)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(num_output > 1, (finish - first_tok) / (num_output - 1), np.nan) * 1e3
    requests = pd.DataFrame(
        {
            "req_id": pd.Series(req_id, dtype=object),
            "arrival_s": arrival,
            "first_scheduled_s": cols["first_scheduled"],
            "first_token_s": first_tok,
            "finish_s": np.where(finished, finish, np.nan),
            "prompt_len": prompt_len,
            "output_len": output_len,
            "num_output": num_output,
            "ttft_ms": (first_tok - arrival) * 1e3,
            "tpot_ms": np.where(finished, tpot, np.nan),
            "e2e_ms": np.where(finished, (finish - arrival) * 1e3, np.nan),
            "queue_ms": (cols["first_scheduled"] - arrival) * 1e3,
            "num_preemptions": cols["preemptions"],
            "recomputed_tokens": cols["recomputed"],
            "reused_tokens": cols["reused"],
            "prefix_hit_tokens": cols["prefix_hit"],
            "outcome": pd.Series(np.asarray(OUTCOMES, dtype=object)[codes], dtype=object),
        },
        copy=False,  # one block per column: no consolidated copy of a million rows
    )
    df = trace.df
    requests["good"] = good_mask(
        requests,
        slo,
        df["sla_ttft_ms"].to_numpy(dtype=np.float64),
        df["sla_e2e_ms"].to_numpy(dtype=np.float64),
    )
    requests["priority"] = priority
    requests["tenant"] = df["tenant"].astype(object).to_numpy()
    if len(engine_columns) > 1:
        requests["replica"] = closed_by
    return requests


def steps_frame(engine: Engine) -> pd.DataFrame:
    """The engine's per-step time series (plus KV usage as a fraction of its usable blocks)."""
    rec = engine.rec
    return steps_frame_of(
        rec.step_table(),
        rec.step_durations(),
        engine.pool.usable_blocks,
        rec.spec_steps,
        lora_skips=rec.lora_skips,
        step_base=rec.step_base,
        group_steps=rec.kv_group_steps,
        groups=engine.config.kv_cache_groups,
    )


def steps_frame_of(
    table: np.ndarray,
    durations: np.ndarray,
    usable_blocks: int,
    spec: Any,
    *,
    lora_skips: Any = None,
    step_base: int = 0,
    group_steps: Any = None,
    groups: Sequence[KVCacheGroup] | None = None,
) -> pd.DataFrame:
    """``steps_frame`` from the recorder's step rows (``Recorder.step_table``) and durations
    (``Recorder.step_durations``), the pool's usable blocks, the speculative counts
    (``Recorder.spec_steps``; None without drafts), the LoRA skips (``Recorder.lora_skips``; None
    without LoRA; ``step_base``: a rolling recorder's first step) and the blocks each KV cache
    group held (``Recorder.kv_group_steps`` of the model's ``groups``; None for one block
    table): what it needs of the engine, so that it can run once
    the engine is gone. A hybrid model's steps get one ``kv_usage:<kind>`` column per group kind
    (its groups' blocks / usable blocks; the kinds' columns add up to ``kv_usage``).

    The start times and counts (int32) are views of the recorder's packed rows and the
    durations of its contiguous array (what the summary sums), not copies: a million-request run
    has millions of steps."""
    steps = pd.DataFrame(
        {name: durations if name == "duration_s" else table[name] for name in Recorder.STEP_FIELDS},
        copy=False,
    )
    steps["kv_usage"] = table["kv_blocks_used"] / usable_blocks
    if spec is not None:  # speculative decoding: each step's verifications and accepted drafts
        counts = np.frombuffer(spec, dtype=np.int64).reshape(-1, 3).copy()
        steps["spec_verifications"] = counts[:, 0]
        steps["spec_accepted"] = counts[:, 1]
        steps["spec_rows"] = counts[:, 2]  # requests that ran 1 + drafts tokens (counted as chunks)
    if lora_skips:  # LoRA: requests each step left waiting for their adapter (only if any was)
        pairs = np.frombuffer(lora_skips, dtype=np.int64).reshape(-1, 2)
        skipped = np.zeros(len(steps), dtype=np.int64)
        skipped[pairs[:, 0] - step_base] = pairs[:, 1]
        steps["lora_skipped"] = skipped
    if group_steps is not None and groups:
        held = np.frombuffer(group_steps, dtype=np.intc).reshape(-1, len(groups))
        if len(held) != len(steps):
            raise InternalError(f"{len(held)} steps of KV cache group counts for {len(steps)} steps")
        for kind, ids in group_kinds(groups).items():
            steps[KV_GROUP_COLUMN + kind] = held[:, ids].sum(axis=1) / usable_blocks
    return steps


def itl_samples(engine: Engine) -> tuple[np.ndarray, np.ndarray]:
    """Pooled inter-token latencies: how many gaps each step's duration stands for, and the
    explicit gaps (across preemptions and moves), in seconds."""
    rec = engine.rec
    n_steps = len(rec.step_end)
    # A step's weight is the number of requests whose run of tokens covers it, at most the trace's
    # requests, and so is every partial sum below: int32 whenever those fit (36 MB rather than
    # 72 MB for 9 million steps, kept with the result; pooled.py narrows them to int32 anyway).
    dtype = np.int32 if engine.trace.n <= np.iinfo(np.int32).max else np.int64
    weights = np.zeros(n_steps + 1, dtype=dtype)
    if len(rec.itl_run_first):
        np.add.at(weights, np.frombuffer(rec.itl_run_first, dtype=np.int64), 1)
        np.add.at(weights, np.frombuffer(rec.itl_run_last, dtype=np.int64) + 1, -1)
    np.cumsum(weights, dtype=dtype, out=weights)  # in place: no second array of the run's step count
    return weights[:n_steps], np.frombuffer(rec.itl_gaps, dtype=np.float64).copy()


def event_frame(events: list[tuple[float, int, int, int]], t: TraceArrays) -> pd.DataFrame:
    """Preemption-style events as a table: when, which request, its priority, its context."""
    return pd.DataFrame(
        {
            "time_s": np.asarray([e[0] for e in events], dtype=np.float64),
            "step": np.asarray([e[1] for e in events], dtype=np.int64),
            "req_id": pd.Series([t.req_id[e[2]] for e in events], dtype=object),
            "priority": np.asarray([t.priority[e[2]] for e in events], dtype=np.int64),
            "lost_tokens": np.asarray([e[3] for e in events], dtype=np.int64),
        }
    )
