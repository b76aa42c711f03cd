"""The timeline of a cluster run's node failures and recovery decisions, from its typed events."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from servesim.events import Event, RecoveryDecision, ReplicaDown, ReplicaUp, ReplicaWarning
from servesim.views.model import Column, Section, Table, Verdict

#: Rows listed at most (a long MTBF run makes thousands of decisions; the counts cover them all).
MAX_ROWS = 500


def failure_timeline(events: Iterable[Event]) -> Section:
    """Failures, recoveries and each interrupted request's decision, in time order."""
    rows: list[list[Any]] = []
    strategies: Counter[str] = Counter()
    downs = 0
    for e in events:
        if isinstance(e, ReplicaWarning):
            rows.append([e.time_s, "warning", e.replica, "failure announced: no new requests"])
        elif isinstance(e, ReplicaDown):
            downs += 1
            rows.append([e.time_s, "down", e.replica, f"{e.num_interrupted:,} requests interrupted"])
        elif isinstance(e, ReplicaUp):
            rows.append([e.time_s, "up", e.replica, "back, empty"])
        elif isinstance(e, RecoveryDecision):
            strategies[e.strategy] += 1
            rows.append(
                [
                    e.time_s,
                    e.strategy,
                    f"{e.from_replica} -> {e.to_replica}",
                    f"{e.req_id}: {e.tokens_moved:,} tokens moved, {e.recompute_tokens:,} recomputed, "
                    f"+{e.delay_s * 1000:,.1f} ms",
                ]
            )
    rows.sort(key=lambda r: float(r[0]))
    notes = [] if len(rows) <= MAX_ROWS else [f"the first {MAX_ROWS:,} of {len(rows):,} events"]
    table = Table(
        key="timeline",
        title="failures and recovery decisions",
        columns=[
            Column(key="time_s", label="time", unit="s", kind="float", decimals=3),
            Column(key="event", label="event", kind="str"),
            Column(key="where", label="replica", kind="str"),
            Column(key="detail", label="detail", kind="str"),
        ],
        rows=rows[:MAX_ROWS],
        notes=notes,
    )
    counts = ", ".join(f"{n:,} {s}" for s, n in sorted(strategies.items())) or "no request needed recovery"
    verdict = Verdict(
        key="failures",
        label="failures",
        status="info" if downs else "pass",
        text=f"{downs} replica failure(s); {counts}",
    )
    return Section(key="timeline", title="failure timeline", tables=[table], verdicts=[verdict])
