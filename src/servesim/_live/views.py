"""What every live run shows, read from a fleet's read-only snapshot (``cluster.fleet.FleetSnapshot``:
its replicas and every engine ever run), whatever the fleet: each request's slot, each replica's
state, the rolling figures, the events read from the engines' records, a request's timeline.

``LiveBase`` is shared by ``LiveRun`` (one replica: a one-replica snapshot of its engine) and
``LiveFleetRun`` (any fleet). A disaggregated fleet's replicas carry their pool and KV-holding
queue, and only the engines serving the clients' tokens (not the prefill legs) count for the
latencies and outputs; the rest is the same code for every fleet.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace

import numpy as np

from servesim._live.snapshot import WAITING_SHOWN, ReplicaState, RequestTimeline, RunSnapshot, Slot
from servesim.cluster.fleet import FleetReplica, FleetSnapshot, RequestStory
from servesim.cluster.pd.state import PDState
from servesim.engine.admission import REASONS
from servesim.engine.kv_connector import WAITING_FOR_REMOTE_KVS
from servesim.engine.replica import ReplicaView
from servesim.engine.request import (
    OUTCOME_FINISHED,
    OUTCOME_LENGTH_CAPPED,
    OUTCOME_REJECTED_QUEUED_REQS,
    OUTCOME_REJECTED_QUEUED_TOKENS,
    OUTCOME_REJECTED_TIMEOUT,
    OUTCOME_REJECTED_TOO_LONG,
    Request,
)
from servesim.errors import InputError, shown
from servesim.events import (
    Event,
    RecoveryDecision,
    RejectReason,
    ReplicaDown,
    ReplicaWarning,
    RequestPreempted,
    RequestRejected,
    RequestStarved,
)
from servesim.heap import gc_paused
from servesim.traces.schema import Trace

#: Outcomes that refuse a request without output (400, a queue timeout, an API server's 503).
REFUSED = (
    OUTCOME_REJECTED_TOO_LONG,
    OUTCOME_REJECTED_TIMEOUT,
    OUTCOME_REJECTED_QUEUED_REQS,
    OUTCOME_REJECTED_QUEUED_TOKENS,
)


@dataclass
class _Cursor:
    """How much of each engine's records ``events()`` already reported."""

    preemptions: int = 0
    starvations: int = 0


@dataclass
class _Watch:
    cursors: dict[int, _Cursor] = field(default_factory=dict)  # id(replica view) -> cursor
    rejected: np.ndarray | None = None  # requests whose rejection was reported
    moves: int = 0
    nodes: int = 0
    preemptions: dict[int, int] = field(default_factory=dict)  # trace position -> preemptions so far


_ORDER = {ReplicaWarning: 0, ReplicaDown: 1, RecoveryDecision: 2, RequestPreempted: 3, RequestStarved: 4}


def event_order(e: Event) -> tuple[float, int]:
    return (e.time_s, _ORDER.get(type(e), 5))  # type: ignore[union-attr]


def check_window(window_s: float) -> None:
    """The rolling figures' window: a positive number of simulated seconds."""
    if not window_s > 0:
        raise InputError(f"window_s must be > 0, got {window_s!r}")


class LiveBase:
    """What a single-replica and a fleet run share: advancing, snapshots, events, timelines."""

    trace: Trace
    window_s: float

    def __init__(self, trace: Trace, window_s: float) -> None:
        check_window(window_s)
        self.trace = trace
        self.window_s = window_s
        self._tenant = [None if t is None or t != t else str(t) for t in trace.df["tenant"].tolist()]
        self._arrival = np.asarray(trace.df["arrival_time_s"], dtype=np.float64)
        self._watch = _Watch()
        self._held: set[int] = set()  # trace positions of requests ever preempted or moved
        self._moved: set[int] = set()  # of those, the moved ones
        self._held_seen: dict[int, int] = {}  # id(replica view) -> preemption events already read
        self._samples: list[tuple[float, int]] = []  # (time, outputs so far) at snapshots
        self._ids: list[str] = []

    # ------------------------------------------------------------------ to provide
    @property
    def now(self) -> float:
        raise NotImplementedError

    def _fleet(self) -> FleetSnapshot:
        """The run's replicas and every engine ever run, read-only."""
        raise NotImplementedError

    def _story(self, i: int) -> RequestStory:
        raise NotImplementedError

    def _advance_steps(self, n: int) -> int:
        raise NotImplementedError

    def _advance_until(self, t_s: float, max_steps: int) -> int:
        raise NotImplementedError

    def _note_moves(self) -> None:
        """Mark the requests moved off a lost replica since the last call (none on one replica)."""

    # ------------------------------------------------------------------ advancing
    def advance_steps(self, n: int = 1) -> int:
        """Run exactly ``n`` engine steps (fewer only when the run ends); returns how many ran."""
        with gc_paused():
            return self._advance_steps(n)

    def advance_until(self, t_s: float, max_steps: int = sys.maxsize) -> int:
        """Advance to ``t_s`` (or by about ``max_steps`` steps); returns the steps run."""
        with gc_paused():
            return self._advance_until(t_s, max_steps)

    def speculation_totals(self) -> tuple[int, int] | None:
        """Speculative decoding so far: (drafts accepted, verifications) over every engine, as
        vLLM's spec-decode counters; None when the run does not speculate."""
        counters = [e.view.speculation for e in self._fleet().engines]
        if not any(k for k, _, _ in counters):
            return None
        return sum(a for _, a, _ in counters), sum(v for _, _, v in counters)

    # ------------------------------------------------------------------ views
    def _slot(self, engine: ReplicaView, r: Request, name: str | None) -> Slot:
        computed = engine.computed_tokens(r)
        outputs = engine.outputs(r)
        left = r.prompt_len + outputs - computed
        cfg = engine.config
        cap = cfg.max_num_batched_tokens
        if cfg.long_prefill_token_threshold:
            cap = min(cap, cfg.long_prefill_token_threshold)
        if not cfg.enable_chunked_prefill:
            cap = max(cap, r.prompt_len + outputs)
        prefill = left > 1
        total = computed + left if prefill else 0
        chunks = -(-total // cap) if prefill else 0
        chunk = min(computed // cap + 1, chunks) if prefill else 0
        return Slot(
            r.req_id,
            name,
            "prefill" if prefill else "decode",
            computed,
            r.prompt_len,
            outputs,
            r.max_tokens,
            r.prompt_len + outputs,
            r.priority,
            self._tenant[r.idx],
            r.num_preemptions,
            r.starved,
            r.arrival,
            r.first_token if r.first_token >= 0 else None,
            chunk,
            chunks,
            r.idx in self._moved,
        )

    def _replica_state(self, rep: FleetReplica, waiting_shown: int) -> ReplicaState:
        engine, name, alive = rep.view, rep.name, rep.alive
        if alive:
            running = tuple(self._slot(engine, r, name) for r in engine.running())
            waiting = tuple(self._slot(engine, r, name) for r in engine.waiting(waiting_shown))
            num_waiting = engine.num_waiting
            used = engine.kv_blocks_used
        else:
            running, waiting, num_waiting, used = (), (), 0, 0
        state = ReplicaState(
            name or "replica",
            alive,
            rep.accepting,
            engine.step,
            engine.now,
            engine.max_num_seqs,
            running,
            waiting,
            num_waiting,
            used,
            engine.kv_blocks_usable,
            engine.prefix_hit_rate,
            engine.num_preemptions,
            engine.cpu_tier if alive else None,
            kv_groups=engine.kv_blocks_by_group if alive else (),
        )
        if rep.role is None:
            return state
        queue = rep.holding
        held = tuple(
            replace(self._slot(engine, q, state.name), waiting_for_kv=q.status == WAITING_FOR_REMOTE_KVS)
            for q in queue[:waiting_shown]
        )
        kv_wait = sum(1 for q in queue if q.status == WAITING_FOR_REMOTE_KVS)
        return replace(state, role=rep.role, kv_wait=kv_wait, holding=held, num_holding=len(queue))

    def _figures(self, now: float, fleet: FleetSnapshot) -> tuple[list[float | None], float, float, int, int]:
        """Rolling TTFT/TPOT percentiles, output and total tokens/s over the window, closed and
        finished counts (over the engines serving the clients' tokens)."""
        lo = now - self.window_s
        arrival = self._arrival
        ttft_parts, tpot_parts = [], []
        out_tokens = closed = finished_n = 0
        step_tokens = 0.0
        live_ttft: list[float] = []
        self._note_moves()
        for e in fleet.engines:
            engine = e.view
            rec = engine.records
            # Tokens of the steps that ended in the window (the step table: exact, cheap).
            ends = np.frombuffer(rec.step_end, dtype=np.float64)
            k0 = int(np.searchsorted(ends, lo, side="right"))
            if k0 < len(ends):
                step_tokens += float(rec.step_table()["num_tokens"][k0:].sum(dtype=np.int64))
            code = np.frombuffer(rec.outcome, dtype=np.int64)
            if not e.clients:  # a prefill leg: its one token is not the client's; a refusal is
                closed += int(np.count_nonzero(np.isin(code, REFUSED)))
                continue
            self._note_held(engine)
            first = np.frombuffer(rec.first_token, dtype=np.float64)
            fin = np.frombuffer(rec.finish, dtype=np.float64)
            nout = np.frombuffer(rec.num_output, dtype=np.int64)
            sel = first >= lo  # NaN compares False
            ttft_parts.append((first[sel] - arrival[sel]) * 1e3)
            ok = (code == OUTCOME_FINISHED) | (code == OUTCOME_LENGTH_CAPPED)
            done = ok & (fin >= lo) & (nout > 1)
            tpot_parts.append((fin[done] - first[done]) / (nout[done] - 1) * 1e3)
            finished_n += int(np.count_nonzero(ok))
            closed += engine.num_closed
            out_tokens += int(nout.sum())
        for engine, r in self._open_requests(fleet):
            if r.first_token >= lo:
                live_ttft.append((r.first_token - r.arrival) * 1e3)
            out_tokens += engine.outputs(r)
        ttft_parts.append(np.asarray(live_ttft, dtype=np.float64))
        ttft = np.concatenate(ttft_parts)
        tpot = np.concatenate(tpot_parts) if tpot_parts else np.empty(0)

        def pct(a: np.ndarray, q: float) -> float | None:
            return float(np.percentile(a, q)) if len(a) else None

        span = min(self.window_s, now) if now > 0 else 0.0
        return (
            [pct(ttft, 50), pct(ttft, 99), pct(tpot, 50), pct(tpot, 99)],
            self._output_rate(now, out_tokens),
            step_tokens / span if span > 0 else 0.0,
            closed,
            finished_n,
        )

    def _note_held(self, engine: ReplicaView) -> None:
        """Remember requests that hold outputs while not running (preempted ones)."""
        n = self._held_seen.get(id(engine), 0)
        events = engine.records.preemption_events
        for e in events[n:]:
            self._held.add(e[2])
        self._held_seen[id(engine)] = len(events)

    def _open_requests(self, fleet: FleetSnapshot) -> list[tuple[ReplicaView, Request]]:
        """Requests not closed that may hold outputs: the running ones, and preempted or moved
        ones waiting (each once, with the engine it is on)."""
        out: list[tuple[ReplicaView, Request]] = []
        seen: set[int] = set()
        for rep in fleet.replicas:
            if not rep.alive or not rep.clients:
                continue
            engine = rep.view
            for r in engine.running():
                out.append((engine, r))
                seen.add(r.idx)
            for i in self._held:
                r2 = engine.request(i)
                if r2 is not None and i not in seen:
                    out.append((engine, r2))
                    seen.add(i)
        closed = [
            i for i in self._held if i not in seen and any(e.view.records.outcome[i] for e in fleet.engines)
        ]
        self._held.difference_update(closed)  # closed for good: its outputs are in the records now
        return out

    def _output_rate(self, now: float, outputs: int) -> float:
        """Output tokens/s over the window, from the totals seen at earlier snapshots."""
        samples = self._samples
        if not samples or now > samples[-1][0]:
            samples.append((now, outputs))
        lo = now - self.window_s
        while len(samples) > 2 and samples[1][0] <= lo:
            samples.pop(0)
        t0, o0 = samples[0]
        return (outputs - o0) / (now - t0) if now > t0 else 0.0

    def _snapshot(
        self, step: int, done: bool, waiting_shown: int, fleet: FleetSnapshot, pd: PDState | None = None
    ) -> RunSnapshot:
        now = self.now
        lat, out_rate, total_rate, closed, finished = self._figures(now, fleet)  # notes moves first
        reps = tuple(self._replica_state(rep, waiting_shown) for rep in fleet.replicas)
        return RunSnapshot(
            now,
            step,
            len(self.trace),
            fleet.num_arrived,
            closed,
            finished,
            done,
            reps,
            self.window_s,
            lat[0],
            lat[1],
            lat[2],
            lat[3],
            out_rate,
            total_rate,
            fleet.num_parked,
            pd,
        )

    # ------------------------------------------------------------------ events, timelines
    def _engine_events(self, fleet: FleetSnapshot) -> list[Event]:
        """Preemptions, STARVED flags and rejections since the last call, from the records."""
        out: list[Event] = []
        if self._watch.rejected is None:
            self._ids = self.trace.df["req_id"].astype(str).tolist()
            self._watch.rejected = np.zeros(len(self.trace), dtype=bool)
        rejected = self._watch.rejected
        preempted: list[tuple[float, int, str | None, int]] = []
        for e in fleet.engines:
            engine, name = e.view, e.name
            cur = self._watch.cursors.setdefault(id(engine), _Cursor())
            rec = engine.records
            for t, _step, i, lost in rec.preemption_events[cur.preemptions :]:
                preempted.append((t, i, name, lost))
            cur.preemptions = len(rec.preemption_events)
            for t, _step, i, _lost in rec.starvation_events[cur.starvations :]:
                out.append(RequestStarved(t, self._ids[i], name, engine.starvation_threshold))
            cur.starvations = len(rec.starvation_events)
            code = np.frombuffer(rec.outcome, dtype=np.int64)
            new = np.flatnonzero(np.isin(code, REFUSED) & ~rejected)  # an aborted request is no refusal
            if len(new):
                rejected[new] = True
                fin = np.frombuffer(rec.finish, dtype=np.float64)
                for i in new.tolist():
                    why: RejectReason = (
                        "queue_timeout"
                        if code[i] == OUTCOME_REJECTED_TIMEOUT
                        else REASONS.get(int(code[i]), "prompt_too_long")
                    )
                    out.append(RequestRejected(float(fin[i]), self._ids[i], name, why))
        counts = self._watch.preemptions
        for t, i, name, lost in sorted(preempted, key=lambda e: e[0]):
            counts[i] = counts.get(i, 0) + 1
            out.append(RequestPreempted(t, self._ids[i], name, lost, counts[i]))
        return out

    def timeline(self, req_id: str) -> RequestTimeline:
        """What happened to ``req_id`` so far (for a request-detail view)."""
        ids = self.trace.df["req_id"].astype(str).tolist()
        try:
            i = ids.index(req_id)
        except ValueError:
            raise InputError(f"no request {shown(req_id)} in the trace") from None
        row = self.trace.df.iloc[i]
        story = self._story(i)
        slot = None if story.held_by is None else self._slot(*story.held_by)
        return RequestTimeline(
            req_id,
            story.state,
            story.replica,
            int(row["prompt_len"]),
            int(row["output_len"]),
            int(row["priority"]),
            self._tenant[i],
            slot,
            story.events,
        )


__all__ = ["WAITING_SHOWN", "LiveBase", "check_window", "event_order"]
