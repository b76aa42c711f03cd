"""What one scheduler step schedules (``StepPlan``), a step in flight (``PendingStep``), and the
rules that size a running request's share.

Kept apart from the scheduler's loops: the engine, the connectors, the events and a cluster
read a plan; only the scheduler writes one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING

from servesim.engine.request import Request
from servesim.engine.step_time import BatchComposition

if TYPE_CHECKING:
    from servesim.engine.step_time import DraftTimeModel


class StepPlan:
    """What one step schedules. ``scheduled`` lists explicit (request, tokens) in running order;
    in a fast step the ``num_group_decodes`` members of the decode group also get one token each.
    ``loaded`` (with a KV connector only; None without) lists the step's admissions whose KV the
    connector brought: (request, tokens beyond its GPU prefix hit)."""

    __slots__ = (
        "carried_prefill",
        "defer_prefill",
        "drafts",
        "group_ctx_sum",
        "loaded",
        "lora_skipped",
        "new",
        "num_group_decodes",
        "preempted",
        "prefix_hits",
        "resumed",
        "samples",
        "scheduled",
        "spec",
    )

    def __init__(self) -> None:
        self.scheduled: list[tuple[Request, int]] = []
        self.spec: list[tuple[Request, int, int]] = []  # speculation: (request, drafts, accepted)
        self.num_group_decodes = 0
        self.group_ctx_sum = 0
        self.preempted: list[Request] = []
        self.new: list[Request] = []
        self.resumed: list[Request] = []
        self.prefix_hits: list[tuple[Request, int]] = []
        self.loaded: list[tuple[Request, int]] | None = None
        # prefill_schedule_interval: the cadence holds prefill this step; the step carries prefill
        self.defer_prefill = False
        self.carried_prefill = False
        # enable_lora: waiting requests the step left waiting because their adapter would exceed
        # max_loras (the verdicts' "max_loras" limit; the engine keeps the steps where it is > 0)
        self.lora_skipped = 0
        # Async scheduling: per scheduled entry, whether it samples (decided when scheduled),
        # and with speculation the drafts verified with it (negative: -d padding rows, which
        # are never accepted), kept with the plan because the next step is scheduled before
        # this one's output is applied.
        self.samples: list[bool] | None = None
        self.drafts: list[int] | None = None

    def batch(self) -> BatchComposition:
        """What the step computes, for the step-time model (one token = a decode)."""
        decodes = self.num_group_decodes
        ctx = self.group_ctx_sum
        chunks: list[tuple[int, int]] = []
        prefill = 0
        for r, n in self.scheduled:
            if n == 1:
                decodes += 1
                ctx += r.num_computed + 1
            else:
                chunks.append((n, r.num_computed))
                prefill += n
        return BatchComposition(decodes, ctx, chunks, prefill)

    def draft_time(
        self,
        batch: BatchComposition,
        drafter: DraftTimeModel | None,
        k: int,
        draft_fraction: float,
        step_time: Callable[[BatchComposition], float],
    ) -> float:
        """The drafter's ``k`` passes after the step. With a drafter of the step-time model's own
        (``DraftTimeModel``): its first pass over what the target computed (``batch``), then
        k - 1 passes of one token per request of the step, as vLLM's proposers run (every
        request in the batch, partial prefills too: their drafts are discarded). Otherwise over
        every request that samples in the step, each pass ``draft_fraction`` of the target's
        decode step (``step_time``) over the same sequences (their context lengths as the step
        leaves them)."""
        n = 0
        ctx = 0
        if drafter is not None:
            for r, m in self.scheduled:
                n += 1
                ctx += r.num_computed + m
            return drafter.draft_time(batch, n, ctx) if n else 0.0
        for r, m in self.scheduled:
            c = r.num_computed + m
            if c >= r.prompt_len + r.num_output + r.placeholders:  # samples (async: not a chunk)
                n += 1
                ctx += c
        if n == 0:
            return 0.0
        return k * draft_fraction * step_time(BatchComposition(n, ctx, [], 0))


class PendingStep:
    """A step in flight: scheduled (blocks allocated) with its duration known, not yet applied."""

    __slots__ = ("batch", "duration", "kv_groups", "kv_used", "num_running", "num_waiting", "plan", "start")

    def __init__(
        self,
        plan: StepPlan,
        batch: BatchComposition,
        start: float,
        duration: float,
        num_running: int,
        num_waiting: int,
        kv_used: int,
    ) -> None:
        self.plan = plan
        self.batch = batch
        self.start = start
        self.duration = duration
        self.num_running = num_running
        self.num_waiting = num_waiting
        self.kv_used = kv_used
        # Hybrid KV cache groups: each group's blocks in use when the step was scheduled (a
        # snapshot of ``HybridKVCacheManager.group_used``); None for one block table.
        self.kv_groups: tuple[int, ...] | None = None

    @property
    def end(self) -> float:
        return self.start + self.duration


def running_tokens(r: Request, thr: int, budget: int, max_model_len: int) -> int:
    """Tokens a RUNNING request gets in Phase A: what it still needs, capped by the long-prefill
    threshold, the budget left and the context limit (vLLM: the position must stay below
    ``max_model_len``). 0 or less: skip it."""
    # vLLM: num_tokens_with_spec + num_output_placeholders (async scheduling) - num_computed
    n = r.prompt_len + r.num_output + r.spec_tokens + r.placeholders - r.num_computed
    if 0 < thr < n:
        n = thr
    if n > budget:
        n = budget
    cap = max_model_len - r.num_computed - 1
    return cap if n > cap else n


def any_prefill_chunk(scheduled: list[tuple[Request, int]]) -> bool:
    """Whether a request scheduled so far was a partial prefill after its last step (vLLM's
    ``prefill_scheduled``, which stops padding admitted decodes)."""
    for r, _n in scheduled:  # noqa: SIM110 (a loop: Cython compiles no closure in a cpdef)
        if r.prefill_chunk:
            return True
    return False


def tokens_kept(r: Request, verified: int, max_model_len: int) -> int:
    """How many of a step's ``verified + 1`` new tokens (the accepted drafts and the sampled one)
    ``r`` keeps: vLLM checks the stop token by token, so the output ends at the first token that
    reaches ``max_tokens`` or the model's length, and the rest are trimmed; never fewer than one
    (a sampling step always emits its token). The synchronous and the async scheduler both ask."""
    room = min(r.max_tokens, max_model_len - r.prompt_len) - r.num_output
    n = verified + 1
    if room < n:
        n = room if room > 1 else 1
    return n


admit_seq = attrgetter("admit_seq")


def running_index(running: list[Request], r: Request) -> int:
    """Position of ``r`` in the running list, which is sorted by admission order: a binary
    search (``list.index`` compares element by element through ``__eq__``, far slower)."""
    return bisect_left(running, r.admit_seq, key=admit_seq)


def priority_key(r: Request) -> tuple[int, float, int]:
    # vLLM: max over (priority, arrival_time). Arrival times of real requests are distinct (the
    # wall clock at receipt), so requests sharing a trace timestamp are ordered by trace position.
    return (r.priority, r.arrival, r.idx)


class PrefillCadence:
    """vLLM's local prefill cadence (``prefill_schedule_interval`` N > 1, one data-parallel rank):
    prefill (running chunks and admissions with prompt left) is held until N executed steps have
    passed since the last step that carried prefill, while a decode runs, unless the last release
    step could not drain the waiting queue (``prefill_capacity_bound``, vLLM's escape that keeps
    a backed-up engine from capping prefill at one budget per interval)."""

    __slots__ = ("capacity_bound", "interval", "last_prefill_step", "num_executed_steps")

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.last_prefill_step = -interval  # a full interval back: the first step is never held
        self.num_executed_steps = 0  # steps that scheduled anything
        self.capacity_bound = False

    def defer(self, running: list[Request]) -> bool:
        """Whether this step holds prefill (it becomes executed step ``num_executed_steps + 1``
        if it schedules anything)."""
        if self.capacity_bound or (self.num_executed_steps + 1) - self.last_prefill_step >= self.interval:
            return False
        for r in running:  # noqa: SIM110 (a typed loop in the compiled core)
            if not r.prefill_chunk:
                return True
        return False

    def after(self, plan: StepPlan) -> None:
        """A step was scheduled: count it if it scheduled anything, stamp it if it carried prefill,
        and mark each scheduled request's ``prefill_chunk`` (vLLM's ``is_prefill_chunk``)."""
        if plan.scheduled or plan.num_group_decodes:
            self.num_executed_steps += 1
        if plan.carried_prefill:
            self.last_prefill_step = self.num_executed_steps
        for r, n in plan.scheduled:
            r.prefill_chunk = r.num_computed + n < r.prompt_len + r.num_output


def roofline_step_time(
    batch: BatchComposition,
    a_cmp: float,
    a_ctx: float,
    a_mem: float,
    d_cmp: float,
    terms_of: Callable[[int, int, bool], tuple[float, float, float]],
) -> float:
    """``perf.roofline.RooflineStepTime.step_time``, given its attention coefficients (seconds
    per query-key pair of a prefill chunk ``a_cmp``, per cached token of one ``a_ctx``, per
    context token read ``a_mem``, per decode pair ``d_cmp``) and its per-shape terms
    (``terms_of(tokens, sequences, mixed)``: head, tail, seq): ``head + attention + tail +
    seq``, each chunk's attention the larger of its compute and its context read, summed in
    batch order, then the decodes'. In the compiled core because a speculative step times its
    verification rows (chunks of 1 + d tokens, one per request) twice, the target's pass and the
    drafter's first: a Python loop over them was a tenth of a speculative run."""
    nd = batch.num_decodes
    chunks = batch.prefill_chunks
    t = nd
    n_seq = nd
    attn = 0.0
    for c, cached in chunks:
        t += c
        ac = c * (cached + 0.5 * (c + 1)) * a_cmp
        if a_ctx:
            ac += cached * a_ctx
        am = (cached + c) * a_mem
        attn += ac if ac > am else am
    n_seq += len(chunks)
    if nd:
        ctx = batch.decode_ctx_sum
        dc = ctx * d_cmp
        dm = ctx * a_mem
        attn += dc if dc > dm else dm
    head, tail, seq = terms_of(t, n_seq, len(chunks) > 0)
    out: float = head + attn + tail + seq
    return out


__all__ = [
    "PendingStep",
    "PrefillCadence",
    "StepPlan",
    "any_prefill_chunk",
    "priority_key",
    "roofline_step_time",
    "running_index",
    "running_tokens",
    "tokens_kept",
]
