"""A fleet served online: requests arrive, stream and leave at times the caller gives.

``servesim.live`` drives a run whose requests are all known up front; an emulator (``servesim
emulate``) learns them one by one from clients. ``OnlineFleet`` is a fleet (``cluster.fleet.Fleet``:
an aggregated cluster, or prefill/decode pools with ``OnlineFleet.disaggregated``) fed that way:
``submit`` routes a request at its arrival time exactly as a trace row arriving then would be
(tests/live check that a trace submitted online gives the batch run's records), ``abort``
finishes a request whose client went away (vLLM's ``FINISHED_ABORTED``: its KV blocks go back to
the pool; both legs of a disaggregated request), ``fail`` loses a replica (its requests are
recovered as the fleet recovers them), and ``advance_until`` moves the shared clock. A
disaggregated request's client sees its decode leg (the stream vLLM's P/D proxy returns);
``legs`` and ``ended_transfers`` say what its legs and the KV transfers took. No wall clock here:
the caller maps real time to simulated time, so this module is deterministic and testable
without a server.

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
from typing import Any

from servesim.cluster import KVCheckpointing, RecoveryContext, Replica, RouterSpec, cluster_simulator
from servesim.cluster.fleet import FleetBase, Legs
from servesim.cluster.pd import PDCluster, PDRecovery, Transfer
from servesim.cluster.simulate import Move
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
    """A submitted request as its client sees it: tokens so far, timings, outcome (read-only).
    Disaggregated, that is its decode leg (the stream the proxy returns), and the first leg's
    first scheduling (its queue time)."""

    __slots__ = ("_first", "_r")

    def __init__(self, r: Request) -> None:
        self._r = r  # the leg its client is served by (a fresh one when a lost replica restarted it)
        self._first: Request | None = None  # a disaggregated request's first leg (prefill, or local)

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
        first = self._first if self._first is not None else self._r
        return first.first_scheduled if first.first_scheduled >= 0 else None

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


#: A disaggregated fleet's request (the same type: ``OnlineRequest`` follows its legs).
OnlinePDRequest = OnlineRequest


def _sized(replicas: Sequence[Replica]) -> None:
    unsized = [r.name for r in replicas if r.config.max_model_len is None]
    if unsized:  # a batch run derives it from the trace; online there is none
        raise ConfigError(f"replicas {', '.join(unsized)}: an online fleet needs max_model_len set")


class OnlineFleet:
    """A fleet on one simulated clock, fed online; see the module docstring. ``OnlineFleet(replicas,
    ...)`` is an aggregated cluster, ``OnlineFleet.disaggregated(prefill, decode, link, ...)``
    prefill/decode pools, ``OnlineFleet.of(fleet)`` any fleet. ``rolling_records`` (what the
    emulator uses): bounded memory (``Fleet.roll_records``); tests that compare with a batch run
    leave it off."""

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
        _sized(replicas)
        sim = cluster_simulator(
            Trace.empty("<online>"),
            replicas,
            router,
            (),
            recovery,
            context,
            kv_checkpointing=kv_checkpointing,
            fast=fast,
        )
        self._attach(sim, rolling_records)

    @classmethod
    def disaggregated(
        cls,
        prefill: Sequence[Replica],
        decode: Sequence[Replica],
        link: RecoveryContext,
        *,
        short_prompt_tokens: int = 0,
        prefill_router: RouterSpec | None = None,
        decode_router: RouterSpec | None = None,
        rolling_records: bool = False,
    ) -> OnlineFleet:
        """A prefill pool and a decode pool (``cluster.pd.PDCluster``): a request arrives at a
        prefill replica, its KV moves to a decode replica over the link and its tokens stream
        from there (the client's TTFT counts prefill, transfer and the first decode step);
        ``abort`` aborts both legs; ``fail`` loses a replica of either pool (``p0``, ``d1``)."""
        _sized([*prefill, *decode])
        sim = PDCluster(
            Trace.empty("<online>"),
            prefill,
            decode,
            link,
            short_prompt_tokens=short_prompt_tokens,
            prefill_router=prefill_router,
            decode_router=decode_router,
        )
        return cls.of(sim, rolling_records=rolling_records)

    @classmethod
    def of(cls, sim: FleetBase[Any], *, rolling_records: bool = False) -> OnlineFleet:
        """``sim`` (a fleet with no trace rows: ``Trace.empty``) fed online."""
        fleet = cls.__new__(cls)
        cls._attach(fleet, sim, rolling_records)
        return fleet

    def _attach(self, sim: FleetBase[Any], rolling_records: bool) -> None:
        self.sim = sim
        self.names = sim.replica_names
        self.pools = sim.pools  # a disaggregated fleet's: each replica's pool
        self.link = sim.link  # the link KV moves over (a disaggregated fleet's transfers)
        self._open: dict[int, OnlineRequest] = {}  # disaggregated, not closed: their legs followed
        self._leg_cursor = 0  # the fleet's transfers (absolute) already looked at
        self._booked: list[Transfer] = []  # transfers booked whose end is not reported yet
        self.rolling_records = rolling_records
        if rolling_records:  # a server that runs for days: hold the latest records only
            sim.roll_records(ROLLING_STEPS, ROLLING_REQUESTS)

    @property
    def cluster(self) -> FleetBase[Any]:
        """The fleet (``sim``; a disaggregated fleet's ``PDCluster``)."""
        return self.sim

    @property
    def now(self) -> float:
        """The simulated time the fleet has been advanced to (the latest step end or event)."""
        return self.sim.now

    @property
    def max_model_len(self) -> int:
        return self.sim.max_model_len

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
        req = OnlineRequest(r)
        if self.sim.disaggregated:
            self._open[r.idx] = req
        return req

    def abort(self, req: OnlineRequest, time_s: float) -> None:
        """The client went away at ``time_s``: the request finishes as aborted, its KV freed."""
        self.sim.abort(req._r, time_s)

    def fail(self, node: str, time_s: float, recover_after_s: float | None = None) -> None:
        """Lose ``node`` at ``time_s`` (optionally back, empty, ``recover_after_s`` later)."""
        self.sim.inject_failure(node, max(time_s, self.sim.now), recover_after_s)

    def advance_until(self, time_s: float) -> int:
        """Apply every step end and event before ``time_s``; returns the steps ended."""
        steps = self.sim.advance(time_s)
        if self.sim.disaggregated:
            self._follow()
        if self.rolling_records:
            for d in self.sim.trim_records():  # forgotten by the fleet: its client keeps it
                req = self._open.pop(d.idx, None)
                if req is not None:
                    req._r = d
        return steps

    def _follow(self) -> None:
        """Point every open request at its current legs (a lost decode replica's request starts a
        fresh decode leg); forget the closed ones."""
        closed = []
        for idx, req in self._open.items():
            legs = self.sim.follow(req._r)
            if legs is None:
                continue  # not arrived yet
            req._r = legs[0]
            if req._first is None:
                req._first = legs[1]
            if req.done:
                closed.append(idx)
        for idx in closed:
            del self._open[idx]

    def next_time(self) -> float:
        """When the next step ends or event is due (inf: nothing to do until a submission)."""
        return self.sim.next_time()

    @property
    def moves(self) -> list[Move]:
        """Every recovery decision so far (request, from, to, strategy, tokens moved, delay)."""
        return self.sim.moves

    @property
    def recoveries(self) -> list[PDRecovery]:
        """A disaggregated fleet's: what became of each request a lost replica held (the latest,
        when rolling)."""
        return self.sim.recoveries

    def num_parked(self) -> int:
        """Requests no replica holds: they wait for one to come back (every replica of their
        pool is down)."""
        return self.sim.num_parked

    def parked(self) -> list[OnlineRequest]:
        """The requests waiting for a replica to come back, oldest first."""
        return [OnlineRequest(r) for r in self.sim.parked]

    def pool_of(self, name: str) -> str:
        """A disaggregated fleet's replica's pool ("" on an aggregated fleet)."""
        return (self.pools or {}).get(name, "")

    def replica_of(self, req: OnlineRequest) -> str | None:
        """The replica holding ``req`` now, or the one that finished it (disaggregated: the decode
        replica streaming it, or while its prefill leg runs the prefill replica); None while none
        does (waiting for a replica to come back, or in transit between two)."""
        return self.sim.replica_of(req._r)

    def legs(self, req: OnlineRequest) -> Legs | None:
        """A served disaggregated request's time split as ``cluster.pd_results`` splits it (the
        same formulas; tests/live/test_online_pd.py checks they agree): per leg, the replica and
        the seconds. None until it is served (or when it was rejected, aborted, or forgotten; or
        on an aggregated fleet)."""
        return self.sim.legs(req._r)

    def ended_transfers(self) -> list[Transfer]:
        """The KV transfers that ended (landed, or were cut off) since the last call (none on an
        aggregated fleet)."""
        legs, self._leg_cursor = self.sim.transfer_legs(self._leg_cursor)
        self._booked.extend(legs)
        now = self.sim.now
        ended = [x for x in self._booked if x.end_s <= now or not x.landed]
        if ended:
            self._booked = [x for x in self._booked if not (x.end_s <= now or not x.landed)]
        return ended

    def replica_metrics(self) -> list[ReplicaMetrics]:
        """Per replica (of both pools), over all its incarnations (a recovered one starts a new
        engine); a disaggregated replica's waiting requests include its KV-holding queue."""
        snap = self.sim.snapshot()
        out = []
        for rep in snap.replicas:
            past = [e.view.records for e in snap.engines if e.name == rep.name]
            view, alive = rep.view, rep.alive
            out.append(
                ReplicaMetrics(
                    name=rep.name or "",
                    alive=alive,
                    num_running=view.num_running if alive else 0,
                    num_waiting=view.num_waiting + len(rep.holding) if alive else 0,
                    kv_usage=view.kv_usage if alive else 0.0,
                    prefix_cache_queries=sum(rec.prefix_queries for rec in past),
                    prefix_cache_hits=sum(rec.prefix_hits for rec in past),
                    num_preemptions=sum(rec.num_preemption_events() for rec in past),
                    pool=rep.role or "",
                )
            )
        return out

    def step_in_flight_at_arrival(self, req: OnlineRequest) -> float:
        """The duration of the step its replica was running when ``req`` arrived, if it had to
        wait for it (0 otherwise): what vLLM's asynchronous scheduling adds to its latencies (a
        request arriving during step n joins step n+2; ``servesim.perf.replay.async_lag``).
        Disaggregated: on the replica of the first leg (the prefill replica, or the decode
        replica that prefilled a short prompt)."""
        first = req._first if req._first is not None else req._r
        if first.first_scheduled < 0:
            return 0.0
        for view in self.sim.engine_views:
            rec = view.records
            i = first.idx - rec.request_base  # the recorder keeps the latest requests (roll_records)
            here = view.holds(first) or (
                0 <= i < len(rec.first_scheduled) and rec.first_scheduled[i] == first.first_scheduled
            )
            if not here:
                continue
            k = bisect_right(rec.step_end, first.arrival)  # among the steps kept
            if k >= len(rec.step_end):
                return 0.0
            start, duration = rec.step_row(rec.step_base + k)[:2]
            running = start <= first.arrival < start + duration and first.first_scheduled > first.arrival
            return duration if running else 0.0
        return 0.0

    def check_invariants(self) -> None:
        """Block and token conservation on every live replica (tests)."""
        self.sim.check_invariants()


def OnlinePDFleet(
    prefill: Sequence[Replica],
    decode: Sequence[Replica],
    link: RecoveryContext,
    *,
    short_prompt_tokens: int = 0,
    prefill_router: RouterSpec | None = None,
    decode_router: RouterSpec | None = None,
    rolling_records: bool = False,
) -> OnlineFleet:
    """``OnlineFleet.disaggregated``: a prefill pool and a decode pool fed online."""
    return OnlineFleet.disaggregated(
        prefill,
        decode,
        link,
        short_prompt_tokens=short_prompt_tokens,
        prefill_router=prefill_router,
        decode_router=decode_router,
        rolling_records=rolling_records,
    )


__all__ = ["OnlineFleet", "OnlinePDFleet", "OnlinePDRequest", "OnlineRequest", "ReplicaMetrics"]
