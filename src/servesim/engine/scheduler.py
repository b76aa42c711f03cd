"""One vLLM V1 scheduler step (``Scheduler.schedule`` + ``update_from_output``), step-exact.

Read with ``docs/vllm-scheduling.md`` §2-§5 (a copy of the reference):

* Phase A serves RUNNING requests in admission order while budget remains: each gets
  ``min(remaining, long_prefill_token_threshold, budget, max_model_len - computed - 1)``
  tokens. If its blocks cannot be allocated, victims are preempted (FCFS: the last admitted;
  priority: the largest (priority, arrival)) until it fits or it is the victim itself.
  A request preempted ``starvation_threshold`` times is flagged STARVED; only if
  ``starvation_mitigation`` asks for it (not vLLM behaviour) is it then spared as a victim
  ("protect") and also moved to the best priority ("boost").
* Phase B, only if nobody was preempted, admits WAITING requests in queue order while budget
  and ``max_num_seqs`` allow, after a prefix-cache lookup; the first that does not fit (budget
  with chunking off, or the full-sequence block gate) stops the scan (head-of-line blocking).
* After the step every scheduled request's ``num_computed`` advances; a request that computed
  all its known tokens samples one output token, and stops at ``max_tokens`` or
  ``max_model_len``; finished requests free their blocks in scheduling order.

The fast path (``DecodeGroup``) serves steady decodes in aggregate when a step provably serves
every one of them without preemption; otherwise every decode is materialised and the step runs
through the same plain code as the naive engine.
"""

from __future__ import annotations

from bisect import bisect_left
from operator import attrgetter

from servesim.engine.config import EngineConfig
from servesim.engine.decode_group import SEQ_BITS, DecodeGroup
from servesim.engine.kv_cache_manager import KVCacheManager
from servesim.engine.kv_connector import WAITING_FOR_REMOTE_KVS
from servesim.engine.kv_connector import waiting_pass as connector_waiting_pass
from servesim.engine.request import (
    FINISHED,
    OUTCOME_FINISHED,
    OUTCOME_LENGTH_CAPPED,
    PREEMPTED,
    REJECTED,
    RUNNING,
    WAITING,
    Request,
)
from servesim.engine.speculative import AcceptanceModel
from servesim.engine.step_time import BatchComposition
from servesim.engine.waiting_queue import FCFSQueue, PriorityQueue
from servesim.errors import InternalError


class StepPlan:
    """What one step schedules. ``scheduled`` lists explicit (request, tokens) in running order;
    in a fast step the ``num_group_decodes`` members of the decode group also get one token each."""

    __slots__ = (
        "group_ctx_sum",
        "new",
        "num_group_decodes",
        "preempted",
        "prefix_hits",
        "resumed",
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


class Scheduler:
    """Running list, waiting queue and the step logic; knows nothing about time or I/O."""

    def __init__(
        self,
        config: EngineConfig,
        kv: KVCacheManager,
        max_model_len: int,
        fast: bool,
        connector: object = None,
    ) -> None:
        self.kv = kv
        # vLLM's KV connector (kv_connector.py); None: no connector, the plain scheduler below.
        self.connector = connector
        self.budget = config.max_num_batched_tokens
        self.max_num_seqs = config.max_num_seqs
        self.chunked = config.enable_chunked_prefill
        self.threshold = config.long_prefill_token_threshold
        self.priority = config.policy == "priority"
        self.max_model_len = max_model_len
        self.running: list[Request] = []
        self.waiting: FCFSQueue | PriorityQueue = PriorityQueue() if self.priority else FCFSQueue()
        self.group: DecodeGroup | None = DecodeGroup(kv, max_model_len) if fast else None
        self.explicit: list[Request] = []  # fast path: running requests outside the group, in order
        self._admit_seq = 0
        self.total_preemptions = 0
        # Starvation (servesim's analysis; vLLM has none): flag, and optionally protect/boost.
        self.starvation_threshold = config.starvation_threshold
        self.protect_starved = config.starvation_mitigation != "none"
        self.boost_starved = config.starvation_mitigation == "boost"
        # Speculative decoding (speculative.py); k = 0: off, and none of it runs.
        spec = config.speculative_config
        self.spec_k = spec.num_speculative_tokens if spec is not None else 0
        self.draft_slots = spec.draft_slots if spec is not None else 0
        self.acceptance: object = None
        self.input_left = 0
        self.spec_drafted = self.spec_accepted = self.spec_verifications = 0  # run totals
        if spec is not None:
            if fast:
                raise InternalError("speculative decoding runs on the plain path (fast=False)")
            self.acceptance = AcceptanceModel(spec.rates(), spec.acceptance_seed)
            kv.lookahead = spec.num_lookahead_tokens

    # ------------------------------------------------------------------ schedule
    def schedule(self, step: int, now: float) -> StepPlan:
        plan = StepPlan()
        n_eligible = len(self.running) + len(self.waiting)
        connector = self.connector
        if connector is not None:
            n_eligible += len(connector.holding)  # type: ignore[attr-defined]
        thr = self.threshold if n_eligible > 1 else 0
        group = self.group
        if group is not None and group.n:
            budget = self._fast_running_pass(plan, step, thr)
            if budget < 0:  # the fast pass cannot prove the step is plain: do it the plain way
                self.materialize_all(step, now)
                budget = self._running_pass(plan, thr)
        else:
            budget = self._running_pass(plan, thr)
        if not plan.preempted:
            if connector is None:
                self._waiting_pass(plan, budget, thr, now)
            else:
                connector_waiting_pass(self, plan, budget, thr, now, now)
        return plan

    def _running_pass(self, plan: StepPlan, thr: int) -> int:
        """Phase A exactly as vLLM writes it; returns the budget left."""
        running = self.running
        kv = self.kv
        budget = self.budget
        mml = self.max_model_len
        scheduled = plan.scheduled
        ds = self.draft_slots
        ib = budget  # vLLM's input budget: the token budget less the drafter's extra rows
        i = 0
        while i < len(running) and budget > 0:
            if ib <= ds:
                break
            r = running[i]
            n = running_tokens(r, thr, budget if budget < ib - ds else ib - ds, mml)
            if n <= 0:
                i += 1
                continue
            ok = kv.allocate_running(r, n)
            while not ok:
                victim = self._victim(r)
                vi = len(running) - 1 if victim is running[-1] else running_index(running, victim)
                del running[vi]
                if vi < i:  # already served this step: give its tokens back (priority policy)
                    i -= 1
                    for j, (s, sn) in enumerate(scheduled):
                        if s is victim:
                            del scheduled[j]
                            budget += sn
                            ib += sn + ds
                            break
                self._preempt(victim)
                plan.preempted.append(victim)
                if victim is r:
                    break
                ok = kv.allocate_running(r, n)
            if not ok:
                if self.priority:
                    continue  # r preempted itself; later requests may still fit
                break
            scheduled.append((r, n))
            budget -= n
            ib -= n + ds
            i += 1
            if r.spec_tokens:  # vLLM: the drafts that fit are verified, the rest dropped
                sp = n + r.num_computed - r.prompt_len - r.num_output
                r.spec_sched = sp if sp > 0 else 0
                r.spec_tokens = 0
        self.input_left = ib
        return budget

    def _fast_running_pass(self, plan: StepPlan, step: int, thr: int) -> int:
        """Phase A when every decode-group member provably gets its token and no allocation can
        fail. Returns the budget left, or -1 when that cannot be shown (nothing is changed then)."""
        group = self.group
        if group is None:
            raise InternalError("invariant broken: group is None")
        budget = self.budget
        mml = self.max_model_len
        kv = self.kv
        explicit = self.explicit
        running = self.running
        chunks: list[tuple[Request, int]] = []
        group_blocks = group.buckets[step % group.block_size]  # members crossing a block boundary
        blocks = group_blocks
        left = budget - group.n  # what remains once every member has its token
        if left < 0:
            return -1
        if explicit:
            # Walk the explicit requests in running order; members before each one have taken
            # their token out of the budget already.
            used = 0
            for j, r in enumerate(explicit):
                members_before = running_index(running, r) - j
                avail = budget - members_before - used
                if avail <= 0:
                    return -1
                n = running_tokens(r, thr, avail, mml)
                if n <= 0:
                    continue
                used += n
                blocks += kv.blocks_needed_running(r, n)
                chunks.append((r, n))
            left -= used
            if left < 0:
                return -1
        if blocks > kv.pool.num_free:
            return -1
        if group_blocks:
            group.limbo.extend(kv.pool.get_new_blocks(group_blocks))
        for r, n in chunks:
            kv.allocate_running(r, n)
        plan.scheduled = chunks
        plan.num_group_decodes = group.n
        plan.group_ctx_sum = group.ctx_base + group.n * (step + 1)
        return left

    def _waiting_pass(self, plan: StepPlan, budget: int, thr: int, now: float) -> None:
        """Phase B: admissions in queue order; the first request that does not fit stops it."""
        waiting = self.waiting
        running = self.running
        kv = self.kv
        k = self.spec_k
        ds = self.draft_slots
        ib = self.input_left if k else budget
        # vLLM pads a request admitted straight into decode to 1 + k rows (uniform batches),
        # unless a running request is still prefilling.
        pad_ok = k > 0 and not any_prefill_chunk(plan.scheduled)
        has_running_scheduled = bool(plan.scheduled)
        while budget > 0 and len(waiting):
            if ib <= ds:
                break
            if len(running) >= self.max_num_seqs:
                break
            r = waiting.peek()
            hit = kv.lookup(r)
            hit_tokens = len(hit) * kv.block_size
            num_tokens = r.prompt_len + r.num_output
            ext = 0
            if r.external_tokens:  # a prefix whose KV migrates in (cluster), beyond the local hit
                ext = min(r.external_tokens, num_tokens - 1) - hit_tokens
                if ext < 0:
                    ext = 0
            n = num_tokens - hit_tokens - ext
            cap = budget if budget < ib - ds else ib - ds
            padded = False
            if (
                pad_ok
                and n == 1
                and (has_running_scheduled or hit_tokens + ext > 0)
                and hit_tokens + ext + k + 2 <= self.max_model_len
            ):
                if k + 1 > cap:
                    break  # vLLM: rather not schedule than schedule unpadded
                n = k + 1
                padded = True
            if 0 < thr < n:
                n = thr
            if n > cap:
                if not self.chunked:
                    break
                n = cap
            if not kv.allocate_admission(r, n, hit, bool(running), ext):
                break
            waiting.pop()
            running.append(r)
            r.admit_seq = self._admit_seq
            self._admit_seq += 1
            if r.status == WAITING:
                plan.new.append(r)
                r.prefix_hit_tokens = hit_tokens
                r.first_scheduled = now
            else:
                plan.resumed.append(r)
                # Of the tokens it had computed when preempted, the cache still holds `hit` (or,
                # moved from a lost replica, its migrated KV brings `ext`); the rest is recomputed.
                lost = r.lost_tokens
                reused = hit_tokens if hit_tokens < lost else lost
                moved = ext if ext < lost - reused else lost - reused
                r.reused_tokens += reused
                r.migrated_tokens += moved
                r.recomputed_tokens += lost - reused - moved
                r.external_tokens = 0
            if hit_tokens:
                plan.prefix_hits.append((r, hit_tokens))
            r.status = RUNNING
            r.num_computed = hit_tokens + ext
            plan.scheduled.append((r, n))
            budget -= n
            ib -= n + ds
            if padded:
                r.spec_sched = n - 1
                r.spec_padded = True

    def _victim(self, r: Request) -> Request:
        """Whom vLLM preempts so that ``r`` can allocate: FCFS the last admitted, priority the
        largest (priority, arrival). With starvation mitigation, STARVED requests are spared
        while anyone else runs; when everyone running is STARVED, vLLM's own rule picks among
        them. (Sparing none of them by preempting ``r`` itself let two starved requests that
        each nearly fill the cache evict each other for ever: neither ever finished.)"""
        running = self.running
        candidates = running
        if self.protect_starved:
            candidates = [x for x in running if not x.starved] or running
        return max(candidates, key=_priority_key) if self.priority else candidates[-1]

    def _preempt(self, r: Request) -> None:
        self.kv.free_preempted(r)
        r.spec_tokens = r.spec_sched = 0  # vLLM: a preempted request drops its drafts
        r.spec_padded = False
        r.status = PREEMPTED
        r.lost_tokens = r.num_computed
        r.num_computed = 0
        r.num_preemptions += 1
        self.total_preemptions += 1
        if r.num_preemptions >= self.starvation_threshold and not r.starved:
            r.starved = True
            if self.boost_starved:
                r.priority = BOOSTED_PRIORITY  # first in the waiting queue, last to be preempted
        self.waiting.prepend(r)

    # ------------------------------------------------------------------ fast-path bookkeeping
    def materialize_all(self, step: int, now: float) -> None:
        """Make every decode-group member explicit (state as of the start of ``step``)."""
        group = self.group
        if group is None:
            raise InternalError("invariant broken: group is None")
        for r in self.running:
            if r.sync_step >= 0:
                group.materialize(r, step, now)
        group.compact()
        self.explicit = list(self.running)

    # ------------------------------------------------------------------ update
    def update(self, plan: StepPlan, step: int, t_end: float) -> list[Request]:
        """Apply the step's results; returns the requests that finished, in scheduling order."""
        mml = self.max_model_len
        finished: list[Request] = []
        if self.spec_k:
            finished = self._verify(plan, step, t_end)
        for r, n in plan.scheduled if not self.spec_k else ():
            c = r.num_computed + n
            r.num_computed = c
            if c < r.prompt_len + r.num_output:
                continue  # a partial prefill chunk samples nothing
            o = r.num_output + 1
            r.num_output = o
            self._emitted(r, step, t_end)
            if o >= r.max_tokens or r.prompt_len + o >= mml:
                finished.append(r)
        group = self.group
        if group is not None and plan.num_group_decodes and group.finish_heap[0][0] >> SEQ_BITS <= step:
            done = group.take_finishing(step, t_end)
            if done:
                if finished:
                    finished.extend(done)
                    finished.sort(key=_admit_seq)
                else:
                    finished = done
        if finished:
            connector = self.connector
            if connector is not None:
                for r in finished:
                    connector.request_finished(r)  # type: ignore[attr-defined]
            self.retire(finished, t_end)
        if self.connector is not None:
            self.connector.complete_due(t_end)  # type: ignore[attr-defined]
        if group is not None:
            self._regroup(plan, step + 1)
        return finished

    def _verify(self, plan: StepPlan, step: int, t_end: float) -> list[Request]:
        """``update_from_output`` with speculation: each request that computed all its known
        tokens verifies its scheduled drafts; the target accepts ``a`` of ``d`` (the acceptance
        model), so it emits 1 + a tokens and ``num_computed`` steps back by the d - a rejected
        ones (their KV slots stay allocated, as in vLLM, and are overwritten later). Tokens past
        a stop are trimmed and ``num_computed`` with them. Then the drafter proposes k drafts for
        every request that sampled and did not finish (vLLM's ``update_draft_token_ids``)."""
        mml = self.max_model_len
        k = self.spec_k
        kv = self.kv
        acc = self.acceptance
        finished: list[Request] = []
        for r, n in plan.scheduled:
            c = r.num_computed + n
            r.num_computed = c
            d = r.spec_sched
            r.spec_sched = 0
            if c < r.prompt_len + r.num_output:
                r.prefill_chunk = True
                continue  # a partial prefill chunk samples nothing
            r.prefill_chunk = False
            a = 0
            if d:
                if r.spec_padded:
                    r.spec_padded = False  # padding rows are never accepted
                else:
                    a = acc.accepted(r, d)  # type: ignore[attr-defined]
                    r.spec_drafted += d
                    r.spec_accepted += a
                    self.spec_drafted += d
                    self.spec_accepted += a
                    self.spec_verifications += 1
                r.spec_verifications += 1
                r.num_computed = c - (d - a)
                plan.spec.append((r, d, a))
            o = r.num_output
            stop = False
            emitted = 0
            while emitted < a + 1:
                o += 1
                emitted += 1
                if o >= r.max_tokens or r.prompt_len + o >= mml:
                    stop = True
                    break
            r.num_computed -= a + 1 - emitted
            r.num_output = o
            self._emitted(r, step, t_end)
            if kv.caching:  # vLLM caches the newly verified full blocks
                kv.cache_blocks(r, r.num_computed)
            if stop:
                finished.append(r)
            else:
                r.spec_tokens = k
        return finished

    def _emitted(self, r: Request, step: int, t_end: float) -> None:
        """``r`` sampled output in step ``step`` (ending at ``t_end``): its first-token time, its
        run of consecutive token steps (``segments``: start, length pairs) and its last token."""
        if r.first_token < 0:
            r.first_token = t_end
        seg = r.segments
        if seg and seg[-2] + seg[-1] == step:
            seg[-1] += 1
        else:
            seg.append(step)
            seg.append(1)
        r.last_token = t_end

    def retire(self, finished: list[Request], t_end: float) -> None:
        """Requests that produced their last token in the step ending at ``t_end`` leave the
        running list and free their blocks, in scheduling order."""
        running = self.running
        free = self.kv.free
        for r in finished:
            r.status = FINISHED
            r.finish_time = t_end
            r.outcome = OUTCOME_FINISHED if r.num_output >= r.max_tokens else OUTCOME_LENGTH_CAPPED
            free(r)
            del running[running_index(running, r)]

    # ------------------------------------------------------------------ finish from outside
    def finish_requests(self, requests: list[Request], outcome: int, step: int, t: float) -> list[Request]:
        """vLLM's ``Scheduler.finish_requests(request_ids, finished_status)``: requests finished
        from outside the step loop (a client went away: ``OUTCOME_ABORTED``, vLLM's
        FINISHED_ABORTED) at ``t``, between steps (``step``: the next one). Running ones leave
        the running list (a decode-group member is made explicit first); waiting, preempted and
        KV-loading (WAITING_FOR_REMOTE_KVS) ones leave their queue. Then, as vLLM's
        ``_free_request``, the connector's ``request_finished`` and the KV blocks back to the
        pool (hashed ones stay in the prefix cache). A load still in flight for a KV-loading
        request runs to its end in the connector, which no longer admits the request; its
        blocks are freed now (vLLM delays that free until the worker reports the load). Returns
        the requests finished here: not those already finished."""
        valid: list[Request] = []
        running_gone: list[Request] = []
        connector = self.connector
        for r in requests:
            status = r.status
            if status in (FINISHED, REJECTED):
                continue
            valid.append(r)
            if status == RUNNING:
                if r.sync_step >= 0:  # a decode-group member: make the group explicit first
                    self.materialize_all(step, t)
                running_gone.append(r)
        for r in running_gone:
            del self.running[running_index(self.running, r)]
            if r in self.explicit:
                self.explicit.remove(r)
        for r in valid:
            status = r.status
            # REJECTED marks a queued request gone (the priority queues drop its entry lazily)
            r.status = FINISHED if status == RUNNING else REJECTED
            if status == WAITING_FOR_REMOTE_KVS:
                connector.holding.remove(r)  # type: ignore[attr-defined]
                connector.finished_recving.discard(r.idx)  # type: ignore[attr-defined]
                connector.gpu_hit.pop(r.idx, None)  # type: ignore[attr-defined]
            elif status != RUNNING:
                self.waiting.remove(r)
            r.outcome = outcome
            r.finish_time = t
            if connector is not None:
                connector.request_finished(r)  # type: ignore[attr-defined]
            if r.blocks:
                self.kv.free(r)
        return valid

    def _regroup(self, plan: StepPlan, next_step: int) -> None:
        """After a step, explicit requests that now decode join the group."""
        group = self.group
        if group is None:
            raise InternalError("invariant broken: group is None")
        candidates = self.explicit
        if not candidates and not plan.new and not plan.resumed:
            return
        keep: list[Request] = []
        if plan.new or plan.resumed:
            if not candidates and not plan.resumed:
                candidates = plan.new  # already in admission order
            else:
                candidates = candidates + plan.new + plan.resumed
                candidates.sort(key=_admit_seq)
        for r in candidates:
            if r.status != RUNNING:
                continue
            seg = r.segments
            # Join only right after emitting a token, so the group extends a run of outputs.
            if r.num_computed == r.prompt_len + r.num_output - 1 and seg and seg[-2] + seg[-1] == next_step:
                group.add(r, next_step)
            else:
                keep.append(r)
        self.explicit = keep


BOOSTED_PRIORITY = -(1 << 62)


def running_tokens(r: Request, thr: int, budget: int, max_model_len: int) -> int:
    """Tokens a RUNNING request gets in Phase A: what it still needs, capped by the long-prefill
    threshold, the budget left and the context limit (vLLM: the position must stay below
    ``max_model_len``). 0 or less: skip it."""
    n = r.prompt_len + r.num_output + r.spec_tokens - r.num_computed  # vLLM: num_tokens_with_spec
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


_admit_seq = attrgetter("admit_seq")


def running_index(running: list[Request], r: Request) -> int:
    """Position of ``r`` in the running list, which is sorted by admission order: a binary
    search (``list.index`` compares element by element through ``__eq__``, far slower)."""
    return bisect_left(running, r.admit_seq, key=_admit_seq)


def _priority_key(r: Request) -> tuple[int, float, int]:
    # vLLM: max over (priority, arrival_time). Arrival times of real requests are distinct (the
    # wall clock at receipt), so requests sharing a trace timestamp are ordered by trace position.
    return (r.priority, r.arrival, r.idx)
