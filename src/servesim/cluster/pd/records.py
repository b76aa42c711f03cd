"""What a disaggregated run records: each KV transfer (a leg), what became of each request a lost
replica touched, the failures, and the raw outcome ``PDCluster`` returns (``PDRun``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from servesim.engine.engine import Engine
from servesim.engine.kv_pd import PDConnector
from servesim.engine.request import (
    OUTCOME_ABORTED,
    OUTCOME_FINISHED,
    OUTCOME_LENGTH_CAPPED,
    OUTCOME_REJECTED_QUEUED_REQS,
    OUTCOME_REJECTED_QUEUED_TOKENS,
    OUTCOME_REJECTED_TIMEOUT,
    OUTCOME_REJECTED_TOO_LONG,
    Request,
)
from servesim.traces.schema import Trace


@dataclass
class Transfer:
    """One prompt's KV moved from a prefill replica to a decode replica (one leg)."""

    req_id: str
    prefill: str
    decode: str
    blocks: int
    tokens: int
    ready_s: float  # the decode replica allocated the blocks (the pull is issued)
    start_s: float  # both links are free for it
    end_s: float  # landed; the prefill replica frees its blocks (or when it was cut off)
    landed: bool = True  # False: an end of the link was lost mid-transfer (or the request aborted)
    aborted: bool = False  # cut because the client went away (``PDCluster.abort``)


@dataclass
class PDRecovery:
    """What became of one request when a replica it depended on was lost."""

    req_id: str
    time_s: float
    node: str  # the lost replica
    action: str  # see RECOVERY_ACTIONS
    target: str | None  # where it went on (None: parked, no replica of that pool up)
    reason: str = ""


RECOVERY_ACTIONS = {
    "re-prefill": "its prefill was under way (or queued) on the lost prefill replica: run again on another",
    "prefill-on-decode": "its KV was lost with the prefill replica before it was read: its decode "
    "replica recomputes the prompt",
    "re-route": "it was queued on the lost decode replica: sent to another (its KV still on the "
    "prefill side)",
    "re-transfer": "its KV was still held on the prefill side: read again by another decode replica "
    "(a new leg)",
    "recompute": "its KV existed only on the lost decode replica (or recomputing was cheaper): "
    "prompt and outputs so far recomputed on another",
}


@dataclass
class PDFailure:
    node: str
    pool: str  # "prefill" | "decode"
    time_s: float
    recover_s: float | None
    requests: int = 0  # requests the loss touched


@dataclass
class PDRun:
    """The raw outcome: engines, requests on each leg, transfers."""

    trace: Trace
    prefill: list[Engine]
    decode: list[Engine]
    prefill_req: dict[int, Request]
    decode_req: dict[int, Request]
    prefill_of: dict[int, int]  # request idx -> prefill replica index
    decode_of: dict[int, int]
    transfers: dict[int, Transfer] = field(default_factory=dict)  # the leg that landed, per request
    local: set[int] = field(default_factory=set)  # short prompts prefilled on the decode replica
    legs: list[Transfer] = field(default_factory=list)  # every transfer, landed or cut off
    failures: list[PDFailure] = field(default_factory=list)
    recoveries: list[PDRecovery] = field(default_factory=list)
    parked: list[int] = field(default_factory=list)  # never placed: no decode replica came back
    sender: dict[int, PDConnector] = field(default_factory=dict)  # who sent the landed leg
    receiver: dict[int, PDConnector] = field(default_factory=dict)  # who received it
    retired: list[Engine] = field(default_factory=list)  # engines of lost replicas
    num_online: int = 0  # requests submitted online (``PDCluster.submit``), beyond the trace's


#: A request's outcomes that close it without output (the client gets an error: 400, a timeout,
#: or a replica's API server's 503).
REJECTED = frozenset(
    {
        OUTCOME_REJECTED_TOO_LONG,
        OUTCOME_REJECTED_TIMEOUT,
        OUTCOME_REJECTED_QUEUED_REQS,
        OUTCOME_REJECTED_QUEUED_TOKENS,
    }
)
#: A request whose client went away (``PDCluster.abort``): both legs aborted.
ABORTED = frozenset({OUTCOME_ABORTED})
#: Outcomes of a request served to the end (``finished_max_model_len`` included).
SERVED = frozenset({OUTCOME_FINISHED, OUTCOME_LENGTH_CAPPED})


class LegSplit(NamedTuple):
    """A served request's time by leg (``LEGS`` order: prefill queue, prefill, decode queue,
    transfer, decode; they add up to its E2E), where its prefill ran (None: on its decode
    replica) and the KV tokens its landed transfer moved."""

    prefill: str | None
    seconds: tuple[float, float, float, float, float]
    tokens: int
    transferred: bool  # its KV landed from the prefill side (not recomputed on the decode side)


def leg_split(run: PDRun, idx: int) -> LegSplit:
    """Request ``idx``'s legs (it was served: its decode leg finished). A short prompt prefilled on
    its decode replica has a queue and a decode leg; a request whose KV was lost before it landed
    recomputed the prompt on its decode replica (no transfer leg)."""
    d = run.decode_req[idx]
    arrival = d.arrival
    if idx in run.local:
        return LegSplit(
            None, (d.first_scheduled - arrival, 0.0, 0.0, 0.0, d.finish_time - d.first_scheduled), 0, False
        )
    p = run.prefill_req[idx]
    x = run.transfers.get(idx)
    if x is None:  # its KV was lost before it landed: its decode replica recomputed the prompt
        return LegSplit(
            run.prefill[run.prefill_of[idx]].name,
            (
                p.first_scheduled - arrival,
                p.finish_time - p.first_scheduled,
                d.first_scheduled - p.finish_time,
                0.0,
                d.finish_time - d.first_scheduled,
            ),
            0,
            False,
        )
    landed = run.receiver[idx].recv_done[idx]
    return LegSplit(
        x.prefill,
        (
            p.first_scheduled - arrival,
            p.finish_time - p.first_scheduled,
            x.ready_s - p.finish_time,
            landed - x.ready_s,
            d.finish_time - landed,
        ),
        x.tokens,
        True,
    )


__all__ = [
    "ABORTED",
    "RECOVERY_ACTIONS",
    "REJECTED",
    "SERVED",
    "LegSplit",
    "PDFailure",
    "PDRecovery",
    "PDRun",
    "Transfer",
    "leg_split",
]
