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
  With a KV connector (``kv_connector_base.py``) the same loop asks it vLLM's questions and
  drains the KV-holding queue's requests whose load has finished first.
* After the step every scheduled request's ``num_computed`` advances; a request that computed
  all its known tokens samples one output token, and stops at ``max_tokens`` or
  ``max_model_len``; finished requests free their blocks in scheduling order.

The fast path (``DecodeGroup``) serves steady decodes in aggregate when a step provably serves
every one of them without preemption; otherwise every decode is materialised and the step runs
through the same plain code as the naive engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine import async_steps
from servesim.engine.config import EngineConfig
from servesim.engine.decode_group import SEQ_BITS, DecodeGroup
from servesim.engine.kv_cache_manager import KVCacheManager
from servesim.engine.kv_groups import has_mamba
from servesim.engine.kv_transfers import KVTransferState
from servesim.engine.request import (
    FINISHED,
    OUTCOME_FINISHED,
    OUTCOME_LENGTH_CAPPED,
    PREEMPTED,
    RUNNING,
    WAITING,
    WAITING_FOR_REMOTE_KVS,
    Request,
)
from servesim.engine.scheduler_finish import finish_requests
from servesim.engine.speculative import AcceptanceModel
from servesim.engine.step_plan import (
    PrefillCadence,
    StepPlan,
    admit_seq,
    any_prefill_chunk,
    priority_key,
    running_index,
    running_tokens,
    tokens_kept,
)
from servesim.engine.waiting_queue import FCFSQueue, PriorityQueue
from servesim.errors import ConfigError, InternalError

if TYPE_CHECKING:
    from servesim.engine.kv_connector_base import KVConnector


class Scheduler:
    """Running list, waiting queue and the step logic; knows nothing about time or I/O."""

    def __init__(
        self,
        config: EngineConfig,
        kv: KVCacheManager,
        max_model_len: int,
        fast: bool,
        connector: KVConnector | None = None,
    ) -> None:
        self.kv = kv
        # vLLM's two budgets: ``token_budget`` (max_num_scheduled_tokens) and ``input_budget``
        # (max_num_batched_tokens, which also pays the drafter's slots). Without speculation each
        # scheduled token takes one of each, so the smaller is the one budget.
        mbt = config.max_num_batched_tokens
        mst = config.max_num_scheduled_tokens if config.max_num_scheduled_tokens is not None else mbt
        spec = config.speculative_config
        self.budget = mst if spec is not None else min(mst, mbt)
        self.input_budget = mbt if spec is not None else self.budget
        self.max_num_seqs = config.max_num_seqs
        # vLLM's max_num_active_reqs: admission into RUNNING stops here (max_num_seqs is the runner's).
        self.max_num_active = (
            config.max_num_active_seqs if config.max_num_active_seqs is not None else config.max_num_seqs
        )
        self.chunked = config.enable_chunked_prefill
        self.threshold = config.long_prefill_token_threshold
        self.adaptive = config.long_prefill_token_threshold_adaptive
        self.mbt = mbt
        self.prefill_interval = config.prefill_schedule_interval
        self.cadence = PrefillCadence(self.prefill_interval)  # vLLM's prefill_schedule_interval
        if self.prefill_interval > 1 and connector is not None:
            raise ConfigError(
                f"prefill_schedule_interval {self.prefill_interval} with a KV connector (offload, P/D): "
                "the prefill cadence beside the connector's deferred requests is not modelled"
            )
        self.priority = config.policy == "priority"
        self.async_sched = config.async_scheduling  # vLLM's AsyncScheduler (async_steps.py)
        # vLLM's need_mamba_block_aligned_split: mamba groups with prefix caching (mode "align")
        # cut prefill chunks at block boundaries (HybridKVCacheManager.aligned_split).
        self.mamba_align = config.enable_prefix_caching and has_mamba(config.kv_cache_groups)
        # Pipeline parallelism: vLLM's current_step, the count of schedule() calls, which the
        # batch queue sets (engine.pipeline_steps); 0 without PP, when no request is ever skipped.
        self.pp_step = 0
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
        self.spec_k = spec.num_speculative_tokens if spec is not None else 0
        self.draft_slots = spec.draft_slots if spec is not None else 0
        self.acceptance: object = None
        # The drafter's proposal lengths: None proposes k drafts every time (vLLM's EAGLE/MTP and a
        # matching n-gram); an object with ``proposed(r, k)`` gives fewer (an n-gram miss, or a
        # recorded run's drafter), which vLLM's scheduler takes as they are.
        self.drafts: object = None
        self.input_left = 0
        self.spec_drafted = self.spec_accepted = self.spec_verifications = 0  # run totals
        if spec is not None:
            if fast:
                raise InternalError("speculative decoding runs on the plain path (fast=False)")
            self.acceptance = AcceptanceModel(spec.rates(), spec.acceptance_seed)
            kv.lookahead = spec.num_lookahead_tokens
            kv.hash_lookahead = spec.num_hash_lookahead_tokens(kv.caching)
        # vLLM's KV connector (kv_connector_base.py), asked at vLLM's points, and what the
        # scheduler keeps beside it (kv_transfers.py); None: no connector, none of it runs.
        self.connector = connector
        self.kv_xfer = KVTransferState(connector, kv, self.priority) if connector is not None else None
        # vLLM's lora_config.max_loras (0: LoRA off): the waiting loop skips a request whose
        # adapter would make one distinct adapter too many among the running requests.
        self.max_loras = config.max_loras if config.enable_lora else 0
        if self.max_loras and connector is not None:
            raise ConfigError(
                "enable_lora with a KV connector (CPU offload, P/D) is not modelled yet: a request "
                "skipped for its adapter would go back to the connector's holding queue; drop one"
            )

    # ------------------------------------------------------------------ schedule
    def schedule(self, step: int, now: float) -> StepPlan:
        plan = StepPlan()
        if self.mamba_align:
            self.kv.new_step_starts()
        n_eligible = len(self.running) + len(self.waiting)
        xfer = self.kv_xfer
        if xfer is not None:
            n_eligible += len(xfer.holding)
        thr = self.threshold if n_eligible > 1 else 0
        if thr > 0 and self.adaptive:  # floored at a fair share of the input budget
            fair = self.mbt // n_eligible
            if fair > thr:
                thr = fair
        cadence = self.cadence if self.prefill_interval > 1 else None
        defer = cadence is not None and cadence.defer(self.running)
        plan.defer_prefill = defer
        group = self.group
        if group is not None and group.n:
            budget = self._fast_running_pass(plan, step, thr)
            if budget < 0:  # the fast pass cannot prove the step is plain: do it the plain way
                self.materialize_all(step, now)
                budget = self._running_pass(plan, thr)
        else:
            budget = self._running_pass(plan, thr)
        if not plan.preempted:
            self._waiting_pass(plan, budget, thr, now)
            if cadence is not None and not defer:  # the release step: did it drain the queue?
                cadence.capacity_bound = len(self.waiting) > 0
        if xfer is not None:
            xfer.prefills_done(plan)
        if cadence is not None:
            cadence.after(plan)
        return plan

    def _running_pass(self, plan: StepPlan, thr: int) -> int:
        """Phase A exactly as vLLM writes it; returns the budget left."""
        running = self.running
        kv = self.kv
        budget = self.budget
        mml = self.max_model_len
        scheduled = plan.scheduled
        ds = self.draft_slots
        ib = self.input_budget  # vLLM's input budget: less the drafter's extra rows per request
        defer = plan.defer_prefill
        i = 0
        while i < len(running) and budget > 0:
            if ib <= ds:
                break
            r = running[i]
            if r.placeholders and r.num_computed + 2 - r.placeholders >= r.prompt_len + r.max_tokens:
                i += 1  # async: the step in flight samples its last token; vLLM schedules no more
                continue
            if self.pp_step < r.eligible_step:  # PP: vLLM decodes a request every pp_size steps
                i += 1
                continue
            if defer and r.prefill_chunk:  # the cadence holds this in-progress prefill chunk
                i += 1
                continue
            n = running_tokens(r, thr, budget if budget < ib - ds else ib - ds, mml)
            if self.mamba_align and n > 0:
                n = kv.aligned_split(r, n, r.num_computed)
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
            if r.prefill_chunk:
                plan.carried_prefill = True
            budget -= n
            ib -= n + ds
            i += 1
            if r.spec_tokens:  # vLLM: the drafts that fit are verified, the rest dropped
                sp = n + r.num_computed - r.prompt_len - r.num_output - r.placeholders
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
                if plan.defer_prefill and r.prefill_chunk:
                    continue  # the cadence holds this in-progress prefill chunk
                n = running_tokens(r, thr, avail, mml)
                if n <= 0:
                    continue
                if r.prefill_chunk:
                    plan.carried_prefill = True
                used += n
                blocks += kv.blocks_needed_running(r, n)
                chunks.append((r, n))
            left -= used
            if left < 0:
                return -1
        if blocks > kv.pool.num_free:
            return -1
        if group_blocks:
            popped = kv.pool.get_new_blocks(group_blocks)
            group.limbo.extend(popped)
            if self.kv_xfer is not None:
                self.kv_xfer.connector.group_allocated(popped)
        for r, n in chunks:
            kv.allocate_running(r, n)
        plan.scheduled = chunks
        plan.num_group_decodes = group.n
        plan.group_ctx_sum = group.ctx_base + group.n * (step + 1)
        return left

    def _waiting_pass(self, plan: StepPlan, budget: int, thr: int, now: float) -> None:
        """Phase B, vLLM's waiting loop: admissions in queue order, the KV-holding queue's ready
        requests first (with a connector), then the waiting queue; the first request that does
        not fit stops it. One the connector cannot answer for yet keeps its place, skipped, and
        so does one whose LoRA adapter would exceed ``max_loras`` (vLLM counts the adapters of
        every running request, scheduled in this step or not, plus those admitted so far), and a
        preempted one whose output is still in flight (vLLM's ``num_stale_output_tokens``)."""
        waiting = self.waiting
        running = self.running
        kv = self.kv
        xfer = self.kv_xfer
        ready = xfer.holding.ready if xfer is not None else None
        k = self.spec_k
        ds = self.draft_slots
        ib = self.input_left if k else budget
        # vLLM pads a request admitted straight into decode to 1 + k rows (uniform batches),
        # unless a running request is still prefilling.
        pad_ok = k > 0 and not any_prefill_chunk(plan.scheduled)
        has_running_scheduled = bool(plan.scheduled)
        skipped: list[Request] | None = None
        max_loras = self.max_loras
        loras: set[int] | None = None
        if max_loras:
            loras = {x.lora for x in running if x.lora > 0}
        while budget > 0:
            q = ready if ready is not None and len(ready) else waiting
            if not len(q) or ib <= ds or len(running) >= self.max_num_active:
                break
            r = q.peek()
            if xfer is not None and r.status == WAITING_FOR_REMOTE_KVS:  # ready: its load is done
                xfer.update_waiting_for_remote_kv(r)
            if loras is not None and r.lora and len(loras) == max_loras and r.lora not in loras:
                skipped = [] if skipped is None else skipped
                skipped.append(q.pop())  # vLLM: "Scheduling would exceed max_loras, skip."
                plan.lora_skipped += 1
                continue
            if r.in_flight:  # preempted with output still in flight (PP: several steps deep)
                skipped = [] if skipped is None else skipped
                skipped.append(q.pop())  # vLLM: num_stale_output_tokens, "it drains within the
                continue  # pipeline depth" (a queue of two never holds one here)
            num_tokens = r.prompt_len + r.num_output
            fresh = r.num_computed == 0 and not r.blocks  # (a failed load keeps its blocks)
            load_async = False
            if fresh:  # the prefix-cache lookup, then the connector's tokens beyond the hit
                hit = kv.lookup(r)
                hit_tokens = len(hit) * kv.block_size
                ext = 0
                if xfer is None:
                    if r.external_tokens:
                        ext = self._migrated_tokens(r, hit_tokens, num_tokens)
                else:
                    got, load_async = xfer.connector.get_num_new_matched_tokens(r, hit_tokens)
                    if got is None:  # it cannot tell yet: ask again next step
                        skipped = [] if skipped is None else skipped
                        skipped.append(q.pop())
                        continue
                    ext = got
                computed = hit_tokens + ext
            else:  # its blocks hold its KV (loaded): no lookup
                hit = []
                hit_tokens = ext = 0
                computed = r.num_computed
            if plan.defer_prefill and not load_async and computed < num_tokens - 1:
                break  # the cadence holds admissions with prompt left to compute
            n = 0 if load_async else num_tokens - computed  # an asynchronous load computes nothing
            cap = budget if budget < ib - ds else ib - ds
            padded = pad_ok and n == 1 and (has_running_scheduled or computed > 0)
            if padded and computed + k + 2 <= self.max_model_len:
                if k + 1 > cap:
                    break  # vLLM: rather not schedule than schedule unpadded
                n = k + 1
            else:
                padded = False
            if 0 < thr < n:
                n = thr
            if n > cap:
                if not self.chunked:
                    break
                n = cap
            if self.mamba_align and n > 0:  # (not an asynchronous load: vLLM splits no load)
                n = kv.aligned_split(r, n, computed)
                if n == 0:
                    break  # no block-aligned chunk fits the budget
            reserved = xfer.reserved_blocks() if load_async and xfer is not None else 0
            if not kv.allocate_slots(r, n, hit, bool(running), ext, load_async, reserved):
                break
            q.pop()
            if xfer is not None and xfer.allocated(r, ext, now, fresh, hit_tokens, load_async):
                continue  # parked in the KV-holding queue until its load is done
            gpu = hit_tokens if fresh or xfer is None else xfer.local_hit.pop(r.idx, 0)
            if computed < num_tokens - 1:
                plan.carried_prefill = True
            self._admit(plan, r, computed, gpu, ext, n, now)
            if loras is not None and r.lora:
                loras.add(r.lora)
            budget -= n
            ib -= n + ds
            if padded:
                r.spec_sched = n - 1
                r.spec_padded = True
        if skipped is not None:  # back to the front of the waiting queue, in their order
            for r in reversed(skipped):
                waiting.prepend(r)

    @staticmethod
    def _migrated_tokens(r: Request, hit_tokens: int, num_tokens: int) -> int:
        """Tokens of a prefix whose KV migrates in with ``r`` (a cluster moved it off a lost
        replica), beyond its local hit: allocated, not computed."""
        ext = min(r.external_tokens, num_tokens - 1) - hit_tokens
        return ext if ext > 0 else 0

    def _admit(
        self, plan: StepPlan, r: Request, computed: int, gpu: int, ext: int, n: int, now: float
    ) -> None:
        """``r`` joins the running list with ``computed`` tokens (``gpu`` of them its prefix hit,
        ``ext`` loaded by the connector or migrated in) and ``n`` to compute in this step."""
        self.running.append(r)
        r.admit_seq = self._admit_seq
        self._admit_seq += 1
        if r.status == WAITING:
            plan.new.append(r)
            r.prefix_hit_tokens = gpu
            r.first_scheduled = now
        else:
            plan.resumed.append(r)
            lost = r.lost_tokens
            if self.kv_xfer is None:
                # Of the tokens it had computed when preempted, the cache still holds `gpu` (or,
                # moved from a lost replica, its migrated KV brings `ext`); the rest is recomputed.
                reused = gpu if gpu < lost else lost
                moved = ext if ext < lost - reused else lost - reused
                r.migrated_tokens += moved
                r.external_tokens = 0
            else:  # what the connector loaded is recovered too
                reused = computed if computed < lost else lost
                moved = 0
            r.reused_tokens += reused
            r.recomputed_tokens += lost - reused - moved
        if gpu:
            plan.prefix_hits.append((r, gpu))
        r.status = RUNNING
        r.num_computed = computed
        if self.kv_xfer is not None:
            self.kv_xfer.admitted(plan, r, gpu, n)
        plan.scheduled.append((r, n))

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
        return max(candidates, key=priority_key) if self.priority else candidates[-1]

    def _preempt(self, r: Request) -> None:
        self.kv.free_preempted(r)
        r.spec_tokens = r.spec_sched = 0  # vLLM: a preempted request drops its drafts
        r.spec_padded = False
        r.placeholders = 0  # async: the output in flight comes back stale (async_steps.update)
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

    def after_schedule(self, plan: StepPlan) -> None:
        """Async scheduling: vLLM's ``_update_after_schedule`` (async_steps.after_schedule)."""
        async_steps.after_schedule(plan, self.spec_k)

    # ------------------------------------------------------------------ update
    def update(self, plan: StepPlan, step: int, t_end: float) -> list[Request]:
        """Apply the step's results; returns the requests that finished, in scheduling order."""
        if self.async_sched:
            return async_steps.update(self, plan, step, t_end)
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
                    finished.sort(key=admit_seq)
                else:
                    finished = done
        xfer = self.kv_xfer
        if finished:
            if xfer is not None:
                for r in finished:
                    xfer.request_finished(r)
            self.retire(finished, t_end)
        if xfer is not None:
            xfer.transfers_done(t_end)
        if group is not None:
            self._regroup(plan, step + 1)
        return finished

    def _verify(self, plan: StepPlan, step: int, t_end: float) -> list[Request]:
        """``update_from_output`` with speculation: each request that computed all its known
        tokens verifies its scheduled drafts; the target accepts ``a`` of ``d`` (the acceptance
        model), so it emits 1 + a tokens and ``num_computed`` steps back by the d - a rejected
        ones (their KV slots stay allocated, as in vLLM, and are overwritten later). Tokens past
        a stop are trimmed and ``num_computed`` with them. Then the drafter proposes k drafts (or
        ``drafts.proposed``) for every request that sampled and did not finish (vLLM's
        ``update_draft_token_ids``)."""
        mml = self.max_model_len
        k = self.spec_k
        kv = self.kv
        draws = self._draws(plan)
        j = 0
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
                    a = draws[j]
                    j += 1
                    r.spec_drafted += d
                    r.spec_accepted += a
                    self.spec_drafted += d
                    self.spec_accepted += a
                    self.spec_verifications += 1
                r.spec_verifications += 1
                r.num_computed = c - (d - a)
                plan.spec.append((r, d, a))
            kept = tokens_kept(r, a, mml)
            o = r.num_output + kept
            stop = o >= r.max_tokens or r.prompt_len + o >= mml
            r.num_computed -= a + 1 - kept
            r.num_output = o
            self._emitted(r, step, t_end)
            if kv.caching:  # vLLM caches the newly verified full blocks
                kv.cache_blocks(r, r.num_computed)
            if stop:
                finished.append(r)
            elif self.drafts is None:
                r.spec_tokens = k
            else:
                r.spec_tokens = self.drafts.proposed(r, k)  # type: ignore[attr-defined]
        return finished

    def _draws(self, plan: StepPlan) -> list[int]:
        """The acceptance model's answers for the step's verifications, in scheduling order: the
        requests ``_verify`` will ask about (their whole known tokens computed, drafts scheduled,
        not padding), asked at once so that the compiled core seeds their generators together."""
        reqs: list[Request] = []
        ns: list[int] = []
        for r, n in plan.scheduled:
            d = r.spec_sched
            if d and not r.spec_padded and r.num_computed + n >= r.prompt_len + r.num_output:
                reqs.append(r)
                ns.append(d)
        if not reqs:
            return ns
        out: list[int] = self.acceptance.accepted_many(reqs, ns)  # type: ignore[attr-defined]
        return out

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
        kv = self.kv  # its cpdef ``free`` called on it: a bound copy would be a Python wrapper
        # blocks the connector keeps for a send are freed when it is done
        sending = self.kv_xfer.sending if self.kv_xfer is not None else None
        for r in finished:
            r.status = FINISHED
            r.finish_time = t_end
            r.outcome = OUTCOME_FINISHED if r.num_output >= r.max_tokens else OUTCOME_LENGTH_CAPPED
            if not sending or r.idx not in sending:
                kv.free(r)
            del running[running_index(running, r)]

    # ------------------------------------------------------------------ finish from outside
    def finish_requests(self, requests: list[Request], outcome: int, step: int, t: float) -> list[Request]:
        """vLLM's ``Scheduler.finish_requests``: requests finished from outside the step loop
        (``scheduler_finish.finish_requests``, kept out of the compiled step code)."""
        return finish_requests(self, requests, outcome, step, t)

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
                candidates.sort(key=admit_seq)
        conn = self.kv_xfer.connector if self.kv_xfer is not None else None
        for r in candidates:
            if r.status != RUNNING:
                continue
            seg = r.segments
            # Join only right after emitting a token, so the group extends a run of outputs, and
            # only if the KV connector has nothing to do for it per step (``decode_ok``).
            if (
                r.num_computed == r.prompt_len + r.num_output - 1
                and seg
                and seg[-2] + seg[-1] == next_step
                and (conn is None or conn.decode_ok(r))
            ):
                group.add(r, next_step)
            else:
                keep.append(r)
        self.explicit = keep


BOOSTED_PRIORITY = -(1 << 62)
