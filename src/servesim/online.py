"""A fleet served online: requests arrive, stream and leave at times the caller gives.

``servesim.live`` drives a run whose requests are all known up front; an emulator (``servesim
emulate``) learns them one by one from clients. ``OnlineFleet`` is the cluster simulator fed that
way: ``submit`` routes a request at its arrival time exactly as a trace row arriving then would be
(tests/live check that a trace submitted online gives the batch run's records), ``abort`` finishes a
request whose client went away (vLLM's ``FINISHED_ABORTED``: its KV blocks go back to the pool),
``fail`` loses a replica (its requests are recovered by the recovery planner's decision), and
``advance_until`` moves the shared clock. No wall clock here: the caller maps real time to
simulated time, so this module is deterministic and testable without a server.

``rolling_records=True`` (what the emulator uses) keeps only each engine's latest step rows and
request columns, so a server that runs for days holds bounded memory; no batch result can be
built from such a fleet (tests compare records, so they leave it off).

The engines run the naive loop (``fast=False``, results identical to the fast path): every
request's token count is exact after each step, which is what a token stream needs.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from servesim.cluster import (
    ClusterSimulator,
    KVCheckpointing,
    RecoveryContext,
    Replica,
    RouterSpec,
    cluster_simulator,
)
from servesim.cluster.pd import SERVED, PDCluster, PDRecovery, Transfer
from servesim.cluster.simulate import Move
from servesim.engine.replica import ReplicaView
from servesim.engine.request import FINISHED, OUTCOME_UNFINISHED, OUTCOMES, REJECTED, Request
from servesim.errors import ConfigError
from servesim.traces.schema import Trace

# ``rolling_records``: per replica, the engine records kept (between these and twice these):
# at most ~8 MB of step rows and ~10 MB of request columns, whatever the server's uptime.
ROLLING_STEPS = 1 << 16
ROLLING_REQUESTS = 1 << 16


@dataclass(frozen=True, slots=True)
class ReplicaMetrics:
    """One replica's gauges and counters as vLLM's /metrics reports them."""

    name: str
    alive: bool
    num_running: int
    num_waiting: int
    kv_usage: float  # 0..1
    prefix_cache_queries: int  # prompt tokens looked up
    prefix_cache_hits: int  # of those, tokens found cached
    num_preemptions: int
    pool: str = ""  # a disaggregated fleet's: "prefill" | "decode"


class OnlineRequest:
    """A submitted request as its client sees it: tokens so far, timings, outcome (read-only)."""

    __slots__ = ("_r",)

    def __init__(self, r: Request) -> None:
        self._r = r

    @property
    def req_id(self) -> str:
        return self._r.req_id

    @property
    def prompt_len(self) -> int:
        return self._r.prompt_len

    @property
    def max_tokens(self) -> int:
        return self._r.max_tokens

    @property
    def num_output(self) -> int:
        return self._r.num_output

    @property
    def arrival_s(self) -> float:
        return self._r.arrival

    @property
    def first_scheduled_s(self) -> float | None:
        return self._r.first_scheduled if self._r.first_scheduled >= 0 else None

    @property
    def first_token_s(self) -> float | None:
        return self._r.first_token if self._r.first_token >= 0 else None

    @property
    def last_token_s(self) -> float | None:
        return self._r.last_token if self._r.last_token >= 0 else None

    @property
    def finish_s(self) -> float | None:
        return self._r.finish_time if self._r.finish_time >= 0 else None

    @property
    def done(self) -> bool:
        return self._r.outcome != OUTCOME_UNFINISHED or self._r.status in (FINISHED, REJECTED)

    @property
    def outcome(self) -> str:
        """unfinished | finished | finished_max_model_len | rejected_prompt_too_long | aborted ..."""
        return OUTCOMES[self._r.outcome]

    @property
    def num_preemptions(self) -> int:
        return self._r.num_preemptions


class OnlineFleet:
    """Replicas on one simulated clock, fed online; see the module docstring."""

    def __init__(
        self,
        replicas: Sequence[Replica],
        router: RouterSpec | None = None,
        recovery: str = "planner",
        context: RecoveryContext | None = None,
        *,
        kv_checkpointing: KVCheckpointing = "continuous",
        fast: bool = False,
        rolling_records: bool = False,
    ) -> None:
        unsized = [r.name for r in replicas if r.config.max_model_len is None]
        if unsized:  # a batch run derives it from the trace; online there is none
            raise ConfigError(f"replicas {', '.join(unsized)}: an online fleet needs max_model_len set")
        self.sim: ClusterSimulator = cluster_simulator(
            Trace.empty("<online>"),
            replicas,
            router,
            (),
            recovery,
            context,
            kv_checkpointing=kv_checkpointing,
            fast=fast,
        )
        self.names = [r.name for r in replicas]
        self.rolling_records = rolling_records
        if rolling_records:  # a server that runs for days: hold the latest records only
            self.sim.roll_records(ROLLING_STEPS, ROLLING_REQUESTS)

    @property
    def now(self) -> float:
        """The simulated time the fleet has been advanced to (the latest step end or event)."""
        return self.sim.now

    @property
    def max_model_len(self) -> int:
        return min(v.max_model_len for v in self.sim.views)

    def submit(
        self,
        req_id: str,
        time_s: float,
        prompt_len: int,
        max_tokens: int,
        *,
        priority: int = 0,
        hash_ids: list[int] | None = None,
        hash_block_size: int = 0,
    ) -> OnlineRequest:
        """A request arriving at ``time_s`` (clamped to the fleet's time). ``hash_ids``: one id per
        ``hash_block_size`` prompt tokens identifying the prefix up to there (prefix caching)."""
        r = self.sim.make_request(
            req_id,
            max(time_s, self.sim.now),
            prompt_len,
            max_tokens,
            priority=priority,
            hash_ids=hash_ids,
            hash_block_size=hash_block_size,
        )
        self.sim.submit(r)
        return OnlineRequest(r)

    def abort(self, req: OnlineRequest, time_s: float) -> None:
        """The client went away at ``time_s``: the request finishes as aborted, its KV freed."""
        self.sim.abort(req._r, time_s)

    def fail(self, node: str, time_s: float, recover_after_s: float | None = None) -> None:
        """Lose ``node`` at ``time_s`` (optionally back, empty, ``recover_after_s`` later)."""
        self.sim.inject_failure(node, max(time_s, self.sim.now), recover_after_s)

    def advance_until(self, time_s: float) -> int:
        """Apply every step end and event before ``time_s``; returns the steps ended."""
        steps = self.sim.advance(time_s)
        if self.rolling_records:
            self.sim.trim_records()
        return steps

    def next_time(self) -> float:
        """When the next step ends or event is due (inf: nothing to do until a submission)."""
        return self.sim.next_time()

    @property
    def moves(self) -> list[Move]:
        """Every recovery decision so far (request, from, to, strategy, tokens moved, delay)."""
        return self.sim.moves

    def num_parked(self) -> int:
        """Requests no replica holds: they wait for one to come back (every replica is down)."""
        return self.sim.num_parked

    def parked(self) -> list[OnlineRequest]:
        """The requests waiting for a replica to come back (every replica is down), oldest first."""
        return [OnlineRequest(r) for r in self.sim.parked]

    def replica_of(self, req: OnlineRequest) -> str | None:
        """The replica holding ``req`` now, or the one that finished it; None while none does
        (waiting for a replica to come back, or in transit between two)."""
        r = req._r
        for k, view in enumerate(self.sim.views):
            if view.holds(r):
                return self.names[k]
        if r.finish_time >= 0:  # latest incarnation first: a moved request finished there
            for view, k in zip(
                reversed(self.sim.engine_views), reversed(self.sim.engine_replica), strict=True
            ):
                rec = view.records
                i = r.idx - rec.request_base
                if 0 <= i < len(rec.finish) and rec.finish[i] == r.finish_time:
                    return self.names[k]
        return None

    def replica_metrics(self) -> list[ReplicaMetrics]:
        """Per replica, over all its incarnations (a recovered node starts a new engine)."""
        out = []
        for k, name in enumerate(self.names):
            view = self.sim.views[k]
            past = [
                v.records
                for v, j in zip(self.sim.engine_views, self.sim.engine_replica, strict=True)
                if j == k
            ]
            out.append(
                ReplicaMetrics(
                    name=name,
                    alive=self.sim.alive[k],
                    num_running=view.num_running if self.sim.alive[k] else 0,
                    num_waiting=view.num_waiting if self.sim.alive[k] else 0,
                    kv_usage=view.kv_usage if self.sim.alive[k] else 0.0,
                    prefix_cache_queries=sum(rec.prefix_queries for rec in past),
                    prefix_cache_hits=sum(rec.prefix_hits for rec in past),
                    num_preemptions=sum(rec.num_preemption_events() for rec in past),
                )
            )
        return out

    def step_in_flight_at_arrival(self, req: OnlineRequest) -> float:
        """The duration of the step its replica was running when ``req`` arrived, if it had to
        wait for it (0 otherwise): what vLLM's asynchronous scheduling adds to its latencies (a
        request arriving during step n joins step n+2; ``servesim.perf.replay.async_lag``)."""
        r = req._r
        if r.first_scheduled < 0:
            return 0.0
        for view in self.sim.engine_views:
            rec = view.records
            i = r.idx - rec.request_base  # the recorder keeps the latest requests (roll_records)
            here = view.holds(r) or (
                0 <= i < len(rec.first_scheduled) and rec.first_scheduled[i] == r.first_scheduled
            )
            if not here:
                continue
            k = bisect_right(rec.step_end, r.arrival)  # among the steps kept
            if k >= len(rec.step_end):
                return 0.0
            start, duration = rec.step_row(rec.step_base + k)[:2]
            running = start <= r.arrival < start + duration and r.first_scheduled > r.arrival
            return duration if running else 0.0
        return 0.0

    def check_invariants(self) -> None:
        """Block and token conservation on every live replica (tests)."""
        for k, engine in enumerate(self.sim.current):
            if self.sim.alive[k] and self.sim.inflight[k] is None:
                engine.assert_invariants()


class OnlinePDRequest(OnlineRequest):
    """A request of a disaggregated fleet as its client sees it: the decode leg (the stream the
    proxy returns), and the first leg's first scheduling (its queue time)."""

    __slots__ = ("_first",)

    def __init__(self, r: Request) -> None:
        super().__init__(r)
        self._first: Request | None = None  # the prefill leg (or the decode leg, prefilled there)

    @property
    def first_scheduled_s(self) -> float | None:
        first = self._first if self._first is not None else self._r
        return first.first_scheduled if first.first_scheduled >= 0 else None


class OnlinePDFleet:
    """A prefill pool and a decode pool (``cluster.pd.PDCluster``) fed online: ``OnlineFleet``'s
    interface where it applies. A request arrives at a prefill replica, its KV moves to a decode
    replica over the link and its tokens stream from there (the client's TTFT counts prefill,
    transfer and the first decode step); ``abort`` aborts both legs; ``fail`` loses a replica of
    either pool (``p0``, ``d1``), whose requests go on as docs/cluster.md's P/D recovery says.
    ``rolling_records``: bounded memory (``PDCluster.roll_records``); tests that compare with a
    batch run leave it off."""

    def __init__(
        self,
        prefill: Sequence[Replica],
        decode: Sequence[Replica],
        link: RecoveryContext,
        *,
        short_prompt_tokens: int = 0,
        prefill_router: RouterSpec | None = None,
        decode_router: RouterSpec | None = None,
        rolling_records: bool = False,
    ) -> None:
        unsized = [r.name for r in (*prefill, *decode) if r.config.max_model_len is None]
        if unsized:  # a batch run derives it from the trace; online there is none
            raise ConfigError(f"replicas {', '.join(unsized)}: an online fleet needs max_model_len set")
        self.cluster = PDCluster(
            Trace.empty("<online>"),
            prefill,
            decode,
            link,
            short_prompt_tokens=short_prompt_tokens,
            prefill_router=prefill_router,
            decode_router=decode_router,
        )
        self.link = link
        self.prefill_names = [r.name for r in prefill]
        self.decode_names = [r.name for r in decode]
        self.names = self.prefill_names + self.decode_names
        self.pools = {n: "prefill" for n in self.prefill_names} | {n: "decode" for n in self.decode_names}
        self._max_model_len = min(int(r.config.max_model_len or 0) for r in (*prefill, *decode))
        self._open: dict[int, OnlinePDRequest] = {}  # submitted, not closed: their legs followed
        self._leg_cursor = 0  # ``run_.legs`` entries (absolute) already looked at
        self._booked: list[Transfer] = []  # transfers booked whose end is not reported yet
        self.rolling_records = rolling_records
        if rolling_records:
            self.cluster.roll_records(ROLLING_STEPS, ROLLING_REQUESTS)

    @property
    def now(self) -> float:
        return self.cluster.now

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    def submit(
        self,
        req_id: str,
        time_s: float,
        prompt_len: int,
        max_tokens: int,
        *,
        priority: int = 0,
        hash_ids: list[int] | None = None,
        hash_block_size: int = 0,
    ) -> OnlinePDRequest:
        """A request arriving at ``time_s`` (clamped to the fleet's time), as ``OnlineFleet.submit``."""
        r = self.cluster.make_request(
            req_id,
            max(time_s, self.cluster.now),
            prompt_len,
            max_tokens,
            priority=priority,
            hash_ids=hash_ids,
            hash_block_size=hash_block_size,
        )
        self.cluster.submit(r)
        req = OnlinePDRequest(r)
        self._open[r.idx] = req
        return req

    def abort(self, req: OnlineRequest, time_s: float) -> None:
        """The client went away at ``time_s``: both legs aborted, every block they held freed."""
        self.cluster.abort(req._r, time_s)

    def fail(self, node: str, time_s: float, recover_after_s: float | None = None) -> None:
        """Lose ``node`` (a replica of either pool) at ``time_s``, optionally back later."""
        self.cluster.inject_failure(node, max(time_s, self.cluster.now), recover_after_s)

    def advance_until(self, time_s: float) -> int:
        """Apply every step end and event before ``time_s``; returns the steps ended."""
        steps = self.cluster.advance(time_s)
        self._follow()
        if self.rolling_records:
            for d in self.cluster.trim_records():
                req = self._open.pop(d.idx, None)
                if req is not None:
                    req._r = d
        return steps

    def _follow(self) -> None:
        """Point every open request at its current legs (a lost decode replica's request starts a
        fresh decode leg); forget the closed ones."""
        run = self.cluster.run_
        closed = []
        for idx, req in self._open.items():
            d = run.decode_req.get(idx)
            if d is None:
                continue  # not arrived yet
            req._r = d
            if req._first is None:
                req._first = run.prefill_req.get(idx, d)
            if req.done:
                closed.append(idx)
        for idx in closed:
            del self._open[idx]

    def next_time(self) -> float:
        return self.cluster.next_time()

    @property
    def recoveries(self) -> list[PDRecovery]:
        """What became of each request a lost replica held (the latest, when rolling)."""
        return self.cluster.run_.recoveries

    def num_parked(self) -> int:
        """Decode legs no decode replica holds: they wait for one to come back."""
        return len(self.cluster.parked_requests)

    def parked(self) -> list[OnlineRequest]:
        return [OnlineRequest(r) for r in self.cluster.parked_requests]

    def pool_of(self, name: str) -> str:
        return self.pools[name]

    def replica_of(self, req: OnlineRequest) -> str | None:
        """The decode replica streaming (or that finished) ``req``; while its prefill leg runs,
        the prefill replica; None while none holds it (parked, or not arrived)."""
        run = self.cluster.run_
        idx = req._r.idx
        d = run.decode_req.get(idx)
        k = run.decode_of.get(idx)
        if d is not None and k is not None and (self.cluster.d_views[k].holds(d) or d.finish_time >= 0):
            return self.decode_names[k]
        p = run.prefill_of.get(idx)
        if p is not None and d is not None and d not in self.cluster.parked_requests:
            return self.prefill_names[p]
        return None

    def legs(self, req: OnlineRequest) -> dict[str, tuple[str, float]] | None:
        """A served request's time split as ``cluster.pd_results`` splits it (the same formulas;
        tests/live/test_online_pd.py checks they agree): per leg, the replica and the seconds.
        None until it is served (or when it was rejected, aborted, or forgotten)."""
        run = self.cluster.run_
        idx = req._r.idx
        d = run.decode_req.get(idx)
        dk = run.decode_of.get(idx)
        if d is None or dk is None or d.outcome not in SERVED:
            return None
        dn = self.decode_names[dk]
        x = run.transfers.get(idx)
        if idx in run.local:  # prefilled on the decode replica: its queue there is the first
            return {
                "prefill_queue": (dn, d.first_scheduled - d.arrival),
                "decode": (dn, d.finish_time - d.first_scheduled),
            }
        p = run.prefill_req[idx]
        pn = self.prefill_names[run.prefill_of[idx]]
        out = {
            "prefill_queue": (pn, p.first_scheduled - d.arrival),
            "prefill": (pn, p.finish_time - p.first_scheduled),
        }
        if x is None:  # its KV was lost before it landed: the decode replica recomputed the prompt
            return out | {
                "decode_queue": (dn, d.first_scheduled - p.finish_time),
                "decode": (dn, d.finish_time - d.first_scheduled),
            }
        landed = run.receiver[idx].recv_done[idx]
        return out | {
            "decode_queue": (dn, x.ready_s - p.finish_time),
            "transfer": (dn, landed - x.ready_s),
            "decode": (dn, d.finish_time - landed),
        }

    def ended_transfers(self) -> list[Transfer]:
        """The KV transfers that ended (landed, or were cut off) since the last call."""
        c = self.cluster
        legs = c.run_.legs
        start = max(self._leg_cursor - c.legs_base, 0)
        self._booked.extend(legs[start:])
        self._leg_cursor = c.legs_base + len(legs)
        now = c.now
        ended = [x for x in self._booked if x.end_s <= now or not x.landed]
        if ended:
            self._booked = [x for x in self._booked if not (x.end_s <= now or not x.landed)]
        return ended

    def replica_metrics(self) -> list[ReplicaMetrics]:
        """Per replica of both pools, over all its incarnations (a recovered one starts a new engine)."""
        c = self.cluster
        out = []
        pools = (
            ("prefill", c.p_eng, c.p_views, c.p_alive, self.prefill_names),
            ("decode", c.d_eng, c.d_views, c.d_alive, self.decode_names),
        )
        for pool, engines, views, alive, names in pools:
            for k, name in enumerate(names):
                past = [ReplicaView(e).records for e in (*c.run_.retired, engines[k]) if e.name == name]
                holding = c.kv_waiting(engines[k]) if alive[k] else 0
                out.append(
                    ReplicaMetrics(
                        name=name,
                        alive=alive[k],
                        num_running=views[k].num_running if alive[k] else 0,
                        num_waiting=views[k].num_waiting + holding if alive[k] else 0,
                        kv_usage=views[k].kv_usage if alive[k] else 0.0,
                        prefix_cache_queries=sum(rec.prefix_queries for rec in past),
                        prefix_cache_hits=sum(rec.prefix_hits for rec in past),
                        num_preemptions=sum(rec.num_preemption_events() for rec in past),
                        pool=pool,
                    )
                )
        return out

    def step_in_flight_at_arrival(self, req: OnlineRequest) -> float:
        """As ``OnlineFleet.step_in_flight_at_arrival``, on the replica of the first leg (the
        prefill replica, or the decode replica that prefilled a short prompt)."""
        first = req._first if isinstance(req, OnlinePDRequest) and req._first is not None else req._r
        if first.first_scheduled < 0:
            return 0.0
        c = self.cluster
        for e in (*c.p_eng, *c.d_eng, *c.run_.retired):
            view = ReplicaView(e)
            rec = view.records
            i = first.idx - rec.request_base
            here = view.holds(first) or (
                0 <= i < len(rec.first_scheduled) and rec.first_scheduled[i] == first.first_scheduled
            )
            if not here:
                continue
            k = bisect_right(rec.step_end, first.arrival)
            if k >= len(rec.step_end):
                return 0.0
            start, duration = rec.step_row(rec.step_base + k)[:2]
            running = start <= first.arrival < start + duration and first.first_scheduled > first.arrival
            return duration if running else 0.0
        return 0.0

    def check_invariants(self) -> None:
        """Block and token conservation on every live replica of both pools (tests)."""
        c = self.cluster
        alive = c.p_alive + c.d_alive
        for k, engine in enumerate(c.p_eng + c.d_eng):
            if alive[k] and c.inflight[k] is None:
                engine.assert_invariants()


__all__ = ["OnlineFleet", "OnlinePDFleet", "OnlinePDRequest", "OnlineRequest", "ReplicaMetrics"]
