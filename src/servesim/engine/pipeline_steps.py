"""Pipeline parallelism's batch queue: vLLM 0.33's ``EngineCore.step_with_batch_queue`` with
``pipeline_parallel_size`` P > 1, and when each batch passes each stage.

Scheduling (what vLLM does, ``vllm/v1/engine/core.py``, ``vllm/config/vllm.py``,
``vllm/v1/core/sched/async_scheduler.py``):

* With PP, vLLM 0.33 runs the V2 model runner with async scheduling (``VllmConfig.__post_init__``
  turns it on: nothing in a PP config is incompatible with it there), so its batch queue holds
  ``max_concurrent_batches = P + 1`` steps (``VllmConfig.max_concurrent_batches``:
  ``pp_size + 1`` under async scheduling with the V2 runner).
* ``step_with_batch_queue``: while the scheduler has requests and the queue is not full, it
  schedules a step and queues it (an empty one too: ``current_step`` still counts it) and does
  not wait; when the queue is full, or the scheduler has nothing, it blocks on the oldest step,
  applies its output (``update_from_output``) and loops. Arrivals are taken between those calls.
* ``AsyncScheduler._update_after_schedule``: a request that samples in a step gets an output
  placeholder (``async_steps.after_schedule``) and, under the V2 runner,
  ``next_decode_eligible_step = current_step + P``; ``Scheduler.schedule`` skips a running
  request while ``current_step < next_decode_eligible_step`` (the decodes of one request are P
  steps apart, so P micro-batches of different requests fill the P stages). A prefill chunk
  that samples nothing is not held back: the next chunk may go in the very next step.

Timing (servesim's model of the stages): a step's batch passes stages 0 .. P-1 in turn, each
taking its stage time (``perf.pipeline.StageStepTime``: its layers, the send onward; a model
without ``stage_times`` takes ``step_time`` per stage). A stage works on one batch at a time,
in order; stage 0 starts a batch when it is scheduled, stage 0 is free, and the tokens it
decodes are back from the last stage (the V2 runner's sampled-token broadcast to the earlier
stages, ``v1/worker/gpu/pp_utils.py: PPHandler``; a request's previous step must have ended).
An empty step runs nothing (``GPUModelRunner.execute_model`` returns before the forward) and
ends when the step before it has (the workers answer in order). So throughput is set by the
slowest stage, a batch's latency is the sum of its stages, and with fewer requests than stages
stages sit idle (the bubble).

Records: a step's row starts when the last stage starts it (or when the previous step ended, if
later) and ends when its output is back, so rows tile the time the last stage produces outputs
(``busy_s`` is the last stage's busy time) and each token's time is its step's end.

Pure Python on both cores (as ``async_steps``): it runs on the compiled core's objects through
their public attributes (``Engine._apply``, ``_arrive``, ``Scheduler.schedule``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from servesim.engine.step_plan import PendingStep
from servesim.errors import ConfigError, EngineStallError, InternalError

if TYPE_CHECKING:
    from servesim.engine.engine import Engine
    from servesim.engine.request import Request
    from servesim.engine.step_time import BatchComposition

#: Empty steps in a row (nothing in flight) after which the engine is stuck (as the sync engine).
MAX_EMPTY_STEPS = 1000


def queue_size(pp: int) -> int:
    """vLLM's ``max_concurrent_batches`` with PP under async scheduling and the V2 model runner."""
    return pp + 1


class BatchQueue:
    """The engine core's batch queue and the stages' clocks of one PP replica."""

    def __init__(self, engine: Engine) -> None:
        cfg = engine.config
        if engine.kv_connector is not None:
            raise ConfigError("pipeline_parallel_size with a KV connector (offload, P/D) is not modelled yet")
        if not cfg.async_scheduling:
            raise InternalError(
                "pipeline parallelism runs with async scheduling (EngineConfig refuses it off)"
            )
        self.engine = engine
        self.pp = cfg.pipeline_parallel_size
        self.size = queue_size(self.pp)
        self.queue: deque[PendingStep] = deque()
        self.calls = 0  # vLLM's Scheduler.current_step: schedule() calls so far
        self.scheduled = 0  # steps scheduled (the next one's index)
        self.stage_free = [0.0] * self.pp  # when each stage is done with its last batch
        self.last_done = 0.0  # when the newest step's output is back
        self.last_row_end = 0.0  # the end of the newest step's record row
        self.ready: dict[int, float] = {}  # request idx -> when its last sampled token is back
        self.empties = 0  # empty steps in a row
        stage_times = getattr(engine.step_time, "stage_times", None)
        if stage_times is None:
            one = engine._step_time
            pp = self.pp

            def stage_times(batch: BatchComposition) -> list[float]:
                return [one(batch)] * pp

        self.stage_times: Callable[[BatchComposition], list[float]] = stage_times

    # ------------------------------------------------------------------ the engine core's loop
    def begin(self, limit: float) -> PendingStep | None:
        """``step_with_batch_queue`` until it blocks: schedule steps at ``engine.now`` while the
        queue has room and requests remain, then return the oldest step (the one the core waits
        on); None when idle (no request, nothing in flight) up to ``limit``."""
        eng = self.engine
        sched = eng.scheduler
        arrival = eng.trace.arrival
        n = eng.trace.n
        timeouts = eng.config.queue_timeout_s is not None
        q = self.queue
        while True:
            if eng._next < n and arrival[eng._next] <= eng.now:
                eng._arrive(eng.now)
            if timeouts:
                eng._expire()
            has = bool(sched.running) or len(sched.waiting) > 0
            if not has and not q:
                if eng._next >= n or arrival[eng._next] >= limit:
                    return None
                eng.now = max(eng.now, arrival[eng._next])
                continue
            if eng.now >= limit:
                return None
            if has and len(q) < self.size:
                p = self._schedule()
                q.append(p)
                if len(q) < self.size and (p.plan.scheduled or bool(sched.running) or len(sched.waiting) > 0):
                    continue  # vLLM: don't block unless the queue is full or nothing is left to schedule
            return q[0]

    def _schedule(self) -> PendingStep:
        """Schedule one step at ``engine.now`` and time it through the stages."""
        eng = self.engine
        sched = eng.scheduler
        self.calls += 1
        sched.pp_step = self.calls
        now = eng.now
        plan = sched.schedule(self.scheduled, now)
        self.scheduled += 1
        batch = plan.batch()
        sched.after_schedule(plan)  # placeholders (async_steps.after_schedule)
        if plan.scheduled:
            self.empties = 0
            t = now
            ready = self.ready
            for r, _n in plan.scheduled:
                d = ready.get(r.idx)
                if d is not None and d > t:
                    t = d
            times = self.stage_times(batch)
            adapters = getattr(eng, "adapters", None)
            if adapters is not None:  # LoRA: the batch's adapters brought to the GPUs first
                times = [times[0] + adapters.step([r.lora for r in sched.running]), *times[1:]]
            free = self.stage_free
            last_start = t
            for s, dt in enumerate(times):
                if not dt > 0:
                    raise ConfigError(
                        f"step-time model returned {dt!r} s for stage {s} of {batch!r}; it must be > 0"
                    )
                start = t if t > free[s] else free[s]
                t = start + dt
                free[s] = t
                last_start = start
            done = t
            for (r, _n), s in zip(plan.scheduled, plan.samples or (), strict=True):
                if s:
                    ready[r.idx] = done
                    r.eligible_step = self.calls + self.pp  # AsyncScheduler (V2 runner): decode_stagger
            row_start = last_start if last_start > self.last_row_end else self.last_row_end
        else:
            self.empties += 1
            if self.empties > MAX_EMPTY_STEPS and not any(p.plan.scheduled for p in self.queue):
                raise EngineStallError(
                    f"step {self.scheduled - 1}: {MAX_EMPTY_STEPS} steps in a row scheduled nothing "
                    f"({len(sched.running)} running, {len(sched.waiting)} waiting, "
                    f"{eng.pool.num_free} free blocks)"
                )
            done = now if now > self.last_done else self.last_done
            row_start = done
        self.last_done = done
        self.last_row_end = done
        return PendingStep(
            plan,
            batch,
            row_start,
            done - row_start,
            len(sched.running),
            len(sched.waiting),
            eng.pool.usable_blocks - eng.pool.num_free,
        )

    def end(self, p: PendingStep) -> list[Request]:
        """The oldest step's output is back: apply it at its end (``update_from_output``)."""
        q = self.queue
        if not q or q[0] is not p:
            raise InternalError("pipeline batch queue: a step ended out of order")
        q.popleft()
        eng = self.engine
        end = p.start + p.duration
        if end > eng.now:
            eng.now = end
        step = eng.step
        eng.step = step + 1
        finished = eng._apply(p, step)
        if finished:
            ready = self.ready
            for r in finished:
                ready.pop(r.idx, None)
        return finished

    def drain(self) -> None:
        """Apply every step still in the queue (a run cut short)."""
        while self.queue:
            self.end(self.queue[0])

    def in_flight(self) -> int:
        """Steps scheduled whose output is not applied yet."""
        return len(self.queue)


__all__ = ["MAX_EMPTY_STEPS", "BatchQueue", "queue_size"]
