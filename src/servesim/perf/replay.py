"""Replay a client workload through the engine as a benchmark client would see it.

The engine simulates the server from arrival to last token. A load generator adds three
things this module models on top:

* **Client-side closed loops.** inference-perf keeps at most one request per chat session in
  flight; ``vllm bench serve --max-concurrency`` holds at most C requests in flight. A send
  then depends on earlier completions, which depend on the sends: we solve that fixed point by
  simulating, moving each held-back send to the completion it waits for, and simulating again
  until no send moves (usually 2-4 rounds; the count is reported).
* **Async scheduling** (vLLM's default): step n+1 is scheduled while step n runs, so a request
  arriving during a step joins the step after next. To first order that delays the request by
  one step; we add the duration of the step running at its arrival (nothing if the engine was
  idle). The engine itself schedules synchronously.
* **Front-end latency**: HTTP, tokenization, detokenization and streaming add a per-request
  constant (``HardwareProfile.frontend_latency_s``) to TTFT and end-to-end latency.
* **Client timeouts** (``RequestSet.timeout_s``): a client that has not had its last token
  ``timeout_s`` after sending gives up and disconnects; vLLM aborts the request on disconnect
  (its KV blocks go back, it stops taking batch slots). The request counts as *failed*, its
  latencies are left out of the statistics (benchmarks report latencies over successful
  requests), and a session's next round is released when it fails. inference-perf runs with
  aiohttp's default total timeout of 300 s unless ``load.request_timeout`` says otherwise.

Latencies come back in seconds, per request, in the order of the input arrays.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from servesim.engine import EngineConfig, SimulationResult, simulate
from servesim.engine.engine import Engine
from servesim.engine.request import OUTCOME_ABORTED, OUTCOMES
from servesim.engine.simulate import build_result, describe_model
from servesim.engine.step_time import StepTimeModel
from servesim.errors import InputError
from servesim.heap import gc_paused
from servesim.perf.profile import HardwareProfile
from servesim.traces.schema import Trace, TraceProvenance


@dataclass
class RequestSet:
    """A workload as arrays (one entry per request, in scheduled send order)."""

    scheduled: np.ndarray  # float64 seconds: when the client wants to send
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    prefix_group: list[str | None]
    prefix_len: np.ndarray  # int64
    predecessor: np.ndarray | None = None  # int64, index of the request that must finish first (-1: none)
    max_concurrency: int | None = None
    stage: np.ndarray | None = None  # int64 stage index per request (for per-stage metrics)
    label: str = "workload"
    timeout_s: float | None = None  # the client's total timeout per request (None: it waits forever)
    #: Latencies as the server measures them (vLLM's /metrics histograms, from the request's
    #: arrival at the API server): no front-end latency (HTTP, streaming, the client) added.
    server_side: bool = False

    def __len__(self) -> int:
        return len(self.scheduled)


@dataclass
class ReplayOutcome:
    """Per-request client-side view of one replay (seconds), and how the fixed point went."""

    send: np.ndarray
    ttft: np.ndarray  # NaN where no first token
    e2e: np.ndarray  # NaN where not finished
    num_output: np.ndarray
    finished: np.ndarray  # bool
    rounds: int
    converged: bool
    mean_shift_s: float
    num_steps: int
    extras: dict[str, float] = field(default_factory=dict)
    #: Requests whose client timed out (the engine aborted them); None: no timeout was set.
    failed: np.ndarray | None = None
    #: The engine's last round (steps, per-request records): what the views draw from.
    result: SimulationResult | None = field(default=None, repr=False)


def _trace(rs: RequestSet, send: np.ndarray) -> Trace:
    n = len(rs)
    df = pd.DataFrame(
        {
            "req_id": pd.Series([str(i) for i in range(n)], dtype=object),
            "arrival_time_s": send.astype(np.float64),
            "prompt_len": rs.prompt_len.astype(np.int64),
            "output_len": rs.output_len.astype(np.int64),
            "priority": np.zeros(n, dtype=np.int64),
            "tenant": pd.Series([None] * n, dtype=object),
            "sla_ttft_ms": np.full(n, np.nan),
            "sla_e2e_ms": np.full(n, np.nan),
            "prefix_group": pd.Series(rs.prefix_group, dtype=object),
            "prefix_len": rs.prefix_len.astype(np.int64),
            "hash_ids": pd.Series([None] * n, dtype=object),
            "spec_accept_rate": np.full(n, np.nan),
            "lora": pd.Series([None] * n, dtype=object),
        }
    )
    order = np.argsort(df["arrival_time_s"].to_numpy(), kind="stable")
    df = df.iloc[order].reset_index(drop=True)
    prov = TraceProvenance(source=rs.label, format="synthetic", rows_read=n, rows_kept=n, reordered=True)
    return Trace(df, prov)


def async_lag(
    arrival: np.ndarray, first_scheduled: np.ndarray, starts: np.ndarray, durations: np.ndarray
) -> np.ndarray:
    """Per request: the duration of the step running when it arrived, if it had to wait for it."""
    lag = np.zeros(len(arrival))
    if len(starts) == 0:
        return lag
    k = np.searchsorted(starts, arrival, side="right") - 1
    valid = k >= 0
    kk = np.where(valid, k, 0)
    running = valid & (arrival < starts[kk] + durations[kk]) & (first_scheduled > arrival)
    lag[running] = durations[kk[running]]
    return lag


def _sends(rs: RequestSet, duration: np.ndarray) -> np.ndarray:
    """Send times given each request's client-side duration (send to last token) from the last round.

    Chains are followed in one pass (a request's predecessor always comes earlier), so a delay
    propagates down a whole session at once; only the durations are iterated to a fixed point.
    """
    send = rs.scheduled.astype(np.float64).copy()
    dur = np.where(np.isfinite(duration), np.maximum(duration, 0.0), 0.0)
    if rs.predecessor is not None:
        prev = rs.predecessor.tolist()
        sl = send.tolist()
        dl = dur.tolist()
        for i, p in enumerate(prev):
            if p >= 0:
                ready = sl[p] + dl[p]
                if ready > sl[i]:
                    sl[i] = ready
        send = np.asarray(sl, dtype=np.float64)
    if rs.max_concurrency is not None:
        c = rs.max_concurrency
        inflight: list[float] = []
        t = 0.0
        for i in range(len(send)):
            t = max(t, send[i])
            while len(inflight) >= c:
                t = max(t, heapq.heappop(inflight))
            send[i] = t
            heapq.heappush(inflight, t + dur[i])
    return send


def simulate_with_deadlines(
    trace: Trace, config: EngineConfig, step_time: StepTimeModel, deadline: np.ndarray
) -> SimulationResult:
    """``simulate``, with each request aborted at its ``deadline`` (seconds, per trace row) if it
    is still live then: its client disconnected, and vLLM aborts a request whose client went away.

    Aborts apply between engine steps, as vLLM applies them: a step that started before the
    deadline runs whole first. A request that finished earlier is left alone.
    """
    if config.async_scheduling:
        raise InputError("client timeouts need the synchronous engine: leave async_scheduling off")
    engine = Engine(trace, config, step_time)
    order = np.argsort(deadline, kind="stable").tolist()
    dl = deadline.tolist()
    live = engine.live
    with gc_paused():
        for row in order:
            engine.run_until(dl[row])
            r = live.get(row)
            if r is not None:
                engine.abort(r, max(dl[row], engine.now))
        engine.run_until(math.inf)
    engine.finish()
    return build_result(engine, trace, None, describe_model(step_time))


@dataclass
class _Round:
    """One simulation as the client sees it (request order; seconds)."""

    result: SimulationResult
    ttft: np.ndarray  # async-scheduling lag and front-end latency added
    e2e: np.ndarray
    num_output: np.ndarray
    lag: np.ndarray
    failed: np.ndarray  # the client timed out (never True without a timeout)


def _client_round(
    rs: RequestSet, send: np.ndarray, config: EngineConfig, step_time: StepTimeModel, profile: HardwareProfile
) -> _Round:
    """One simulation of the requests sent at ``send``, as the client sees it. With a client
    timeout, a run in which some request took longer is simulated again with those clients'
    aborts (a run where none did is the same run, so it costs nothing); ``failed`` marks every
    request without its last token in time."""
    trace = _trace(rs, send)
    res = simulate(trace, config, step_time)
    rnd = _as_client_sees(rs, res, config, profile)
    timeout = rs.timeout_s
    if timeout is None:
        return rnd
    if np.any(rnd.e2e > timeout):
        order = np.argsort(send, kind="stable")
        # the engine sees the request after the front end's share of the client's clock
        deadline = send[order] + max(timeout - profile.frontend_latency_s, 0.0)
        res = simulate_with_deadlines(trace, config, step_time, deadline)
        rnd = _as_client_sees(rs, res, config, profile)
    # failed as the client counts it: no last token within its timeout (aborted, finished too
    # late, or refused by the server)
    rnd.failed = ~(rnd.e2e <= timeout)
    rnd.ttft = np.where(rnd.failed, np.nan, rnd.ttft)
    rnd.e2e = np.where(rnd.failed, np.nan, rnd.e2e)
    return rnd


def _as_client_sees(
    rs: RequestSet, res: SimulationResult, config: EngineConfig, profile: HardwareProfile
) -> _Round:
    n = len(rs)
    req = res.requests
    idx = req["req_id"].astype(np.int64).to_numpy()
    arrival = np.empty(n)
    first_sched = np.empty(n)
    first_tok = np.empty(n)
    finish = np.empty(n)
    nout = np.empty(n, dtype=np.int64)
    aborted = np.zeros(n, dtype=bool)
    arrival[idx] = req["arrival_s"].to_numpy()
    first_sched[idx] = req["first_scheduled_s"].to_numpy()
    first_tok[idx] = req["first_token_s"].to_numpy()
    finish[idx] = req["finish_s"].to_numpy()
    nout[idx] = req["num_output"].to_numpy()
    aborted[idx] = req["outcome"].to_numpy() == OUTCOMES[OUTCOME_ABORTED]
    finish[aborted] = np.nan  # an aborted request never had its last token
    steps = res.steps
    lag = np.zeros(n)
    if profile.async_scheduling and not config.async_scheduling:  # an async engine has it already
        lag = async_lag(arrival, first_sched, steps["start_s"].to_numpy(), steps["duration_s"].to_numpy())
    extra = lag + (0.0 if rs.server_side else profile.frontend_latency_s)
    return _Round(
        res, first_tok - arrival + extra, finish - arrival + extra, nout, lag, np.zeros(n, dtype=bool)
    )


def replay(
    rs: RequestSet,
    config: EngineConfig,
    step_time: StepTimeModel,
    profile: HardwareProfile,
    *,
    max_rounds: int = 12,
    tol_s: float = 1e-3,
    rel_tol: float = 2e-3,
    relax: float = 0.5,
    initial_duration: np.ndarray | None = None,
) -> ReplayOutcome:
    """Simulate ``rs`` with client-side closed loops, async-scheduling lag and front-end latency.

    The closed loop is solved when the mean change of the send times between two rounds is at
    most ``tol_s``, or the mean client-side latency changed by at most ``rel_tol`` (relative)
    since the previous round: schedules of a loaded engine are chaotic, so individual sends keep
    jittering while every statistic has settled. ``rounds`` counts simulations; ``converged`` is
    False when ``max_rounds`` ran out first. ``initial_duration`` (per-request client-side
    latencies, e.g. from a previous replay with similar settings) starts the closed loop there.
    """
    n = len(rs)
    closed = rs.predecessor is not None or rs.max_concurrency is not None
    duration = np.zeros(n)
    if closed and initial_duration is not None and len(initial_duration) == n:
        duration = np.asarray(initial_duration, dtype=np.float64).copy()
        send = _sends(rs, duration)
    else:
        send = rs.scheduled.astype(np.float64).copy()
    warm = closed and initial_duration is not None
    mean_before = 0.0
    mean_now = float(np.nanmean(duration)) if warm and n else 0.0
    rounds = 0
    shift = 0.0
    converged = True
    while True:
        rounds += 1
        if closed and rounds > 1:
            new_send = _sends(rs, duration)
            shift = float(np.mean(np.abs(new_send - send))) if n else 0.0
            settled = abs(mean_now - mean_before) <= rel_tol * max(abs(mean_now), 1e-12)
            if shift <= tol_s or (rounds > (1 if warm else 2) and settled):
                break
            if rounds > max_rounds:
                converged = False
                break
            send = new_send
        rnd = _client_round(rs, send, config, step_time, profile)
        # A session waits for its request's last token, or for its client to give up.
        busy = np.where(rnd.failed, rs.timeout_s or 0.0, rnd.e2e)
        # Relaxation: the plain iteration oscillates (more hold-back -> less load -> shorter
        # latencies -> less hold-back); averaging with the previous round damps it.
        duration = busy if (rounds == 1 and not warm) else relax * busy + (1.0 - relax) * duration
        mean_before, mean_now = mean_now, float(np.nanmean(busy)) if n else 0.0
        if not closed:
            break
    extras = {"mean_async_lag_s": float(np.mean(rnd.lag)) if n else 0.0}
    if rs.timeout_s is not None:
        extras["num_failed"] = float(rnd.failed.sum())
    return ReplayOutcome(
        send=send,
        ttft=rnd.ttft,
        e2e=rnd.e2e,
        num_output=rnd.num_output,
        finished=np.isfinite(rnd.e2e),
        rounds=rounds,
        converged=converged,
        mean_shift_s=shift,
        num_steps=len(rnd.result.steps),
        extras=extras,
        result=rnd.result,
        failed=rnd.failed if rs.timeout_s is not None else None,
    )


def summarize_latencies(
    out: ReplayOutcome, mask: np.ndarray | None = None, *, counted_output_tokens: float | None = None
) -> dict[str, float]:
    """inference-perf / vllm-bench style metrics in milliseconds over finished requests in ``mask``.

    Requests whose client timed out are not among them (benchmarks report latencies over their
    successful requests); ``num_failed`` counts them when the replay had a client timeout.

    ``itl_mean`` is ``(mean e2e - mean ttft) / (mean output tokens - 1)`` (how inference-perf
    reports it); ``tpot_mean`` is the mean of per-request ``(e2e - ttft) / (outputs - 1)`` (how
    ``vllm bench serve`` reports TPOT) and ``itl_pooled_mean`` the mean gap between consecutive
    tokens pooled over requests (its ITL, one token per streamed chunk).

    ``counted_output_tokens``: the mean output count the *client* reported, when it differs from
    what the engine generated. inference-perf counts by re-tokenizing the streamed text (plus a
    BOS), not from the server's ``completion_tokens``; its ``itl_mean`` divides by that count.
    """
    sel = out.finished if mask is None else (out.finished & mask)
    failed = None
    if out.failed is not None:
        failed = float(out.failed.sum() if mask is None else (out.failed & mask).sum())
    if not np.any(sel):
        return {} if failed is None else {"num_requests": 0.0, "num_failed": failed}
    e2e = out.e2e[sel] * 1e3
    ttft = out.ttft[sel] * 1e3
    nout = out.num_output[sel].astype(np.float64)
    res: dict[str, float] = {
        "e2e_mean": float(e2e.mean()),
        "e2e_p90": float(np.percentile(e2e, 90)),
        "e2e_p99": float(np.percentile(e2e, 99)),
        "ttft_mean": float(ttft.mean()),
        "ttft_p90": float(np.percentile(ttft, 90)),
        "ttft_p99": float(np.percentile(ttft, 99)),
    }
    mean_out = float(nout.mean())
    denom = mean_out if counted_output_tokens is None else float(counted_output_tokens)
    if denom > 1:
        res["itl_mean"] = (res["e2e_mean"] - res["ttft_mean"]) / (denom - 1)
    multi = nout > 1
    if np.any(multi):
        res["tpot_mean"] = float(np.mean((e2e[multi] - ttft[multi]) / (nout[multi] - 1)))
        res["itl_pooled_mean"] = float(np.sum(e2e[multi] - ttft[multi]) / np.sum(nout[multi] - 1))
    res["num_requests"] = float(sel.sum())
    if failed is not None:
        res["num_failed"] = failed
    res["mean_output_tokens"] = mean_out
    return res
