"""A run you can drive: advance a simulation step by step or by simulated time, look at it, finish it.

Interfaces (the terminal dashboard, the web workbench) need the batch *while* it runs, not a
recording. ``LiveRun`` wraps one replica's ``Engine``; ``LiveFleetRun`` wraps any fleet
(``servesim.cluster.fleet.Fleet``): an aggregated cluster (``LiveClusterRun(...)`` builds one over
a ``ClusterSimulator``) or prefill/decode pools (``LivePDRun(...)``, over a ``PDCluster``). Both
advance with the very loops ``simulate()``, ``simulate_cluster()`` and ``PDCluster.run()`` run,
so pausing and resuming anywhere changes nothing: ``finish()`` returns exactly the result of the
batch call on the same inputs (tests/live check the summary JSON and the per-request frame).

``snapshot()`` reads the state between steps, exact for requests in the fast path's decode group
(their counters are brought up to date on the fly, never by changing engine state): the running
batch with each request's phase and progress, the waiting queue in scheduling order, KV usage,
prefix-cache hit rate, rolling TTFT/TPOT percentiles over the last ``window_s`` simulated seconds
and token throughput; a disaggregated fleet's replicas with their pool and KV-holding queue, and
its transfers and legs (``RunSnapshot.pd``, from the fleet). ``events()`` returns the
``servesim.events`` since the previous call (preemptions, STARVED flags, rejections, node losses
and recoveries, each recovery decision), read from the engines' own records at no cost to the
engine; ``observers`` get the full stream. The snapshot types and the shared view code live in
``servesim._live``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeVar

import numpy as np

from servesim._live.snapshot import (
    WAITING_SHOWN,
    LegFigures,
    PDState,
    ReplicaState,
    RequestTimeline,
    RunSnapshot,
    Slot,
)
from servesim._live.views import LiveBase, check_window, event_order
from servesim.cluster import (
    ClusterResult,
    FailureEvent,
    KVCheckpointing,
    RecoveryContext,
    RecoveryPolicy,
    Replica,
    RouterSpec,
    build_cluster_result,
    cluster_simulator,
)
from servesim.cluster.fleet import FleetBase, FleetEngine, FleetReplica, FleetSnapshot, RequestStory
from servesim.cluster.pd import PDCluster, PDRun
from servesim.cluster.pd_results import PDResult, pd_result
from servesim.cluster.simulate import ClusterRun
from servesim.cluster.story import engine_story
from servesim.engine import SLO, EngineConfig, LinearStepTime, SimulationResult, StepTimeModel
from servesim.engine.engine import Engine
from servesim.engine.kv_connector import OffloadingConnector
from servesim.engine.replica import ReplicaView
from servesim.engine.simulate import build_result, describe_model
from servesim.errors import InputError
from servesim.events import Event, Observer, Progress, ReplicaDown, ReplicaUp, ReplicaWarning
from servesim.heap import gc_paused
from servesim.resched import InterruptedRequest, RescheduleInput, ReschedulePlan, reschedule
from servesim.traces.schema import Trace

RunT = TypeVar("RunT")
ResultT = TypeVar("ResultT")


class LiveRun(LiveBase):
    """One replica you advance yourself; ``finish()`` equals ``simulate()`` on the same inputs."""

    def __init__(
        self,
        trace: Trace,
        config: EngineConfig | None = None,
        step_time: StepTimeModel | None = None,
        *,
        slo: SLO | None = None,
        observers: Sequence[Observer] = (),
        window_s: float = 30.0,
        kv_connector: OffloadingConnector | None = None,
    ) -> None:
        super().__init__(trace, window_s)
        self.config = config or EngineConfig()
        self.step_time = step_time or LinearStepTime()
        self.slo = slo
        self.engine = Engine(
            trace, self.config, self.step_time, observers=observers, kv_connector=kv_connector
        )
        self._view = ReplicaView(self.engine)
        self._result: SimulationResult | None = None

    @property
    def now(self) -> float:
        """Simulated time: the end of the latest step (or the arrival an idle engine jumped to)."""
        return self.engine.now

    @property
    def step(self) -> int:
        return self.engine.step

    @property
    def done(self) -> bool:
        """Every request has an outcome (nothing is left to run)."""
        return self.engine.num_closed == self.engine.trace.n

    def _fleet(self) -> FleetSnapshot:
        view = self._view
        return FleetSnapshot((FleetReplica(None, view),), (FleetEngine(None, view),), view.num_arrived, 0)

    def _story(self, i: int) -> RequestStory:
        view = self._view
        return engine_story(i, float(self._arrival[i]), (FleetEngine(None, view),), (view,), view.num_arrived)

    def _advance_steps(self, n: int = 1) -> int:
        """Run exactly ``n`` engine steps (fewer only when the run ends); returns how many ran.

        Multi-step decode stretches are switched off meanwhile, so that each one is one step;
        results are the same either way (the fast-path tests prove it)."""
        self._check_open()
        engine = self.engine
        stretch, engine.stretch = engine.stretch, False
        try:
            done = 0
            while done < n:
                pending = engine.begin_step()
                if pending is None:
                    break
                engine.end_step(pending)
                done += 1
        finally:
            engine.stretch = stretch
        return done

    def _advance_until(self, t_s: float, max_steps: int = sys.maxsize) -> int:
        """Run every step that starts before ``t_s`` (or about ``max_steps`` of them: a decode
        stretch counts whole); returns the steps run."""
        self._check_open()
        engine = self.engine
        first = engine.step
        while engine.step - first < max_steps:
            pending = engine.begin_step(t_s)
            if pending is None:
                break
            engine.end_step(pending)
        return engine.step - first

    def snapshot(self, waiting_shown: int = WAITING_SHOWN) -> RunSnapshot:
        return self._snapshot(self.engine.step, self.done, waiting_shown, self._fleet())

    def events(self) -> list[Event]:
        """What happened since the previous call, in time order: the ``servesim.events`` a
        watcher needs (preemptions, STARVED flags, rejections), read from the engine's own
        records, so that watching costs the engine nothing (an observer of every event slows
        it about threefold; pass ``observers`` for the full stream)."""
        return sorted(self._engine_events(self._fleet()), key=event_order)

    def finish(self) -> SimulationResult:
        """Run to the end and return the result ``simulate()`` gives for the same inputs."""
        if self._result is None:
            with gc_paused():
                self._advance_until(math.inf)
            self.engine.finish()
            if self.engine.emit is not None:  # as Engine.run ends: the last progress
                self.engine.emit(Progress(self.engine.num_closed, self.engine.trace.n, self.now, self.step))
            self._result = build_result(self.engine, self.trace, self.slo, describe_model(self.step_time))
        return self._result

    def _check_open(self) -> None:
        if self._result is not None:
            raise InputError("this run is finished; start a new LiveRun to run again")


class LiveFleetRun(LiveBase, Generic[ResultT]):
    """A fleet you advance yourself (and fail replicas of): ``sim`` is any ``Fleet``, aggregated
    or disaggregated; ``finish()`` returns ``summarize`` of the fleet's one-go outcome on the same
    inputs (``build_cluster_result`` / ``pd_result``), every injected failure among its failures.
    Replicas are the fleet's (a disaggregated fleet's carry their pool), and what only one kind of
    fleet has (moves, transfers, legs) comes from the fleet."""

    def __init__(
        self,
        trace: Trace,
        sim: FleetBase[RunT],
        summarize: Callable[[RunT], ResultT],
        *,
        slo: SLO | None = None,
        window_s: float = 30.0,
        clock_stops_when_done: bool = False,
    ) -> None:
        super().__init__(trace, window_s)
        self.slo = slo
        self.sim: FleetBase[Any] = sim
        # Whether ``advance_until`` past the end leaves the clock at the run's last event (as a
        # stand-alone replica's does) instead of moving it on: the disaggregated fleet's dashboard
        # always stopped there, the aggregated one's kept time (kept as each was).
        self._stop_at_end = clock_stops_when_done
        self._summarize: Callable[[Any], ResultT] = summarize
        self._clock = 0.0
        self._steps = 0
        self._decisions_seen = 0  # the fleet's recovery decisions ``events()`` reported
        self._result: ResultT | None = None

    @property
    def now(self) -> float:
        """Simulated time: as far as the run was advanced."""
        return max(self._clock, self.sim.now)

    @property
    def step(self) -> int:
        """Engine steps ended so far, over all replicas."""
        return self._steps

    @property
    def done(self) -> bool:
        """Nothing is left to run (every request has an outcome, or waits for good)."""
        return self.sim.drained

    @property
    def replica_names(self) -> list[str]:
        return self.sim.replica_names

    @property
    def alive(self) -> list[bool]:
        return list(self.sim.alive)

    def _fleet(self) -> FleetSnapshot:
        return self.sim.snapshot()

    def _story(self, i: int) -> RequestStory:
        return self.sim.story(i, self.now)

    def _note_moves(self) -> None:
        jobs = self.sim.interrupted
        for job in jobs[self._watch.moves :]:
            self._held.add(job.request.idx)
            self._moved.add(job.request.idx)
        self._watch.moves = len(jobs)

    # ------------------------------------------------------------------ advancing
    def _advance_steps(self, n: int = 1) -> int:
        """Run exactly ``n`` engine steps (on whichever replicas end one next); returns how many."""
        self._check_open()
        done = self.sim.advance_steps(n) if n > 0 and not self.sim.drained else 0
        self._steps += done
        self._clock = max(self._clock, self.sim.now)
        return done

    def _advance_until(self, t_s: float, max_steps: int = sys.maxsize) -> int:
        """Process every step end and event before ``t_s`` (or ``max_steps`` step ends); the clock
        reaches ``t_s`` unless something is still due before it (or the run is done and its clock
        stops there)."""
        self._check_open()
        done = 0 if self.sim.drained else self.sim.advance(t_s, max_steps)
        self._steps += done
        at_end = self._stop_at_end and self.sim.drained
        if done < max_steps and t_s != math.inf and not at_end and self.sim.next_time() >= t_s:
            self._clock = max(self._clock, t_s)
        self._clock = max(self._clock, self.sim.now)
        return done

    def inject_failure(self, replica: str, recover_after_s: float | None = None) -> FailureEvent:
        """Fail ``replica`` now (its requests recovered as the fleet recovers them), back after
        ``recover_after_s``."""
        self._check_open()
        return self.sim.inject_failure(replica, self.now, recover_after_s)

    # ------------------------------------------------------------------ views
    def snapshot(self, waiting_shown: int = WAITING_SHOWN) -> RunSnapshot:
        fleet = self.sim.snapshot()
        lat = self._snapshot(self._steps, self.done, waiting_shown, fleet)
        pd = self.sim.transfers(self.now)
        return lat if pd is None else replace(lat, pd=pd)

    def events(self) -> list[Event]:
        """What happened since the previous call, in time order (as ``LiveRun.events``), plus the
        fleet's: warnings, replicas lost and back, each recovery decision."""
        sim, watch = self.sim, self._watch
        out = self._engine_events(sim.snapshot())
        for t, kind, node, taken in sim.node_events[watch.nodes :]:
            if kind == "fail":
                out.append(ReplicaDown(t, node, taken))
            elif kind == "recover":
                out.append(ReplicaUp(t, node))
            else:
                out.append(ReplicaWarning(t, node))
        watch.nodes = len(sim.node_events)
        out += sim.recovery_events(self._decisions_seen)
        self._decisions_seen = sim.num_recoveries
        return sorted(out, key=event_order)

    def recovery_queue(self, slo: SLO | None = None) -> ReschedulePlan | None:
        """The requests the latest replica loss interrupted, in the rescheduler's SLA-aware
        re-admission order with each one's projected completion and SLA verdict (None before
        any loss, or on a fleet that recovers otherwise). Budgets: the request's own
        ``sla_e2e_ms``, else the SLO's ``e2e_ms``, less the time since it arrived; without either
        the verdicts are not meaningful (``slo`` unset and no trace SLAs: effectively unbounded)."""
        jobs = self.sim.interrupted
        if not jobs:
            return None
        t, node = jobs[-1].time_s, jobs[-1].node
        batch = [j for j in jobs if j.time_s == t and j.node == node]
        goal = slo or self.slo
        sla = self.trace.df["sla_e2e_ms"].to_numpy(dtype=np.float64)
        reqs = []
        for j in batch:
            r = j.request
            budget = (
                sla[r.idx] if sla[r.idx] == sla[r.idx] else (goal.e2e_ms if goal and goal.e2e_ms else 1e12)
            )
            reqs.append(
                InterruptedRequest(
                    req_id=r.req_id,
                    tokens_processed=j.computed_tokens,
                    tokens_remaining=max(1, r.max_tokens - r.num_output),
                    sla_budget_ms=max(0.0, budget - (t - r.arrival) * 1e3),
                    priority=r.priority,
                    prompt_len=r.prompt_len,
                    preemptions=r.num_preemptions,
                    waited_ms=0.0,
                )
            )
        names = self.replica_names
        survivors = [k for k in range(len(names)) if self.sim.alive[k] and names[k] != node] or [0]
        spec = self.sim.replicas[survivors[0]]
        cfg = spec.config
        inp = RescheduleInput(
            batch_capacity=cfg.max_num_seqs,
            interrupted_requests=reqs,
            block_size=cfg.block_size,
            cache_survives=False,
            max_num_batched_tokens=max(cfg.max_num_batched_tokens, cfg.max_num_seqs),
        )
        return reschedule(inp, step_time=spec.step_time)

    # ------------------------------------------------------------------ the end
    def finish(self) -> ResultT:
        """Run to the end and return the result of the fleet's one-go run on the same inputs."""
        if self._result is None:
            with gc_paused():
                self._check_open()
                self._steps += self.sim.advance()
            self._clock = max(self._clock, self.sim.now)
            self._result = self._summarize(self.sim.finish())
        return self._result

    def _check_open(self) -> None:
        if self._result is not None:
            raise InputError("this run is finished; start a new one to run again")


def LiveClusterRun(
    trace: Trace,
    replicas: Sequence[Replica],
    router: RouterSpec | None = None,
    failures: Sequence[FailureEvent] = (),
    recovery: str | RecoveryPolicy = "planner",
    context: RecoveryContext | None = None,
    *,
    kv_checkpointing: KVCheckpointing = "continuous",
    slo: SLO | None = None,
    observers: Sequence[Observer] = (),
    window_s: float = 30.0,
) -> LiveFleetRun[ClusterResult]:
    """An aggregated cluster (``ClusterSimulator``) to advance yourself; ``finish()`` equals
    ``simulate_cluster()`` on the same inputs, with every injected failure among its events."""
    check_window(window_s)  # a bad window is refused before the cluster is built
    # the policies' names the result records for its views (servesim.views.fleet)
    named = recovery if isinstance(recovery, str) else getattr(recovery, "__name__", None)
    policy = router.policy if router is not None else RouterSpec().policy
    sim = cluster_simulator(
        trace,
        replicas,
        router,
        failures,
        recovery,
        context,
        kv_checkpointing=kv_checkpointing,
        observers=observers,
    )

    def summarize(run: ClusterRun) -> ClusterResult:
        return build_cluster_result(run, slo, recovery=named, router=policy)

    return LiveFleetRun(trace, sim, summarize, slo=slo, window_s=window_s)


def LivePDRun(
    trace: Trace,
    prefill: Sequence[Replica],
    decode: Sequence[Replica],
    link: RecoveryContext,
    *,
    short_prompt_tokens: int = 0,
    failures: Sequence[FailureEvent] = (),
    link_name: str | None = None,
    slo: SLO | None = None,
    window_s: float = 30.0,
) -> LiveFleetRun[PDResult]:
    """Prefill/decode pools (``PDCluster``) to advance yourself; ``finish()`` returns the
    ``PDResult`` of the one-go ``PDCluster(...).run()`` (``pd_result``) on the same inputs.
    Replicas are named as the pools name them (p0.., d0..), each snapshot's ``ReplicaState.role``
    says which, and ``RunSnapshot.pd`` has the transfers and the legs. TTFT/TPOT and outputs are
    the decode legs' (a prefill leg's one token is not the client's)."""
    check_window(window_s)
    sim = PDCluster(
        trace,
        prefill,
        decode,
        link,
        short_prompt_tokens=short_prompt_tokens,
        failures=failures,
        link_name=link_name,
    )
    bytes_per_token = link.bytes_total(1)

    def summarize(run: PDRun) -> PDResult:
        return pd_result(run, bytes_per_token, slo)

    return LiveFleetRun(trace, sim, summarize, slo=slo, window_s=window_s, clock_stops_when_done=True)


__all__ = [
    "WAITING_SHOWN",
    "LegFigures",
    "LiveClusterRun",
    "LiveFleetRun",
    "LivePDRun",
    "LiveRun",
    "PDState",
    "ReplicaState",
    "RequestTimeline",
    "RunSnapshot",
    "Slot",
]
