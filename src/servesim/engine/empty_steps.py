"""A step that schedules nothing: vLLM steps on while only KV transfers are in flight, and
servesim stops a run that could never move again instead of spinning.

Pure Python on both cores: ``Engine.begin_step`` calls it only on a step whose plan holds no
request (rare), so the compiled loop keeps its one test.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from servesim.errors import EngineStallError

if TYPE_CHECKING:
    from servesim.engine.engine import Engine
    from servesim.engine.step_plan import StepPlan

#: Empty steps in a row after which a run is stopped as stalled (preemptions that free nothing).
MAX_EMPTY_STEPS = 1000


def nothing_scheduled(engine: Engine, plan: StepPlan, step: int) -> None:
    """Step ``step`` scheduled no request: with KV transfers in flight (a waiting request the
    connector cannot answer for until its own store ends, too) it is one of vLLM's empty steps;
    else it must have preempted (a config vLLM accepts never schedules nothing otherwise: said
    loudly), and ``MAX_EMPTY_STEPS`` of those in a row stop the run."""
    sched = engine.scheduler
    xfer = sched.kv_xfer
    if xfer is not None and (xfer.keeps_stepping() or xfer.connector.next_due() < math.inf):
        engine._empty_steps = 0
        return
    if not plan.preempted:
        raise EngineStallError(
            f"step {step}: nothing could be scheduled ({len(sched.running)} running, "
            f"{len(sched.waiting)} waiting, {engine.pool.num_free} free blocks)"
        )
    engine._empty_steps += 1
    if engine._empty_steps > MAX_EMPTY_STEPS:
        raise EngineStallError(f"step {step}: {MAX_EMPTY_STEPS} steps in a row scheduled nothing")


__all__ = ["MAX_EMPTY_STEPS", "nothing_scheduled"]
