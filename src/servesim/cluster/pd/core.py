"""A disaggregated fleet's parts: its two pools' engines and connectors, the KV transfers between
them, and the proxy's routing (a request's prefill leg, then its decode leg). ``failures.PDFailures``
adds what a lost replica does to them, ``sim.PDCluster`` the clock; see ``servesim.cluster.pd``.

The slots of the fleet (``FleetBase``) are the prefill pool's replicas, then the decode pool's:
decode replica ``k`` is slot ``n_prefill + k``.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.cluster.config import FailureEvent, RouterSpec
from servesim.cluster.fleet import FleetBase, Replica
from servesim.cluster.pd.records import REJECTED, PDFailure, PDRun, Transfer
from servesim.cluster.pd.spec import parse_pool_node
from servesim.cluster.pd.state import LegTally
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.cluster.router import Router
from servesim.engine.engine import Engine
from servesim.engine.kv_pd import PDConnector
from servesim.engine.replica import ReplicaView
from servesim.engine.request import Request
from servesim.errors import InputError, InternalError
from servesim.traces.schema import Trace

#: A scheduled failure or comeback: (time, 0 fail | 1 recover, seq, kind, pool, index in pool, event).
PoolEvent = tuple[float, int, int, str, str, int, FailureEvent]


class PDCore(FleetBase[PDRun]):
    """A prefill pool and a decode pool, their transfers and routing (no clock: ``PDCluster``)."""

    disaggregated = True

    def __init__(
        self,
        trace: Trace,
        prefill: Sequence[Replica],
        decode: Sequence[Replica],
        link: RecoveryContext,
        *,
        short_prompt_tokens: int = 0,
        prefill_router: RouterSpec | None = None,
        decode_router: RouterSpec | None = None,
        failures: Sequence[FailureEvent] = (),
        link_name: str | None = None,
    ) -> None:
        if not prefill or not decode:
            raise InputError("a disaggregated cluster needs at least one prefill and one decode replica")
        if short_prompt_tokens < 0:
            raise InputError(f"short_prompt_tokens must be >= 0, got {short_prompt_tokens}")
        self.p_specs = list(prefill)
        self.d_specs = list(decode)
        self.n_prefill = len(prefill)
        super().__init__(trace, [*prefill, *decode])
        self._link = link
        self.link_name = link_name  # the preset's name, where the link is one (snapshots say it)
        self.short = short_prompt_tokens
        self.p_router = Router(prefill_router or RouterSpec(policy="prefix_aware"))
        self.d_router = Router(decode_router or RouterSpec(policy="least_kv"))
        for k in range(len(self.replicas)):
            self._start(k)
        self._in_free = [0.0] * len(decode)  # each decode replica's inbound link
        self._out_free = [0.0] * len(prefill)  # each prefill replica's outbound link
        self.run_ = PDRun(trace, self.p_eng, self.d_eng, {}, {}, {}, {})
        self._events: list[PoolEvent] = []
        names = self.replica_names
        for i, f in enumerate(sorted(failures, key=lambda f: (f.time_s, f.node))):
            pool, k = self._node(f.node, names)
            self._events.append((f.time_s, 0, i, "fail", pool, k, f))
            if f.recover_after_s is not None:
                self._events.append((f.time_s + f.recover_after_s, 1, i, "recover", pool, k, f))
            self.run_.failures.append(PDFailure(self._name(pool, k), pool, f.time_s, f.recover_after_s))
        self._events.sort(key=lambda e: e[:3])
        self._ev = 0  # the next of ``_events`` to apply
        self._origin: dict[int, Request] = {}  # submitted requests' fields, for fresh copies
        self._next_arrival = 0  # the next trace row to arrive
        self._online: list[tuple[float, int, Request]] = []  # submitted arrivals (a heap)
        # Client aborts (``abort``): a heap of (time, seq, request idx); those whose leg is in a
        # step in flight wait for that step's end (per engine slot), as vLLM applies them.
        self._aborts: list[tuple[float, int, int]] = []
        self._abort_seq = 0
        self.aborted: set[int] = set()  # request indices closed by ``abort`` (legs cut by one)
        self.legs_base = 0  # ``run_.legs`` entries dropped by ``trim_records``
        self._drained = False  # nothing left to do, known when an advance stops short
        self.tally = LegTally(self.run_)  # the legs of the requests finished so far (snapshots)

    # ------------------------------------------------------------------ the pools
    @property
    def link(self) -> RecoveryContext:
        """The transfer cost model (the link's bandwidth and setup, the served model's KV)."""
        return self._link

    def pool_of_slot(self, k: int) -> str:
        return "prefill" if k < self.n_prefill else "decode"

    def _slot(self, pool: str, k: int) -> int:
        return k if pool == "prefill" else self.n_prefill + k

    def _name(self, pool: str, k: int) -> str:
        return self.replicas[self._slot(pool, k)].name

    @property
    def p_eng(self) -> list[Engine]:
        """The prefill pool's current engines."""
        return self.current[: self.n_prefill]

    @property
    def d_eng(self) -> list[Engine]:
        """The decode pool's current engines."""
        return self.current[self.n_prefill :]

    @property
    def p_views(self) -> list[ReplicaView]:
        return self.views[: self.n_prefill]

    @property
    def d_views(self) -> list[ReplicaView]:
        return self.views[self.n_prefill :]

    @property
    def p_alive(self) -> list[bool]:
        return self.alive[: self.n_prefill]

    @property
    def d_alive(self) -> list[bool]:
        return self.alive[self.n_prefill :]

    def _up(self, pool: str, k: int) -> bool:
        return self.alive[self._slot(pool, k)]

    def _alive(self, pool: str) -> list[int]:
        """The replicas of ``pool`` that are up, by index in the pool."""
        lo, hi = (0, self.n_prefill) if pool == "prefill" else (self.n_prefill, len(self.replicas))
        return [k - lo for k in range(lo, hi) if self.alive[k]]

    def _set_alive(self, pool: str, k: int, up: bool) -> None:
        slot = self._slot(pool, k)
        self.alive[slot] = self.accepting[slot] = up

    def _node(self, node: str, names: list[str]) -> tuple[str, int]:
        if node in names:
            i = names.index(node)
            return ("prefill", i) if i < self.n_prefill else ("decode", i - self.n_prefill)
        return parse_pool_node(node, self.n_prefill, len(self.d_specs))

    def _new_engine(self, k: int) -> Engine:
        spec = self.replicas[k]
        if k < self.n_prefill:
            conn = PDConnector()
        else:
            decode_k = k - self.n_prefill

            def due(r: Request, now: float, end: float, n_blocks: int, j: int = decode_k) -> float:
                return self._transfer(j, r, now, n_blocks)

            conn = PDConnector(recv_due=due)
        return Engine(
            self.arrays,
            spec.config,
            spec.step_time,
            fast=False,
            external_arrivals=True,
            name=spec.name,
            kv_connector=conn,
        )

    @staticmethod
    def _conn(e: Engine) -> PDConnector:
        conn = e.kv_connector
        if not isinstance(conn, PDConnector):
            raise InternalError("invariant broken: a replica without its P/D connector")
        return conn

    def _p_conn(self, p: int) -> PDConnector:
        return self._conn(self.current[p])

    def _d_conn(self, k: int) -> PDConnector:
        return self._conn(self.current[self.n_prefill + k])

    # ------------------------------------------------------------------ transfers
    def _transfer(self, k: int, r: Request, now: float, n_blocks: int) -> float:
        """The decode replica ``k`` pulls ``r``'s prompt KV: it queues until both the prefill
        replica's outbound link and ``k``'s inbound link are free, then takes the wire time."""
        run = self.run_
        p = run.prefill_of[r.idx]
        if r.idx in run.transfers:
            raise InternalError(f"invariant broken: {r.req_id}'s KV transferred twice")
        tokens = n_blocks * self.d_specs[k].config.block_size
        start = max(now, self._in_free[k], self._out_free[p])
        end = start + self._link.setup_latency_s + self._link.transfer_s(tokens)
        self._in_free[k] = end
        self._out_free[p] = end
        x = Transfer(r.req_id, self.p_specs[p].name, self.d_specs[k].name, n_blocks, tokens, now, start, end)
        run.transfers[r.idx] = x
        run.legs.append(x)
        p_conn = self._p_conn(p)
        p_conn.send_done(r.idx, end)
        run.sender[r.idx] = p_conn
        run.receiver[r.idx] = self._d_conn(k)
        return end

    def _cut(self, idx: int, t: float) -> None:
        """The transfer of ``idx`` in flight at ``t`` is cut off (an end of it was lost)."""
        run = self.run_
        x = run.transfers.pop(idx)
        x.start_s = min(x.start_s, t)  # cut while still queued for the link: it never started
        x.end_s, x.landed = t, False
        run.sender.pop(idx, None)
        run.receiver.pop(idx, None)

    def _copy(self, r: Request) -> Request:
        """A fresh request with ``r``'s trace fields: the other leg, or a decode leg started over."""
        if r.idx < self.arrays.n:
            return self.arrays.make_request(r.idx)
        o = self._origin[r.idx]
        ids = None if o.hash_ids is None else list(o.hash_ids)
        return Request(
            o.idx, o.req_id, o.arrival, o.prompt_len, o.max_tokens, o.priority, -1, 0, ids, o.hash_block_size
        )

    # ------------------------------------------------------------------ routing
    def _arrive(self, r: Request, d_copy: Request) -> None:
        run = self.run_
        t = r.arrival
        run.decode_req[r.idx] = d_copy
        if r.prompt_len < self.short or not self._alive("prefill"):
            run.local.add(r.idx)
            self._to_decode(d_copy, t)
            return
        run.prefill_req[r.idx] = r
        r.max_tokens = 1  # the prefill leg: one token, its KV kept for the decode replica
        self._to_prefill(r, t)  # the decode leg is submitted when the prefill leg finishes

    def _to_prefill(self, r: Request, t: float) -> str:
        run = self.run_
        k = self.p_router.pick(r, self.p_views, self._alive("prefill"))
        self._p_conn(k).mark_remote_decode(r.idx)
        run.prefill_of[r.idx] = k
        self.current[k].submit(r, t)
        if r.outcome in REJECTED:
            self._reject(r)
        return self.p_specs[k].name

    def _reject(self, r: Request) -> None:
        """The prefill replica refused the prefill leg (a prompt past its ``max_model_len``, or a
        queue timeout): the proxy returns that error to the client, and no decode leg runs."""
        d = self.run_.decode_req[r.idx]
        d.outcome, d.status, d.finish_time = r.outcome, r.status, r.finish_time

    def _hand_off(self, r: Request, t: float) -> None:
        """The prefill leg finished at ``t``: the proxy sends the request to a decode replica."""
        self._to_decode(self.run_.decode_req[r.idx], t)

    def _prefill_holds(self, idx: int, t: float) -> bool:
        p = self.run_.prefill_of.get(idx)
        return p is not None and self.alive[p] and self._p_conn(p).holds(idx, t)

    def _to_decode(
        self, d: Request, t: float, target: int | None = None, remote: bool | None = None
    ) -> str | None:
        """Submit the decode leg to ``target`` (else the router's least-KV pick), pulling its KV
        from the prefill side when that still holds it; parked when no decode replica is up."""
        alive = self._alive("decode")
        if not alive:
            self._parked.append(d)
            p = self.run_.prefill_of.get(d.idx)
            if not self._decode_back_after(t) and p is not None and self._prefill_holds(d.idx, t):
                self._p_conn(p).send_done(d.idx, t)  # nobody will ever read it
            return None
        k = target if target is not None else self.d_router.pick(d, self.d_views, alive)
        if remote is None:
            remote = self._prefill_holds(d.idx, t)
        if remote:
            self._d_conn(k).mark_remote_prefill(d.idx)
        self.run_.decode_of[d.idx] = k
        self.current[self.n_prefill + k].submit(d, t)
        p = self.run_.prefill_of.get(d.idx)
        if d.outcome in REJECTED and remote and p is not None:  # refused here: nobody reads the KV
            self._p_conn(p).send_done(d.idx, t)
        return self.d_specs[k].name

    def _decode_back_after(self, t: float) -> bool:
        """A decode replica is scheduled to come back at or after ``t``."""
        return any(e[3] == "recover" and e[4] == "decode" and e[0] >= t for e in self._events)


__all__ = ["PDCore", "PoolEvent"]
