"""What a disaggregated fleet shows between steps: its KV transfers so far and each leg's share of
the time of the requests finished so far (``PDState``, ``servesim.live``'s ``RunSnapshot.pd``), the
same figures ``pd_result`` gives once the run is done."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servesim.cluster.pd.records import PDRun, leg_split
from servesim.engine.replica import ReplicaView
from servesim.engine.request import OUTCOME_FINISHED, OUTCOME_LENGTH_CAPPED

#: A disaggregated request's legs, in time order (``pd_results.LEGS``).
LEGS = ("prefill_queue", "prefill", "decode_queue", "transfer", "decode")


@dataclass(frozen=True, slots=True)
class LegFigures:
    """One leg of a disaggregated run over its requests finished so far: mean and p99 (ms)."""

    leg: str  # one of ``servesim.cluster.pd_results.LEGS``
    mean_ms: float
    p99_ms: float


@dataclass(frozen=True, slots=True)
class PDState:
    """What a prefill/decode-disaggregated run adds to a snapshot: the KV transfers so far and
    each leg's share of the time of the requests finished so far (``pd_result``'s figures, which
    they equal once the run is done)."""

    link: str | None  # the link preset's name (None: a link given as a cost model)
    short_prompt_tokens: int
    waiting_for_kv: int  # decode legs with their blocks allocated, waiting for the KV to land
    transfers_queued: int  # pulls issued, queued behind other transfers on a link
    transfers_in_flight: int  # on the wire now
    transfers_landed: int
    transfers_cut: int  # cut off by a lost replica
    kv_moved_gb: float  # KV landed so far, all TP ranks together
    link_wait_mean_ms: float | None  # queueing for the links, over the transfers started so far
    link_wait_p99_ms: float | None
    num_disaggregated: int  # finished requests the legs are over
    num_local: int  # finished short prompts (prefilled on their decode replica)
    legs: tuple[LegFigures, ...]  # empty before the first disaggregated request finished


class LegTally:
    """The legs of the requests whose decode leg finished, read once each (a finished leg never
    changes), in the order they were seen finished."""

    def __init__(self, run: PDRun) -> None:
        self.run = run
        self.counted = np.zeros(len(run.trace), dtype=bool)
        self.values: dict[str, list[float]] = {leg: [] for leg in LEGS}
        self.num_local = 0

    def count(self, decode_views: Sequence[ReplicaView]) -> None:
        """Split the requests whose decode leg finished since the last call by leg."""
        n = len(self.run.trace)  # the trace's requests (submitted ones are not tallied)
        fresh = np.zeros(n, dtype=bool)
        for v in decode_views:
            code = np.frombuffer(v.records.outcome, dtype=np.int64)[:n]
            fresh[: len(code)] |= (code == OUTCOME_FINISHED) | (code == OUTCOME_LENGTH_CAPPED)
        new = np.flatnonzero(fresh & ~self.counted)
        if not len(new):
            return
        self.counted[new] = True
        for i in new.tolist():
            split = leg_split(self.run, i)
            if split.prefill is None:
                self.num_local += 1
                continue
            for leg, seconds in zip(LEGS, split.seconds, strict=True):
                self.values[leg].append(seconds)

    def figures(self) -> tuple[LegFigures, ...]:
        return tuple(
            LegFigures(leg, float(np.mean(xs) * 1000.0), float(np.percentile(np.asarray(xs), 99) * 1000.0))
            for leg, xs in self.values.items()
            if xs
        )


def transfer_state(
    run: PDRun,
    tally: LegTally,
    decode_views: Sequence[ReplicaView],
    time_s: float,
    *,
    link: str | None,
    short_prompt_tokens: int,
    waiting_for_kv: int,
    bytes_per_token: int,
) -> PDState:
    """The transfers as of ``time_s`` (queued, on the wire, landed, cut), the KV moved, the
    queueing for the links, and the legs of the requests finished so far."""
    queued = flying = landed = cut = tokens = 0
    waits: list[float] = []
    for x in run.legs:
        if not x.landed:
            cut += 1
        elif x.end_s <= time_s:
            landed += 1
            tokens += x.tokens
        elif x.start_s <= time_s:
            flying += 1
        else:
            queued += 1
        if x.start_s <= time_s:
            waits.append(x.start_s - x.ready_s)
    tally.count(decode_views)
    return PDState(
        link,
        short_prompt_tokens,
        waiting_for_kv,
        queued,
        flying,
        landed,
        cut,
        tokens * bytes_per_token / 1e9,
        float(np.mean(waits) * 1000.0) if waits else None,
        float(np.percentile(np.asarray(waits), 99) * 1000.0) if waits else None,
        len(tally.values[LEGS[0]]),
        tally.num_local,
        tally.figures(),
    )


__all__ = ["LEGS", "LegFigures", "LegTally", "PDState", "transfer_state"]
