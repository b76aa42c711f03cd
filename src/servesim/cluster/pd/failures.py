"""What a lost replica does to a disaggregated fleet, as docs/cluster.md ("Failures in either pool")
says: a lost prefill replica's prefills run again elsewhere and the KV it held for transfers is
recomputed on the decode side; a lost decode replica's requests are re-routed, re-transferred from
the prefill side (which holds the KV until it has been read) or recomputed, as the recovery
planner's ``decide_job`` chooses. Each request's fate is a ``PDRecovery`` in ``PDRun.recoveries``.
"""

from __future__ import annotations

from bisect import insort

from servesim.cluster.config import FailureEvent
from servesim.cluster.pd.core import PDCore
from servesim.cluster.pd.records import PDFailure, PDRecovery
from servesim.engine.request import Request
from servesim.errors import InternalError


class PDFailures(PDCore):
    """``PDCore`` with its replicas lost and back (scheduled, or injected while it runs)."""

    def inject_failure(self, node: str, time_s: float, recover_after_s: float | None = None) -> FailureEvent:
        """Add a failure of ``node`` (``p0``/``d1`` or ``prefill:0``/``decode:1``) at ``time_s``
        (not before the cluster's time), optionally back ``recover_after_s`` later."""
        pool, k = self._node(node, self.replica_names)
        name = self._name(pool, k)
        listed = [
            e[6].model_copy(update={"node": self._name(e[4], e[5])}) for e in self._events if e[3] == "fail"
        ]
        event = self._planned_failure(name, time_s, recover_after_s, listed)
        i = len(self.run_.failures)
        insort(self._events, (time_s, 0, i, "fail", pool, k, event), lo=self._ev, key=lambda e: e[:3])
        if recover_after_s is not None:
            back = (time_s + recover_after_s, 1, i, "recover", pool, k, event)
            insort(self._events, back, lo=self._ev, key=lambda e: e[:3])
        self.run_.failures.append(PDFailure(name, pool, time_s, recover_after_s))
        self._drained = False
        return event

    def _apply_event(self, i: int) -> None:
        """Apply ``_events[i]``: a replica lost (a step in flight is lost with it) or back."""
        t, _, _, kind, pool, k, _f = self._events[i]
        slot = self._slot(pool, k)
        name = self.replicas[slot].name
        self.inflight[slot] = None  # a step in flight is lost with the replica
        if kind == "fail":
            self._fail(pool, k, t)
            if self._aborts_after_step[slot]:  # waiting for a step lost with the replica
                self._apply_aborts(slot, t)
            self.node_events.append((t, "fail", name, self._failure(name, t).requests))
        else:
            self._recover(pool, k, t)
            self.node_events.append((t, "recover", name, 0))

    def _note(self, r: Request, t: float, node: str, action: str, target: str | None, why: str = "") -> None:
        self.run_.recoveries.append(PDRecovery(r.req_id, t, node, action, target, why))

    def _failure(self, node: str, t: float) -> PDFailure:
        for f in self.run_.failures:
            if f.node == node and f.time_s == t:
                return f
        raise InternalError(f"invariant broken: no failure of {node} at {t}")

    def _fail(self, pool: str, k: int, t: float) -> None:
        if pool == "prefill":
            self._fail_prefill(k, t)
        else:
            self._fail_decode(k, t)

    def _fail_prefill(self, k: int, t: float) -> None:
        """Its prefill legs run again on another prefill replica (none: on their decode replica);
        the KV it held for transfers is lost: those requests' decode replicas recompute the prompt
        (vLLM's load-failure "recompute"), whether the read had started or not."""
        run = self.run_
        name = self.p_specs[k].name
        eng = self.current[k]
        conn = self._conn(eng)
        self._set_alive("prefill", k, False)
        victims = [r for r, _ in eng.evict_all()]
        touched = len(victims)
        for idx in conn.pending_sends():
            if not conn.holds(idx, t):
                continue  # landed already: its blocks were only waiting to be freed
            touched += 1
            dk = run.decode_of.get(idx)
            d = run.decode_req[idx]
            if dk is None or not self._up("decode", dk):  # parked since its decode replica was lost
                self._note(d, t, name, "prefill-on-decode", None, "parked: no decode replica up")
                continue
            dconn = self._d_conn(dk)
            if idx in dconn.remote_prefill:  # not allocated yet: it prefills there instead
                dconn.remote_prefill.discard(idx)
            elif dconn.receiving(idx):
                dconn.fail_recv(idx, t)
                self._cut(idx, t)
            self._note(d, t, name, "prefill-on-decode", self.d_specs[dk].name)
        for r in victims:
            if self._alive("prefill"):
                self._note(r, t, name, "re-prefill", self._to_prefill(r, t))
            else:
                d = run.decode_req[r.idx]
                run.prefill_req.pop(r.idx, None)
                run.prefill_of.pop(r.idx, None)
                run.local.add(r.idx)
                self._note(d, t, name, "prefill-on-decode", self._to_decode(d, t, remote=False))
        run.retired.append(eng)
        self._failure(name, t).requests = touched

    def _fail_decode(self, k: int, t: float) -> None:
        """Each request on it: queued ones go to another decode replica; those whose KV the
        prefill side still holds (the read had not landed) are re-transferred or recomputed, as
        the recovery planner's cost model decides; the rest recompute prompt and outputs."""
        run = self.run_
        name = self.d_specs[k].name
        eng = self.current[self.n_prefill + k]
        conn = self._conn(eng)
        self._set_alive("decode", k, False)
        evicted = eng.evict_all()
        holding: list[Request] = []
        while len(conn.holding):
            holding.append(conn.holding.pop())
        touched = len(evicted) + len(holding)
        for r, computed in evicted:
            if computed == 0 and r.num_output == 0:  # queued, never scheduled here
                self._note(r, t, name, "re-route", self._to_decode(r, t))
            else:
                self._recover_decode(r, t, name, with_kv=self._prefill_holds(r.idx, t))
        for r in holding:
            idx = r.idx
            fresh = self._copy(r)
            run.decode_req[idx] = fresh
            if idx in run.transfers and conn.receiving(idx):
                self._cut(idx, t)
            self._recover_decode(fresh, t, name, with_kv=self._prefill_holds(idx, t))
        run.retired.append(eng)
        self._failure(name, t).requests = touched

    def _recover_decode(self, r: Request, t: float, node: str, *, with_kv: bool) -> None:
        """The planner's choice for a decode leg whose KV was lost: re-transfer it from the
        prefill side (``with_kv``: that still holds it) or recompute, and where."""
        from servesim.cluster.planning import target_state
        from servesim.cluster.recovery import JobSpec, decide_job

        alive = self._alive("decode")
        p = self.run_.prefill_of.get(r.idx)
        if not alive:
            if with_kv and p is not None:
                self._p_conn(p).resend(r.idx)  # kept until a decode replica reads it
            self._to_decode(r, t)
            self._note(r, t, node, "re-transfer" if with_kv else "recompute", None, "no decode replica up")
            return
        tokens = r.prompt_len
        spec = JobSpec(
            job_id=r.req_id,
            prompt_tokens=tokens,
            generated_tokens=r.num_output,
            kv_cache_checkpointed=with_kv,
            checkpoint_offset_tokens=tokens if with_kv else None,
        )
        out_wait = max(0.0, self._out_free[p] - t) if p is not None else 0.0
        views = self.d_views
        targets = [target_state(views[j], str(j), r, max(out_wait, self._in_free[j] - t, 0.0)) for j in alive]
        d = decide_job(spec, self.link, targets, weigh_load=True)
        target = int(d.target) if d.target is not None else alive[0]
        migrate = with_kv and d.strategy == "MIGRATE_STATE" and d.moved_tokens > 0
        if with_kv and p is not None:
            p_conn = self._p_conn(p)
            if migrate:
                p_conn.resend(r.idx)
            else:
                p_conn.send_done(r.idx, t)  # nobody will read it: freed at its next step
        where = self._to_decode(r, t, target=target, remote=migrate)
        self._note(r, t, node, "re-transfer" if migrate else "recompute", where, d.reason)

    def _recover(self, pool: str, k: int, t: float) -> None:
        """The replica comes back empty (cold prefix cache) and takes work again."""
        self._start(self._slot(pool, k)).now = t
        self._set_alive(pool, k, True)
        if pool == "prefill":
            return
        parked, self._parked = self._parked, []
        for d in parked:
            self._to_decode(d, t)


__all__ = ["PDFailures"]
