"""Reading a disaggregated fleet request by request: its story leg by leg (prefill, KV transfer(s),
decode), the replica its client is served by now, and a served request's legs (the same split as
``pd_result``'s rows). Pure reads of ``PDCluster``'s records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.cluster.fleet import Legs, RequestStory
from servesim.cluster.pd.records import REJECTED, SERVED, leg_split
from servesim.engine.kv_connector import WAITING_FOR_REMOTE_KVS
from servesim.engine.replica import ReplicaView
from servesim.engine.request import OUTCOMES, Request

if TYPE_CHECKING:
    from servesim.cluster.pd.core import PDCore


def pd_story(c: PDCore, i: int, now: float) -> RequestStory:
    """Request ``i`` so far, leg by leg: its prefill, its KV transfer(s), its decode."""
    run = c.run_
    req_id = c.arrays.req_id[i]
    ev: list[tuple[float, str]] = [(float(c.arrays.arrival[i]), "arrived")]
    state, where = "not arrived", None
    live: tuple[ReplicaView, Request, str | None] | None = None
    p = run.prefill_req.get(i)
    pk = run.prefill_of.get(i)
    if p is not None and pk is not None:
        pname = c.p_specs[pk].name
        state, where = "prefilling", pname
        if p.first_scheduled >= 0:
            ev.append((p.first_scheduled, f"prefill scheduled on {pname}"))
        if p.finish_time >= 0 and p.outcome in SERVED:
            ev.append((p.finish_time, f"prefilled on {pname}: handed to a decode replica"))
            state = "decode queue"
        elif p.outcome in REJECTED:
            state = OUTCOMES[p.outcome]
            ev.append((p.finish_time, f"{state} on {pname}"))
        view = c.views[pk]
        held = view.request(i) if c.alive[pk] else None
        if held is not None:
            live = (view, held, pname)
    ev += _transfer_lines(c, req_id, now)
    d = run.decode_req.get(i)
    dk = run.decode_of.get(i)
    if d is not None and dk is not None:  # handed to its decode replica (or prefilling there)
        dname = c.d_specs[dk].name
        where = dname
        if d.first_scheduled >= 0:
            ev.append((d.first_scheduled, f"decode scheduled on {dname}"))
        if d.first_token >= 0:
            ev.append((d.first_token, "first token"))
        view = c.views[c.n_prefill + dk]
        held = view.request(i) if c.alive[c.n_prefill + dk] else None
        if d.outcome:
            state = OUTCOMES[d.outcome]
            ev.append((d.finish_time, f"{state} with {d.num_output:,} tokens"))
        elif held is not None and view.is_running(held):
            state = "decoding" if d.first_token >= 0 else "prefilling"  # a short prompt: here
        elif d.status == WAITING_FOR_REMOTE_KVS:
            state = "waiting for KV"
        else:
            state = "decode queue"
        if held is not None:
            live = (view, held, dname)
    return RequestStory(state, where, live, tuple(sorted(set(ev))))


def _transfer_lines(c: PDCore, req_id: str, now: float) -> list[tuple[float, str]]:
    """A request's KV pulls (issued, on the link, landed or cut) and what became of it after a loss."""
    ev: list[tuple[float, str]] = []
    for x in c.run_.legs:
        if x.req_id != req_id:
            continue
        ev.append((x.ready_s, f"KV pull {x.prefill}->{x.decode} issued ({x.tokens:,} tokens)"))
        if x.start_s > x.ready_s and x.start_s <= now:
            ev.append((x.start_s, "on the link (after queueing for it)"))
        if not x.landed:
            ev.append((x.end_s, "transfer cut off: a replica was lost"))
        elif x.end_s <= now:
            ev.append((x.end_s, "KV landed"))
    for rec in c.run_.recoveries:
        if rec.req_id == req_id:
            ev.append((rec.time_s, f"{rec.action} after {rec.node} was lost -> {rec.target or 'parked'}"))
    return ev


def pd_replica_of(c: PDCore, r: Request) -> str | None:
    """The decode replica streaming (or that finished) ``r``; while its prefill leg runs, the
    prefill replica; None while none holds it (parked, or not arrived)."""
    run = c.run_
    idx = r.idx
    d = run.decode_req.get(idx)
    k = run.decode_of.get(idx)
    if d is not None and k is not None and (c.views[c.n_prefill + k].holds(d) or d.finish_time >= 0):
        return c.d_specs[k].name
    p = run.prefill_of.get(idx)
    if p is not None and d is not None and d not in c.parked:
        return c.p_specs[p].name
    return None


def pd_legs(c: PDCore, r: Request) -> Legs | None:
    """A served request's time split as ``cluster.pd_results`` splits it (``leg_split``): per leg,
    the replica and the seconds. None until it is served (or when it was rejected, aborted, or
    forgotten by rolling records)."""
    run = c.run_
    idx = r.idx
    d = run.decode_req.get(idx)
    dk = run.decode_of.get(idx)
    if d is None or dk is None or d.outcome not in SERVED:
        return None
    dn = c.d_specs[dk].name
    pn, s, _tokens, transferred = leg_split(run, idx)
    if pn is None:  # prefilled on the decode replica: its queue there is the first
        return {"prefill_queue": (dn, s[0]), "decode": (dn, s[4])}
    out = {"prefill_queue": (pn, s[0]), "prefill": (pn, s[1]), "decode_queue": (dn, s[2])}
    if transferred:
        out["transfer"] = (dn, s[3])
    return out | {"decode": (dn, s[4])}


__all__ = ["pd_legs", "pd_replica_of", "pd_story"]
