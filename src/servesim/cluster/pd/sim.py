"""``PDCluster``: a disaggregated fleet on its clock: arrivals (the trace's and ``submit``'s), step
ends, client aborts, failures and comebacks, in time order; see ``servesim.cluster.pd``."""

from __future__ import annotations

import heapq
import math
import sys

from servesim.cluster.fleet import Legs, RequestStory
from servesim.cluster.pd.failures import PDFailures
from servesim.cluster.pd.invariants import check_pd_invariants, empty_step
from servesim.cluster.pd.records import REJECTED, PDRecovery, PDRun, Transfer
from servesim.cluster.pd.state import PDState, transfer_state
from servesim.cluster.pd.view import pd_legs, pd_replica_of, pd_story
from servesim.engine.kv_connector import WAITING_FOR_REMOTE_KVS
from servesim.engine.replica import close_unheld
from servesim.engine.request import OUTCOME_UNFINISHED, RUNNING, Request
from servesim.errors import InternalError
from servesim.events import Event, LegRecovered


class PDCluster(PDFailures):
    """A prefill pool and a decode pool on one clock; see ``servesim.cluster.pd``."""

    # ------------------------------------------------------------------ the clock
    def run(self) -> PDRun:
        """Every arrival and failure of the trace, to the end; the outcome, invariants checked."""
        self.advance()
        return self.finish()

    def advance(self, until: float = math.inf, max_steps: int = sys.maxsize) -> int:
        """Process step ends, arrivals (the trace's and ``submit``'s) and failures in time order;
        returns the engine steps ended. Stops before the first step end or event at or after
        ``until``, after ``max_steps`` step ends, or when nothing is left to do, which includes
        the case where only empty steps remain, waiting for KV that nobody will ever read
        (``_stuck``): stepping on would never end (``drained`` says so afterwards)."""
        steps = self._advance(until, max_steps)
        if steps < max_steps:
            t = self.next_time()
            # nothing is due, or only empty steps waiting on KV nobody reads (it stopped short)
            self._drained = t == math.inf or t < until
        return steps

    def advance_steps(self, n: int) -> int:
        """Exactly ``n`` step ends of either pool (fewer only when nothing is left)."""
        return self.advance(math.inf, n)

    @property
    def drained(self) -> bool:
        """Nothing is left to run (every request has an outcome, or is parked for good): known
        once an advance stops short of its step count (a step just ended has no next one begun)."""
        return self._drained

    def _advance(self, until: float, max_steps: int) -> int:
        n_p = self.n_prefill
        engines = self.current  # replaced in place when a replica comes back
        steps = 0
        while True:
            t_arr = self._next_arrival_time()
            t_ev = self._events[self._ev][0] if self._ev < len(self._events) else math.inf
            t_ab = self._aborts[0][0] if self._aborts else math.inf
            t_ext = min(t_arr, t_ev, t_ab)
            horizon = t_ext if t_ext < until else until
            for k, e in enumerate(engines):
                if self.inflight[k] is None and self.alive[k]:
                    self.inflight[k] = e.begin_step(horizon)
            k_step, t_step = -1, math.inf
            for k, pend in enumerate(self.inflight):
                if pend is not None and pend.end < t_step:
                    k_step, t_step = k, pend.end
            if k_step >= 0 and t_step <= t_ext and t_step < until:
                pend = self.inflight[k_step]
                if pend is None:
                    raise InternalError("invariant broken: no step in flight")
                finished = engines[k_step].end_step(pend)
                self.inflight[k_step] = None
                if k_step < n_p:
                    for r in finished:
                        self._hand_off(r, t_step)
                if self._aborts_after_step[k_step]:
                    self._apply_aborts(k_step, t_step)
                if t_step > self.now:
                    self.now = t_step
                steps += 1
                if steps >= max_steps or (t_ext == math.inf and empty_step(pend) and self._stuck()):
                    return steps
                continue
            if t_ext == math.inf or t_ext >= until:
                return steps
            self.now = t_ext
            if t_arr <= t_ev and t_arr <= t_ab:
                r = self._pop_arrival()
                self._arrive(r, self._copy(r))
            elif t_ab < t_ev:
                _, _, idx = heapq.heappop(self._aborts)
                self._abort(idx, t_ab)
            else:
                self._ev += 1
                self._apply_event(self._ev - 1)

    def finish(self) -> PDRun:
        """Close every live replica (outcomes, pending sends drained) and check docs/invariants.md's
        P/D invariants over the whole run."""
        for k, e in enumerate(self.current):
            if self.alive[k]:
                e.finish()
        run = self.run_
        for idx, r in run.prefill_req.items():  # timed out in a prefill queue: never handed off
            if r.outcome in REJECTED and run.decode_req[idx].outcome not in REJECTED:
                self._reject(r)
        run.prefill, run.decode = self.p_eng, self.d_eng
        run.parked = [r.idx for r in self._parked]
        check_pd_invariants(run)
        return run

    def next_time(self) -> float:
        """When the next step ends or arrival or failure is due (inf: nothing is pending)."""
        t_ev = self._events[self._ev][0] if self._ev < len(self._events) else math.inf
        t = min(self._next_arrival_time(), t_ev, self._aborts[0][0] if self._aborts else math.inf)
        for pend in self.inflight:
            if pend is not None and pend.end < t:
                t = pend.end
        return t

    def _stuck(self) -> bool:
        """No arrival or failure is left, every step in flight schedules nothing, and no KV
        transfer will ever end: the empty steps vLLM takes while transfers are pending would go on
        for ever. (``check_pd_invariants`` then names any request that did not finish.)"""
        if any(p is not None and not empty_step(p) for p in self.inflight):
            return False
        for k, e in enumerate(self.current):
            if not self.alive[k]:
                continue
            conn = self._conn(e)
            view = self.views[k]
            if view.num_running or view.num_waiting or conn.finished_recving:
                return False
            if conn.next_due() < math.inf:
                return False
        return True

    # ------------------------------------------------------------------ arrivals
    def submit(self, r: Request) -> None:
        """An online arrival at ``r.arrival`` (not before the cluster's time): routed as a trace
        row arriving then would be (after any trace row arriving at the same time)."""
        self._check_arrival(r)
        self._origin[r.idx] = r
        self.run_.num_online += 1
        heapq.heappush(self._online, (r.arrival, r.idx, self._copy(r)))
        self._drained = False

    def _next_arrival_time(self) -> float:
        arr = self.arrays
        t = arr.arrival[self._next_arrival] if self._next_arrival < arr.n else math.inf
        if self._online and self._online[0][0] < t:
            return self._online[0][0]
        return t

    def _pop_arrival(self) -> Request:
        arr = self.arrays
        nxt = self._next_arrival
        if nxt < arr.n and (not self._online or arr.arrival[nxt] <= self._online[0][0]):
            self._next_arrival = nxt + 1
            return arr.make_request(nxt)
        return heapq.heappop(self._online)[2]

    @property
    def num_arrived(self) -> int:
        return len(self.run_.decode_req)

    # ------------------------------------------------------------------ aborts
    def abort(self, r: Request, time_s: float) -> None:
        """The client of ``r`` (a ``make_request`` request, submitted) went away at ``time_s``:
        as vLLM's P/D proxy, both legs are aborted. The leg a replica holds finishes as aborted
        and its blocks go back to the pool; a KV read in flight is cut (its link freed); the
        prefill side frees the blocks it kept for the transfer. Applied between steps, in time
        order with arrivals and failures: a leg in a step in flight is aborted when it ends."""
        heapq.heappush(self._aborts, (max(time_s, self.now, r.arrival), self._abort_seq, r.idx))
        self._abort_seq += 1
        self._drained = False

    def _abort_after_step(self, k: int, r: Request, t: float) -> None:
        self._abort(r.idx, t)

    def _abort(self, idx: int, t: float) -> None:
        run = self.run_
        d = run.decode_req.get(idx)
        if d is None or d.outcome != OUTCOME_UNFINISHED:
            return  # finished or rejected before the abort took effect (or never submitted)
        k = run.decode_of.get(idx)
        slot = -1 if k is None else self.n_prefill + k
        if k is not None and self.alive[slot] and self.views[slot].holds(d):
            if self.inflight[slot] is not None and d.status == RUNNING:
                self._aborts_after_step[slot].append(d)
                return
            conn = self._d_conn(k)
            receiving = conn.receiving(idx)
            self.current[slot].abort(d, t)
            if receiving:  # the read is cut: its blocks went back with the request
                conn.cancel_recv(idx)
                self._cut_by_abort(idx, k, t)
        else:
            p = run.prefill_of.get(idx)
            pr = run.prefill_req.get(idx)
            if pr is not None and p is not None and self.alive[p] and self.views[p].holds(pr):
                if self.inflight[p] is not None and pr.status == RUNNING:
                    self._aborts_after_step[p].append(pr)
                    return
                self.current[p].abort(pr, t)  # no KV kept: the decode leg never starts
            elif d in self._parked:
                self._parked.remove(d)
            close_unheld(d, t)
        self.aborted.add(idx)
        p = run.prefill_of.get(idx)
        if p is not None and self._prefill_holds(idx, t):
            self._p_conn(p).send_done(idx, t)  # nobody will read it: freed at its next step

    def _cut_by_abort(self, idx: int, k: int, t: float) -> None:
        """The aborted request's transfer stops at ``t``: the links it held (or was queued for)
        are free again from then, where no later transfer was booked behind it."""
        x = self.run_.transfers[idx]
        p = self.run_.prefill_of[idx]
        free_at = max(x.start_s, min(t, x.end_s))
        if self._in_free[k] == x.end_s:
            self._in_free[k] = free_at
        if self._out_free[p] == x.end_s:
            self._out_free[p] = free_at
        self._cut(idx, t)
        x.aborted = True

    # ------------------------------------------------------------------ rolling records
    def _forget(self, keep: int) -> list[Request]:
        """The run forgets the closed requests (finished, rejected or aborted, no KV held for
        them) beyond the latest ``keep``, with their legs' bookkeeping; ``run_.legs`` and
        ``run_.recoveries`` keep their latest entries (``legs_base`` counts the legs dropped).
        Returns the decode legs forgotten."""
        run = self.run_
        if len(run.legs) > 2 * keep:
            drop = len(run.legs) - keep
            del run.legs[:drop]
            self.legs_base += drop
        if len(run.recoveries) > 2 * keep:
            del run.recoveries[: len(run.recoveries) - keep]
        if len(run.decode_req) <= 2 * keep:
            return []
        held = {i for e in self.p_eng for i in self._conn(e).pending_sends()}
        parked = {r.idx for r in self._parked}
        closed = [
            idx
            for idx, d in run.decode_req.items()
            if d.outcome != OUTCOME_UNFINISHED and idx not in held and idx not in parked
        ]
        gone = closed[: max(0, len(run.decode_req) - keep)]
        conns = [self._conn(e) for e in self.current]
        out = []
        for idx in gone:
            out.append(run.decode_req.pop(idx))
            for table in (
                run.prefill_req,
                run.prefill_of,
                run.decode_of,
                run.transfers,
                run.sender,
                run.receiver,
            ):
                table.pop(idx, None)
            run.local.discard(idx)
            self._origin.pop(idx, None)
            self.aborted.discard(idx)
            for c in conns:
                for col in (c.recv_started, c.recv_tokens, c.recv_done, c.sent, c.recv_failed, c.gpu_hit):
                    col.pop(idx, None)
        return out

    # ------------------------------------------------------------------ reading
    def _holding(self, k: int) -> tuple[Request, ...]:
        return tuple(self._conn(self.current[k]).holding)

    def transfers(self, time_s: float) -> PDState:
        waiting = sum(
            1
            for k in range(len(self.current))
            if self.alive[k]
            for q in self._holding(k)
            if q.status == WAITING_FOR_REMOTE_KVS
        )
        decode = [
            v for v, k in zip(self.engine_views, self.engine_replica, strict=True) if k >= self.n_prefill
        ]
        return transfer_state(
            self.run_,
            self.tally,
            decode,
            time_s,
            link=self.link_name,
            short_prompt_tokens=self.short,
            waiting_for_kv=waiting,
            bytes_per_token=self.link.bytes_total(1),
        )

    @property
    def recoveries(self) -> list[PDRecovery]:
        """What became of each request a lost replica held (the latest, when rolling)."""
        return self.run_.recoveries

    def recovery_events(self, start: int = 0) -> list[Event]:
        return [
            LegRecovered(r.time_s, r.req_id, r.node, r.action, r.target) for r in self.run_.recoveries[start:]
        ]

    def story(self, idx: int, now: float) -> RequestStory:
        return pd_story(self, idx, now)

    def replica_of(self, r: Request) -> str | None:
        return pd_replica_of(self, r)

    def legs(self, r: Request) -> Legs | None:
        return pd_legs(self, r)

    def follow(self, r: Request) -> tuple[Request, Request] | None:
        """``r``'s decode leg (the stream the proxy returns) and its first leg (the prefill leg, or
        the decode leg of a prompt prefilled there); None before it arrived."""
        d = self.run_.decode_req.get(r.idx)
        if d is None:
            return None
        return d, self.run_.prefill_req.get(r.idx, d)

    def transfer_legs(self, start: int) -> tuple[list[Transfer], int]:
        legs = self.run_.legs
        return legs[max(start - self.legs_base, 0) :], self.legs_base + len(legs)


__all__ = ["PDCluster"]
