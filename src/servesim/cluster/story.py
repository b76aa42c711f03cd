"""One request's story read from the engines' records: what ``servesim.live``'s ``timeline`` shows
for a stand-alone replica and for an aggregated fleet (a disaggregated fleet tells its own, leg by
leg: ``servesim.cluster.pd.view``). Reading costs the engines nothing: their records are kept anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.cluster.fleet import FleetEngine, RequestStory
from servesim.engine.replica import ReplicaView
from servesim.engine.request import OUTCOMES, Request


def engine_story(
    i: int,
    arrival_s: float,
    engines: Sequence[FleetEngine],
    current: Sequence[ReplicaView],
    num_arrived: int,
    notes: Sequence[tuple[float, str]] = (),
) -> RequestStory:
    """Request ``i`` (arriving at ``arrival_s``) across every engine incarnation: preemptions,
    STARVED flags, its outcome where it closed, and where it is live now (on one of ``current``);
    ``notes``: the fleet's own lines about it (recovery moves), in time."""
    ev: list[tuple[float, str]] = [(arrival_s, "arrived")]
    state, where = "not arrived", None
    live: tuple[ReplicaView, Request, str | None] | None = None
    here = {id(v) for v in current}
    for engine in engines:
        view, name = engine.view, engine.name
        rec = view.records
        for t, _step, j, lost in rec.preemption_events:
            if j == i:
                ev.append((t, f"preempted on {name or 'the replica'} ({lost:,} tokens of KV lost)"))
        for t, _step, j, _lost in rec.starvation_events:
            if j == i:
                ev.append((t, "flagged STARVED"))
        if rec.outcome[i]:
            state, where = OUTCOMES[rec.outcome[i]], name
            if rec.first_scheduled[i] == rec.first_scheduled[i]:
                ev.append((rec.first_scheduled[i], "first scheduled"))
            if rec.first_token[i] == rec.first_token[i]:
                ev.append((rec.first_token[i], "first token"))
            if rec.finish[i] == rec.finish[i]:
                ev.append((rec.finish[i], f"{state} with {rec.num_output[i]:,} tokens"))
        r = view.request(i)
        if r is not None and id(view) in here:  # on a current engine (evicted ones keep none)
            state = "running" if view.is_running(r) else "waiting"
            where, live = name, (view, r, name)
            if r.first_scheduled >= 0:
                ev.append((r.first_scheduled, "first scheduled"))
            if r.first_token >= 0:
                ev.append((r.first_token, "first token"))
    if state == "not arrived" and i < num_arrived:
        state = "in transit"
    ev += notes
    return RequestStory(state, where, live, tuple(sorted(set(ev))))


__all__ = ["engine_story"]
