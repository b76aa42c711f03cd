"""vLLM's API-server admission: ``max_num_queued_reqs`` and ``max_num_queued_tokens`` (HTTP 503).

Not the scheduler: vLLM checks both in ``AsyncLLM.check_admission``, called by the serving layer
before the prompt is even rendered (so a too-long prompt arriving at a full server gets the 503,
not the 400). Read from vLLM 0.33.0 (``vllm/v1/engine/async_llm.py``, ``output_processor.py``):

* ``max_num_queued_reqs``: rejected when the unfinished requests (waiting + running: the output
  processor's states) plus this one's ``n`` (1 here) would exceed the limit
  (``current + n > max``);
* ``max_num_queued_tokens``: rejected when the prompt tokens of the requests still in the prefill
  phase are already at or above the limit (``current >= max``: the arriving prompt is not
  counted). A request leaves the prefill phase when its first output reaches the API server,
  so a partly prefilled prompt (chunked prefill) and its prefix-cache hit count in full.

The engine handles arrivals at step boundaries; a request arriving during a step is checked
against the state at its own arrival time: requests that finished, or emitted their first
token, at that step's end (after the arrival) still count.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from servesim.engine.request import (
    OUTCOME_REJECTED_QUEUED_REQS,
    OUTCOME_REJECTED_QUEUED_TOKENS,
    OUTCOME_REJECTED_TOO_LONG,
    OUTCOMES,
    REJECTED,
    Request,
)
from servesim.events import RejectReason, RequestRejected

if TYPE_CHECKING:
    from servesim.engine.engine import Engine


#: The event's reason for each outcome refused on arrival.
REASONS: dict[int, RejectReason] = {
    OUTCOME_REJECTED_QUEUED_REQS: "max_num_queued_reqs",
    OUTCOME_REJECTED_QUEUED_TOKENS: "max_num_queued_tokens",
    OUTCOME_REJECTED_TOO_LONG: "prompt_too_long",
}


class AdmissionGate:
    """The two limits of one API server (None: no limit) and what they count."""

    def __init__(self, max_num_queued_reqs: int | None, max_num_queued_tokens: int | None) -> None:
        self.max_reqs = max_num_queued_reqs
        self.max_tokens = max_num_queued_tokens
        self._closed: list[float] = []  # finish times of closed in-flight requests (a heap)
        self._prefilling: dict[int, Request] = {}  # admitted requests perhaps still prefilling

    def check(self, t: float, live: dict[int, Request]) -> int:
        """The rejection outcome for a request arriving at ``t`` (0: admitted), ``live`` being the
        requests the engine holds now (arrived, not closed)."""
        if self.max_reqs is not None:
            closed = self._closed
            while closed and closed[0] <= t:
                heapq.heappop(closed)
            if len(live) + len(closed) + 1 > self.max_reqs:
                return OUTCOME_REJECTED_QUEUED_REQS
        if self.max_tokens is not None and self.queued_tokens(t, live) >= self.max_tokens:
            return OUTCOME_REJECTED_QUEUED_TOKENS
        return 0

    def queued_tokens(self, t: float, live: dict[int, Request]) -> int:
        """vLLM's ``get_num_queued_tokens`` at ``t``: the full prompts of the requests in flight
        whose first token had not come out yet. Requests out of the phase for good (their first
        token, or their end, at or before ``t``) are dropped: later arrivals come later."""
        total = 0
        gone: list[int] = []
        for idx, r in self._prefilling.items():
            ft = r.first_token
            if ft >= 0.0 and ft <= t:
                gone.append(idx)
            elif idx in live or r.finish_time > t:
                total += r.prompt_len
            else:
                gone.append(idx)
        for idx in gone:
            del self._prefilling[idx]
        return total

    def admitted(self, r: Request) -> None:
        """``r`` passed the gate and is in flight."""
        if self.max_tokens is not None:
            self._prefilling[r.idx] = r

    def closed(self, finish_time: float) -> None:
        """An in-flight request closed at ``finish_time`` (its end still counts before then)."""
        if self.max_reqs is not None:
            heapq.heappush(self._closed, finish_time)


def gate_of(max_num_queued_reqs: int | None, max_num_queued_tokens: int | None) -> AdmissionGate | None:
    """The gate of an engine with these limits; None (nothing checked) when neither is set."""
    if max_num_queued_reqs is None and max_num_queued_tokens is None:
        return None
    return AdmissionGate(max_num_queued_reqs, max_num_queued_tokens)


def rejected_on_arrival(engine: Engine, r: Request, t: float) -> bool:
    """Whether ``engine``'s API server refuses ``r`` arriving at ``t``: HTTP 503 from a limit
    (checked first, as vLLM's serving layer does), else 400 for a prompt of ``max_model_len`` or
    more. If so ``r`` is closed there with that outcome (never in flight: it counts in no limit)."""
    gate = engine.gate
    code = gate.check(t, engine.live) if gate is not None else 0
    if not code and r.prompt_len >= engine.max_model_len:
        code = OUTCOME_REJECTED_TOO_LONG
    if not code:
        return False
    r.status = REJECTED
    r.outcome = code
    r.finish_time = t
    engine.rec.close_request(r)
    engine.num_closed += 1
    if engine.emit is not None:
        engine.emit(RequestRejected(t, r.req_id, engine.name, REASONS[code]))
    return True


class AdmissionSummary(BaseModel):
    """The API server's HTTP 503s (``max_num_queued_reqs`` / ``max_num_queued_tokens``): how many,
    when, and of which class. A rejected request never counts as good, and has no latency: it
    is left out of every percentile, as a client that got a 503 measures none."""

    max_num_queued_reqs: int | None
    max_num_queued_tokens: int | None
    num_rejected: int = Field(description="Requests answered HTTP 503 (both limits).")
    num_rejected_queued_reqs: int = Field(description="Of them, by max_num_queued_reqs.")
    num_rejected_queued_tokens: int = Field(description="Of them, by max_num_queued_tokens.")
    rejection_rate: float = Field(description="503s / requests.")
    first_rejection_s: float | None = Field(description="Arrival time of the first 503 (None: none).")
    last_rejection_s: float | None = Field(description="Arrival time of the last 503 (None: none).")
    by_priority: dict[str, int] = Field(description="503s per priority class (every class, 0 included).")
    by_tenant: dict[str, int] = Field(description="503s per tenant (every tenant, 0 included).")


#: The outcome names of a 503.
REJECTED_503 = (OUTCOMES[OUTCOME_REJECTED_QUEUED_REQS], OUTCOMES[OUTCOME_REJECTED_QUEUED_TOKENS])


def admission_summary(
    requests: pd.DataFrame, max_num_queued_reqs: int | None, max_num_queued_tokens: int | None
) -> AdmissionSummary:
    """The 503s of a run from its per-request records (``outcome``, ``arrival_s``, ``priority``,
    ``tenant``)."""
    outcome = requests["outcome"].to_numpy()
    by_reqs = outcome == REJECTED_503[0]
    by_tokens = outcome == REJECTED_503[1]
    rejected = by_reqs | by_tokens
    n = int(rejected.sum())
    at = requests["arrival_s"].to_numpy(dtype=np.float64)[rejected]

    def per_class(col: str) -> dict[str, int]:
        if col not in requests:
            return {}
        labels = requests[col]
        keep = labels.notna().to_numpy()
        counts = {str(k): 0 for k in sorted(set(labels[keep]), key=str)}
        for k in labels[keep & rejected]:
            counts[str(k)] += 1
        return counts

    return AdmissionSummary(
        max_num_queued_reqs=max_num_queued_reqs,
        max_num_queued_tokens=max_num_queued_tokens,
        num_rejected=n,
        num_rejected_queued_reqs=int(by_reqs.sum()),
        num_rejected_queued_tokens=int(by_tokens.sum()),
        rejection_rate=n / len(requests) if len(requests) else 0.0,
        first_rejection_s=float(at.min()) if n else None,
        last_rejection_s=float(at.max()) if n else None,
        by_priority=per_class("priority"),
        by_tenant=per_class("tenant"),
    )


__all__ = [
    "REJECTED_503",
    "AdmissionGate",
    "AdmissionSummary",
    "admission_summary",
    "gate_of",
    "rejected_on_arrival",
]
