"""The deterministic advisor: the same three answers from servesim's own optimizers and a few
documented rules, with no network. It is the default without an API key, and the fallback when
Claude fails.

* batching: the optimizer's best setting when one is given; otherwise the rules below, each
  applied only when the simulated symptom is present (see ``docs/advisor.md``):
  R1 preemptions above 0.05 per request -> lower max_num_seqs to the observed mean batch (less
     KV pressure); R2 prompts longer than the budget with chunked prefill off -> turn it on; R3 a
     p99 prompt above a quarter of the budget next to short ones -> long_prefill_token_threshold
     at a quarter of the budget (decodes are not starved behind long prefills); R4 a queue that
     keeps waiting (p99 queue time above the TTFT SLO or above 1 s) -> one more replica per
     unit of excess load; R5 nothing wrong -> keep the current flags.
* reschedule: the SLA-aware policy of ``servesim.resched``;
* fallback: the recovery planner's per-job choice.
"""

from __future__ import annotations

import math

from servesim.advisor.cases import BatchingCase, FallbackCase, RescheduleCase
from servesim.advisor.models import (
    BatchingAdvice,
    FallbackAdvice,
    JobStrategy,
    OrderReason,
    RescheduleAdvice,
)
from servesim.resched import Policy, reschedule


def rules_batching(case: BatchingCase) -> BatchingAdvice:
    if case.optimizer_best is not None:
        best = case.optimizer_best
        rationale = [*best.rationale[:6], "chosen by servesim's optimizer (Optuna search, re-simulated)"]
        return best.model_copy(update={"rationale": rationale})
    cur = case.current_advice()
    s = case.evaluate(cur)
    df = case.trace.df
    flags = cur.model_dump(exclude={"rationale", "expected_effect"})
    why: list[str] = []
    n = max(1, s.num_requests)
    if s.num_preemptions / n > 0.05:
        seqs = max(1, min(cur.max_num_seqs, math.floor(s.mean_running)))
        if seqs < cur.max_num_seqs:
            flags["max_num_seqs"] = seqs
            why.append(
                f"R1: {s.num_preemptions} preemptions for {s.num_requests} requests (KV usage up to "
                f"{s.max_kv_usage:.0%}); max_num_seqs {cur.max_num_seqs} -> {seqs}, the mean batch, "
                "cuts KV thrashing"
            )
    p99_prompt = float(df["prompt_len"].quantile(0.99)) if len(df) else 0.0
    budget = int(flags["max_num_batched_tokens"])
    if not cur.enable_chunked_prefill and p99_prompt > budget:
        flags["enable_chunked_prefill"] = True
        why.append(f"R2: p99 prompt {p99_prompt:.0f} tokens exceeds the {budget}-token budget: chunk it")
    p50_prompt = float(df["prompt_len"].median()) if len(df) else 0.0
    if (
        flags["enable_chunked_prefill"]
        and cur.long_prefill_token_threshold == 0
        and p99_prompt > budget / 4 > p50_prompt
    ):
        flags["long_prefill_token_threshold"] = budget // 4
        why.append(
            f"R3: p99 prompt {p99_prompt:.0f} vs median {p50_prompt:.0f} tokens: capping a prefill at "
            f"{budget // 4} tokens per step keeps decodes moving behind long prompts"
        )
    limit_ms = case.slo.ttft_ms if case.slo is not None and case.slo.ttft_ms is not None else 1000.0
    if s.queue_ms.p99 > limit_ms and s.request_throughput > 0:
        rate = (
            float(len(df) / max(df["arrival_time_s"].max() - df["arrival_time_s"].min(), 1e-9))
            if len(df) > 1
            else 0.0
        )
        per_replica = s.request_throughput / max(1, cur.replicas)
        need = (
            max(cur.replicas + 1, math.ceil(rate / per_replica * 1.1))
            if per_replica > 0
            else cur.replicas + 1
        )
        flags["replicas"] = min(256, need)
        why.append(
            f"R4: p99 queue time {s.queue_ms.p99:.0f} ms > {limit_ms:.0f} ms: the replicas serve "
            f"{s.request_throughput:.2f} req/s of {rate:.2f} offered; "
            f"{cur.replicas} -> {flags['replicas']} replicas"
        )
    if not why:
        why.append(
            f"R5: no symptom to fix (p99 TTFT {s.ttft_ms.p99:.0f} ms, p99 queue {s.queue_ms.p99:.0f} ms, "
            f"{s.num_preemptions} preemptions): keep the current flags"
        )
    return BatchingAdvice.model_validate(
        {**flags, "rationale": why, "expected_effect": "see the re-simulated numbers"},
        context=case.validation_context(),
    )


def rules_reschedule(case: RescheduleCase) -> RescheduleAdvice:
    plan = reschedule(case.problem, policy=Policy.sla_aware, step_time=case.step_time)
    reasons = []
    for p in plan.requests:
        if p.aged:
            why = "aged: waited long enough to go first"
        elif p.violates:
            why = f"cannot meet its SLA anyway (projected {-p.slack_ms:.0f} ms late): after those that can"
        else:
            why = f"meets its SLA with {p.slack_ms:.0f} ms to spare (least slack first)"
        reasons.append(OrderReason(req_id=p.req_id, reason=why))
    return RescheduleAdvice.model_validate(
        {"order": plan.rescheduled_queue, "reasons": [r.model_dump() for r in reasons]},
        context=case.validation_context(),
    )


def rules_fallback(case: FallbackCase) -> FallbackAdvice:
    decisions = [
        JobStrategy(job_id=d.job_id, strategy=d.strategy.value, reason=d.reason[:400])
        for d in case.plan.scheduled_migrations
    ]
    return FallbackAdvice.model_validate(
        {"decisions": [d.model_dump() for d in decisions]}, context=case.validation_context()
    )
