"""The replica engine loop: arrivals, the clock, one scheduler step after another, records.

Time: each step starts when the previous one ends; its duration comes from the step-time
model. A request arriving at or before a step's start takes part in that step. An idle engine
(nothing running or waiting) jumps to the next arrival. Requests whose prompt is at least
``max_model_len`` are rejected on arrival (vLLM answers HTTP 400); with ``queue_timeout_s``,
requests still unscheduled after that long are rejected at the next step start. Nothing is
dropped silently: every request ends with exactly one outcome.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from servesim.engine.block_pool import BlockPool
from servesim.engine.config import EngineConfig
from servesim.engine.kv_cache_manager import KVCacheManager, hash_id_keys
from servesim.engine.request import (
    FINISHED,
    OUTCOME_REJECTED_TIMEOUT,
    OUTCOME_REJECTED_TOO_LONG,
    OUTCOME_UNFINISHED,
    REJECTED,
    RUNNING,
    WAITING,
    Request,
)
from servesim.engine.scheduler import Scheduler, StepPlan
from servesim.engine.step_time import BatchComposition, StepTimeModel
from servesim.traces.schema import Trace

StepLogSink = Callable[[dict[str, Any]], None]


class EngineStallError(RuntimeError):
    """The engine cannot make progress (a configuration vLLM would also hang on)."""


class TraceArrays:
    """The columns of a trace the engine reads, as plain arrays (one conversion, up front)."""

    def __init__(self, trace: Trace, block_size: int) -> None:
        df = trace.df
        self.n = len(df)
        self.req_id: list[str] = [str(x) for x in df["req_id"].tolist()]
        self.arrival: list[float] = df["arrival_time_s"].astype(np.float64).tolist()
        self.prompt_len: list[int] = df["prompt_len"].astype(np.int64).tolist()
        self.output_len: list[int] = df["output_len"].astype(np.int64).tolist()
        self.priority: list[int] = df["priority"].astype(np.int64).tolist()
        self.prefix_len: list[int] = df["prefix_len"].astype(np.int64).tolist()
        groups: dict[str, int] = {}
        self.group: list[int] = []
        for g, plen in zip(df["prefix_group"].tolist(), self.prefix_len, strict=True):
            if g is None or plen <= 0 or (isinstance(g, float) and np.isnan(g)):
                self.group.append(-1)
            else:
                self.group.append(groups.setdefault(str(g), len(groups)))
        self.hash_ids: list[Any] = df["hash_ids"].tolist()
        self.hash_block_size = trace.hash_block_size
        self.block_size = block_size

    def make_request(self, i: int) -> Request:
        hk = None
        ids = self.hash_ids[i]
        if ids is not None and self.hash_block_size:
            hk = hash_id_keys(list(ids), self.hash_block_size, self.block_size, self.prompt_len[i])
        return Request(
            i,
            self.req_id[i],
            self.arrival[i],
            self.prompt_len[i],
            self.output_len[i],
            self.priority[i],
            self.group[i],
            self.prefix_len[i],
            hk,
        )


class Recorder:
    """Per-step time series and per-request records, in plain lists (arrays at the end)."""

    def __init__(self, n_requests: int) -> None:
        self.step_start: list[float] = []
        self.step_duration: list[float] = []
        self.step_tokens: list[int] = []
        self.step_decodes: list[int] = []
        self.step_prefill_tokens: list[int] = []
        self.step_running: list[int] = []
        self.step_waiting: list[int] = []
        self.step_kv_used: list[int] = []
        self.step_preempted: list[int] = []
        self.step_admitted: list[int] = []
        self.step_finished: list[int] = []
        # Pooled inter-token latencies: per step, how many requests emitted a token in it that
        # follows their previous token in the step just before (gap = that step's duration);
        # plus every other gap (after a preemption or an unscheduled step) as explicit values.
        self.itl_run_first: list[int] = []  # steps s+1 .. s+c-1 of each run of c > 1 outputs
        self.itl_run_last: list[int] = []
        self.itl_gaps: list[float] = []
        # Per request (index = trace position).
        nan = float("nan")
        self.first_scheduled = [nan] * n_requests
        self.first_token = [nan] * n_requests
        self.finish = [nan] * n_requests
        self.num_output = [0] * n_requests
        self.preemptions = [0] * n_requests
        self.recomputed = [0] * n_requests
        self.reused = [0] * n_requests
        self.prefix_hit = [0] * n_requests
        self.outcome = [OUTCOME_UNFINISHED] * n_requests
        self.token_steps: dict[int, list[int]] | None = None
        # Preemption events: (time, step, request index, context length at preemption).
        self.preemption_events: list[tuple[float, int, int, int]] = []
        self.prefix_queries = 0
        self.prefix_hits = 0

    def close_request(self, r: Request) -> None:
        i = r.idx
        self.first_scheduled[i] = r.first_scheduled if r.first_scheduled >= 0 else float("nan")
        self.first_token[i] = r.first_token if r.first_token >= 0 else float("nan")
        self.finish[i] = r.finish_time if r.finish_time >= 0 else float("nan")
        self.num_output[i] = r.num_output
        self.preemptions[i] = r.num_preemptions
        self.recomputed[i] = r.recomputed_tokens
        self.reused[i] = r.reused_tokens
        self.prefix_hit[i] = r.prefix_hit_tokens
        self.outcome[i] = r.outcome or OUTCOME_UNFINISHED
        seg = r.segments
        if seg:
            start = self.step_start  # the end of step s is start[s] + duration[s]
            dur = self.step_duration
            prev = -1
            for j in range(0, len(seg), 2):
                s, c = seg[j], seg[j + 1]
                if prev >= 0:
                    self.itl_gaps.append(start[s] + dur[s] - (start[prev] + dur[prev]))
                if c > 1:
                    self.itl_run_first.append(s + 1)
                    self.itl_run_last.append(s + c - 1)
                prev = s + c - 1
            if self.token_steps is not None:
                self.token_steps[i] = list(seg)


class Engine:
    """One vLLM replica simulated over a trace. Use ``servesim.simulate`` unless you need steps."""

    def __init__(
        self,
        trace: Trace,
        config: EngineConfig,
        step_time: StepTimeModel,
        *,
        fast: bool = True,
        step_log: StepLogSink | None = None,
        check_invariants: bool = False,
        record_token_times: bool = False,
    ) -> None:
        self.config = config
        self.step_time = step_time
        self.trace = TraceArrays(trace, config.block_size)
        t = self.trace
        if config.max_model_len is not None:
            mml = config.max_model_len
        else:
            mml = max((p + o for p, o in zip(t.prompt_len, t.output_len, strict=True)), default=2047) + 1
            config.check_max_model_len(mml)
        self.max_model_len = mml
        self.pool = BlockPool(config.num_gpu_blocks, config.enable_prefix_caching)
        self.kv = KVCacheManager(
            self.pool, config.block_size, mml, config.watermark, config.scheduler_reserve_full_isl
        )
        self.scheduler = Scheduler(config, self.kv, mml, fast)
        self.step_log = step_log
        self.check_invariants = check_invariants
        self.rec = Recorder(t.n)
        if record_token_times:
            self.rec.token_steps = {}
        self.now = 0.0
        self.step = 0
        self._next = 0  # next trace row to arrive
        self._timeouts: deque[Request] = deque()  # never-scheduled requests, by arrival
        self.live: dict[int, Request] = {}  # arrived and not yet closed

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        sched = self.scheduler
        rec = self.rec
        model = self.step_time
        arrival = self.trace.arrival
        n = self.trace.n
        empty_steps = 0
        while True:
            if not sched.running and not len(sched.waiting):
                if self._next >= n:
                    break
                if arrival[self._next] > self.now:
                    self.now = arrival[self._next]
            self._arrive()
            if self.config.queue_timeout_s is not None:
                self._expire()
            plan = sched.schedule(self.step, self.now)
            if plan.is_empty():
                if not plan.preempted:
                    if sched.running or not len(sched.waiting):
                        raise EngineStallError(f"step {self.step}: running requests got no tokens")
                    if self._next < n:  # blocked until something arrives (cannot happen in vLLM)
                        self.now = max(self.now, arrival[self._next])
                        continue
                    raise EngineStallError(
                        f"step {self.step}: {len(sched.waiting)} waiting requests can never be admitted"
                    )
                empty_steps += 1
                if empty_steps > 1000:
                    raise EngineStallError(f"step {self.step}: 1000 steps in a row scheduled nothing")
            else:
                empty_steps = 0
            batch = self._batch(plan)
            dt = float(model.step_time(batch))
            if not dt > 0:
                raise ValueError(f"step-time model returned {dt!r} s for {batch!r}; it must be > 0")
            t_end = self.now + dt
            self._record_step(plan, batch, dt)
            finished = sched.update(plan, self.step, t_end)
            for r in plan.preempted:
                rec.preemption_events.append((self.now, self.step, r.idx, r.lost_tokens))
            for r, hit in plan.prefix_hits:
                if r.num_preemptions == 0:
                    rec.prefix_hits += hit
            for r in plan.new:
                rec.prefix_queries += r.prompt_len
            if self.step_log is not None:
                self._log_step(plan, dt, finished)
            for r in finished:
                self._close(r)
            rec.step_finished.append(len(finished))
            self.now = t_end
            self.step += 1
            if self.check_invariants:
                self.assert_invariants()
        self._finish_run()

    def _arrive(self) -> None:
        arrival = self.trace.arrival
        n = self.trace.n
        now = self.now
        sched = self.scheduler
        mml = self.max_model_len
        timeouts = self.config.queue_timeout_s is not None
        while self._next < n and arrival[self._next] <= now:
            r = self.trace.make_request(self._next)
            self._next += 1
            if r.prompt_len >= mml:
                r.status = REJECTED
                r.outcome = OUTCOME_REJECTED_TOO_LONG
                r.finish_time = r.arrival
                self.rec.close_request(r)
                continue
            self.live[r.idx] = r
            sched.waiting.add(r)
            if timeouts:
                self._timeouts.append(r)

    def _expire(self) -> None:
        """Reject requests unscheduled for longer than ``queue_timeout_s`` (at a step start)."""
        limit = self.config.queue_timeout_s
        assert limit is not None
        q = self._timeouts
        while q and self.now - q[0].arrival > limit:
            r = q.popleft()
            if r.status != WAITING:
                continue  # already scheduled (or preempted after being scheduled)
            r.status = REJECTED
            self.scheduler.waiting.remove(r)
            r.outcome = OUTCOME_REJECTED_TIMEOUT
            r.finish_time = self.now
            self._close(r)

    def _batch(self, plan: StepPlan) -> BatchComposition:
        decodes = plan.num_group_decodes
        ctx = plan.group_ctx_sum
        chunks: list[tuple[int, int]] = []
        for r, n in plan.scheduled:
            if n == 1:
                decodes += 1
                ctx += r.num_computed + 1
            else:
                chunks.append((n, r.num_computed))
        return BatchComposition(decodes, ctx, chunks)

    def _record_step(self, plan: StepPlan, batch: BatchComposition, dt: float) -> None:
        rec = self.rec
        sched = self.scheduler
        rec.step_start.append(self.now)
        rec.step_duration.append(dt)
        prefill = batch.num_prefill_tokens
        rec.step_tokens.append(batch.num_decodes + prefill)
        rec.step_decodes.append(batch.num_decodes)
        rec.step_prefill_tokens.append(prefill)
        rec.step_running.append(len(sched.running))
        rec.step_waiting.append(len(sched.waiting))
        rec.step_kv_used.append(self.pool.usable_blocks - self.pool.num_free)
        rec.step_preempted.append(len(plan.preempted))
        rec.step_admitted.append(len(plan.new) + len(plan.resumed))

    def _log_step(self, plan: StepPlan, dt: float, finished: list[Request]) -> None:
        """One JSON object per step: the record to compare with vLLM's own scheduler."""
        assert self.step_log is not None
        explicit = {id(r): n for r, n in plan.scheduled}
        tokens: dict[str, int] = {}
        for r in self.scheduler.running:
            n = explicit.get(id(r))
            if n is None and plan.num_group_decodes and r.sync_step >= 0:
                n = 1
            if n:
                tokens[r.req_id] = n
        for r in finished:  # finished requests left the running list already
            n = explicit.get(id(r), 1)
            tokens[r.req_id] = n
        order = {r.req_id: r.admit_seq for r in list(self.scheduler.running) + finished}
        scheduled = dict(sorted(tokens.items(), key=lambda kv: order.get(kv[0], -1)))
        self.step_log(
            {
                "step": self.step,
                "start_s": self.now,
                "duration_s": dt,
                "scheduled_tokens": scheduled,
                "num_tokens": sum(scheduled.values()),
                "new": [r.req_id for r in plan.new],
                "resumed": [r.req_id for r in plan.resumed],
                "preempted": [r.req_id for r in plan.preempted],
                "finished": [r.req_id for r in finished],
                "prefix_hit_tokens": {r.req_id: h for r, h in plan.prefix_hits},
                "num_running": self.rec.step_running[-1],
                "num_waiting": self.rec.step_waiting[-1],
                "kv_blocks_used": self.rec.step_kv_used[-1],
                "kv_blocks_free": self.pool.usable_blocks - self.rec.step_kv_used[-1],
            }
        )

    def _close(self, r: Request) -> None:
        self.live.pop(r.idx, None)
        self.rec.close_request(r)

    def _finish_run(self) -> None:
        sched = self.scheduler
        if sched.group is not None and sched.group.n:
            sched.materialize_all(self.step, self.now)
        for r in list(self.live.values()):  # only if the loop was cut short
            r.outcome = OUTCOME_UNFINISHED
            self._close(r)
        self.assert_invariants(final=True)

    # ------------------------------------------------------------------ invariants
    def assert_invariants(self, final: bool = False) -> None:
        """Conservation checks (see docs/invariants.md); cheap enough to run every step in tests."""
        self.pool.check()
        sched = self.scheduler
        group = sched.group
        owners: dict[int, int] = {}
        for r in sched.running:
            assert r.status == RUNNING, f"{r.req_id} in running with status {r.status}"
            assert r.num_output >= 0 and r.num_computed >= 0
            for b in r.blocks:
                owners[b] = owners.get(b, 0) + 1
            if r.sync_step < 0:
                assert r.num_computed <= r.prompt_len + r.num_output, f"{r.req_id} computed past its tokens"
                assert len(r.blocks) * self.kv.block_size >= r.num_computed, f"{r.req_id} lacks blocks"
        limbo = group.limbo if group is not None else []
        for b in limbo:
            owners[b] = owners.get(b, 0) + 1
        ref = self.pool.ref
        for b, c in owners.items():
            assert ref[b] == c, f"block {b}: ref count {ref[b]} but {c} holders"
        in_use = sum(1 for b in range(1, self.pool.num_gpu_blocks) if ref[b] > 0)
        assert in_use == len(owners), "a block is referenced by nobody"
        assert len(sched.waiting) >= 0
        for r in sched.waiting:
            assert not r.blocks, f"waiting request {r.req_id} holds blocks"
        if final:
            assert not sched.running and not len(sched.waiting), "requests left in the engine"
            assert not limbo, "blocks left in limbo"
            assert self.pool.num_free == self.pool.usable_blocks, "KV blocks not returned to the pool"
            outcomes = self.rec.outcome
            for i in range(self.trace.n):
                assert outcomes[i] != OUTCOME_UNFINISHED, f"request {self.trace.req_id[i]} has no outcome"


def jsonl_sink(path: str) -> tuple[StepLogSink, Callable[[], None]]:
    """A step-log sink writing one JSON line per step; returns (sink, close)."""
    f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by the returned callable

    def sink(d: dict[str, Any]) -> None:
        f.write(json.dumps(d, separators=(",", ":")) + "\n")

    return sink, f.close


__all__ = ["FINISHED", "Engine", "EngineStallError", "StepLogSink", "jsonl_sink"]
