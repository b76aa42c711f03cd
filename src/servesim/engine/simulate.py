"""``simulate()``: run one replica over a trace and return its results (the engine's public API)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from servesim.engine.config import EngineConfig
from servesim.engine.engine import Engine, ProgressHook, Recorder, StepLogSink, TraceArrays
from servesim.engine.request import OUTCOME_FINISHED, OUTCOME_LENGTH_CAPPED, OUTCOMES
from servesim.engine.results import SLO, SimulationResult, good_mask, summarize
from servesim.engine.step_time import LinearStepTime, StepTimeModel
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
    progress: ProgressHook | None = None,
) -> SimulationResult:
    """Replay ``trace`` through one vLLM V1 replica and measure it.

    ``fast=False`` runs the naive loop (every request touched every step): the reference the
    fast path is tested against. ``step_log`` receives one dict per engine step.
    ``check_invariants`` checks block and token conservation after every step (slow).
    ``record_token_times`` keeps every output token's time (``SimulationResult.token_times``).
    ``progress(done, total)`` is called every few thousand steps and at the end.
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
        progress=progress,
    )
    engine.run()
    return build_result(engine, trace, slo, describe_model(model))


def build_result(
    engine: Engine, trace: Trace, slo: SLO | None, model_desc: dict[str, Any]
) -> SimulationResult:
    rec = engine.rec
    t = engine.trace
    arrival = np.asarray(t.arrival, dtype=np.float64)
    first_sched = np.frombuffer(rec.first_scheduled, dtype=np.float64)
    first_tok = np.frombuffer(rec.first_token, dtype=np.float64)
    finish = np.frombuffer(rec.finish, dtype=np.float64)
    num_output = np.frombuffer(rec.num_output, dtype=np.int64)
    codes = np.frombuffer(rec.outcome, dtype=np.int64)
    outcome = np.asarray(OUTCOMES, dtype=object)[codes]
    finished = (codes == OUTCOME_FINISHED) | (codes == OUTCOME_LENGTH_CAPPED)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(num_output > 1, (finish - first_tok) / (num_output - 1), np.nan) * 1e3
    requests = pd.DataFrame(
        {
            "req_id": pd.Series(t.req_id, dtype=object),
            "arrival_s": arrival,
            "first_scheduled_s": first_sched,
            "first_token_s": first_tok,
            "finish_s": np.where(finished, finish, np.nan),
            "prompt_len": np.asarray(t.prompt_len, dtype=np.int64),
            "output_len": np.asarray(t.output_len, dtype=np.int64),
            "num_output": num_output,
            "ttft_ms": (first_tok - arrival) * 1e3,
            "tpot_ms": np.where(finished, tpot, np.nan),
            "e2e_ms": np.where(finished, (finish - arrival) * 1e3, np.nan),
            "queue_ms": (first_sched - arrival) * 1e3,
            "num_preemptions": np.frombuffer(rec.preemptions, dtype=np.int64),
            "recomputed_tokens": np.frombuffer(rec.recomputed, dtype=np.int64),
            "reused_tokens": np.frombuffer(rec.reused, dtype=np.int64),
            "prefix_hit_tokens": np.frombuffer(rec.prefix_hit, dtype=np.int64),
            "outcome": pd.Series(outcome, dtype=object),
        }
    )
    df = trace.df
    requests["good"] = good_mask(
        requests,
        slo,
        df["sla_ttft_ms"].to_numpy(dtype=np.float64),
        df["sla_e2e_ms"].to_numpy(dtype=np.float64),
    )
    step_table = np.frombuffer(rec.steps, dtype=np.float64).reshape(-1, len(Recorder.STEP_FIELDS))
    steps = pd.DataFrame(
        {
            name: step_table[:, j] if name.endswith("_s") else step_table[:, j].astype(np.int64)
            for j, name in enumerate(Recorder.STEP_FIELDS)
        }
    )
    n_steps = len(steps)
    weights = np.zeros(n_steps + 1, dtype=np.int64)
    if len(rec.itl_run_first):
        np.add.at(weights, np.frombuffer(rec.itl_run_first, dtype=np.int64), 1)
        np.add.at(weights, np.frombuffer(rec.itl_run_last, dtype=np.int64) + 1, -1)
    itl_weights = np.cumsum(weights)[:n_steps]
    preemptions = _event_frame(rec.preemption_events, t)
    starvation = _event_frame(rec.starvation_events, t)
    requests["priority"] = np.asarray(t.priority, dtype=np.int64)
    requests["tenant"] = trace.df["tenant"].astype(object).to_numpy()
    requests["starved"] = requests["req_id"].isin(set(starvation["req_id"]))
    summary = summarize(
        requests,
        steps,
        itl_weights,
        np.frombuffer(rec.itl_gaps, dtype=np.float64),
        slo,
        rec.prefix_queries,
        rec.prefix_hits,
        engine.config.enable_prefix_caching,
        engine.pool.usable_blocks,
        engine.max_model_len,
    )
    token_steps = None
    if rec.token_steps is not None:
        token_steps = {t.req_id[i]: s for i, s in rec.token_steps.items()}
    return SimulationResult(
        engine.config, model_desc, summary, requests, steps, preemptions, starvation, token_steps
    )


def _event_frame(events: list[tuple[float, int, int, int]], t: TraceArrays) -> pd.DataFrame:
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
