"""The three questions an advisor answers: what it is shown, and how its answer is checked.

For each task a *case* holds the question; ``summary()`` is the compact, normalised view an LLM
gets (numbers and ids, never whole traces; bounded in size); ``verify()`` re-checks a proposal
with servesim's own models next to the current setting and the optimizer's best, and words the
outcome (``VerdictWord``): rejected when it misses the SLO or makes the objective worse, "no
change" when it is the current setting, accepted only for a change that meets the SLO and improves:

* batching: the trace is re-simulated with the proposed flags (goodput under the SLO, or p99
  E2E without one);
* reschedule: the proposed order is re-projected with the step-time model (projected SLA
  violations);
* fallback: each job's recovery time under the proposed strategy, from the recovery planner's
  cost model (total time until every job is back).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servesim.advisor.models import (
    Advice,
    BatchingAdvice,
    Comparison,
    FallbackAdvice,
    RescheduleAdvice,
    Task,
    VerdictWord,
    Verification,
)
from servesim.cluster import Replica, simulate_cluster
from servesim.cluster.recovery import RecoveryPlan
from servesim.engine import SLO, EngineConfig, SimulationSummary, StepTimeModel, simulate
from servesim.errors import InputError, InternalError
from servesim.resched import Policy, RescheduleInput, reschedule
from servesim.traces import Trace, inspect_trace

MAX_SUMMARY_CHARS = 12_000  # what an LLM is shown, at most
MAX_ITEMS = 200  # requests / jobs an LLM is asked to order or decide one by one
TOLERANCE = 0.005  # relative: re-simulation noise below this is not "worse"


def _r(x: float | None, nd: int = 2) -> float | None:
    return None if x is None else round(float(x), nd)


def _compare(new: float, cur: float, *, higher_is_better: bool) -> tuple[bool, bool]:
    """(better, worse) beyond re-simulation noise (``TOLERANCE``, relative)."""
    up, down = new > cur * (1 + TOLERANCE), new < cur * (1 - TOLERANCE)
    if cur == 0:
        up, down = new > 0, new < 0
    return (up, down) if higher_is_better else (down, up)


def _moves(better: bool, worse: bool, up: str, down: str) -> str:
    return up if better else (down if worse else "holds")


def _word(same: bool, better: bool, worse: bool) -> VerdictWord:
    """The verdict of a proposal that breaks no hard limit, from how it compares with now."""
    if same:
        return "no_change"
    if worse:
        return "rejected"
    return "accepted" if better else "no_gain"


def _flags(a: BatchingAdvice) -> dict[str, Any]:
    return a.model_dump(exclude={"rationale", "expected_effect"})


def slo_misses(s: SimulationSummary, slo: SLO | None) -> list[str]:
    """Each p99 cap of ``slo`` that ``s`` breaks, as 'TTFT p99 412 ms > 400 ms'."""
    if slo is None:
        return []
    out = []
    for name, cap, got in (
        ("TTFT", slo.ttft_ms, s.ttft_ms.p99),
        ("TPOT", slo.tpot_ms, s.tpot_ms.p99),
        ("E2E", slo.e2e_ms, s.e2e_ms.p99),
    ):
        if cap is not None and got > cap:
            out.append(f"{name} p99 {got:,.1f} ms > {cap:,.5g} ms")
    return out


def _bounded(data: dict[str, Any]) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    if len(text) > MAX_SUMMARY_CHARS:
        raise InputError(
            f"the summary is {len(text)} characters, over the {MAX_SUMMARY_CHARS} an advisor is shown"
        )
    return text


# --------------------------------------------------------------------------------------- batching
@dataclass
class BatchingCase:
    """Which scheduler flags and how many replicas to run for this traffic."""

    trace: Trace
    current: EngineConfig
    step_time: StepTimeModel
    slo: SLO | None = None
    replicas: int = 1
    optimizer_best: BatchingAdvice | None = None
    hardware: str = "unspecified"
    _cache: dict[str, SimulationSummary] = field(default_factory=dict, repr=False)

    task: Task = "batching"

    @property
    def max_model_len(self) -> int:
        if self.current.max_model_len is not None:
            return self.current.max_model_len
        return self.trace.default_max_model_len()

    def validation_context(self) -> dict[str, Any]:
        return {"max_model_len": self.max_model_len}

    def current_advice(self) -> BatchingAdvice:
        c = self.current
        return BatchingAdvice(
            max_num_seqs=c.max_num_seqs,
            max_num_batched_tokens=c.max_num_batched_tokens,
            enable_chunked_prefill=c.enable_chunked_prefill,
            long_prefill_token_threshold=c.long_prefill_token_threshold,
            queue_timeout_s=c.queue_timeout_s,
            replicas=self.replicas,
            rationale=["the current setting"],
            expected_effect="none",
        )

    def config_of(self, a: BatchingAdvice) -> EngineConfig:
        return self.current.model_copy(
            update={
                "max_num_seqs": a.max_num_seqs,
                "max_num_batched_tokens": a.max_num_batched_tokens,
                "enable_chunked_prefill": a.enable_chunked_prefill,
                "long_prefill_token_threshold": a.long_prefill_token_threshold,
                "queue_timeout_s": a.queue_timeout_s,
            }
        )

    def evaluate(self, a: BatchingAdvice) -> SimulationSummary:
        """Re-simulate the trace with ``a`` (cached per setting)."""
        key = a.model_dump_json(exclude={"rationale", "expected_effect"})
        if key not in self._cache:
            cfg = EngineConfig.model_validate(self.config_of(a).model_dump())  # re-run vLLM's checks
            if a.replicas == 1:
                summary = simulate(self.trace, cfg, self.step_time, slo=self.slo).summary
            else:
                reps = [Replica(f"r{i}", cfg, self.step_time) for i in range(a.replicas)]
                summary = simulate_cluster(self.trace, reps, slo=self.slo).summary.cluster
            self._cache[key] = summary
        return self._cache[key]

    @staticmethod
    def metrics(s: SimulationSummary, replicas: int) -> dict[str, float | int | None]:
        return {
            "ttft_p99_ms": _r(s.ttft_ms.p99),
            "tpot_p99_ms": _r(s.tpot_ms.p99),
            "e2e_p99_ms": _r(s.e2e_ms.p99),
            "queue_p99_ms": _r(s.queue_ms.p99),
            "goodput_rps": _r(s.goodput, 4),
            "throughput_rps": _r(s.request_throughput, 4),
            "preemptions": s.num_preemptions,
            "rejected": s.num_rejected_queue_timeout + s.num_rejected_prompt_too_long,
            "replicas": replicas,
        }

    def summary(self) -> str:
        st = inspect_trace(self.trace)
        cur = self.evaluate(self.current_advice())
        data: dict[str, Any] = {
            "task": "batching",
            "hardware": self.hardware,
            "traffic": {
                "requests": st.num_requests,
                "mean_rate_rps": _r(st.mean_rate_rps, 3),
                "interarrival_cv": _r(st.iat_cv),
                "prompt_tokens": {"mean": _r(st.prompt.mean, 1), "p50": st.prompt.p50, "p99": st.prompt.p99},
                "output_tokens": {"mean": _r(st.output.mean, 1), "p50": st.output.p50, "p99": st.output.p99},
            },
            "slo_ms": None if self.slo is None else self.slo.model_dump(exclude_none=True),
            "max_model_len": self.max_model_len,
            "current": {
                "flags": self.current_advice().model_dump(exclude={"rationale", "expected_effect"}),
                "metrics": self.metrics(cur, self.replicas),
                "mean_running": _r(cur.mean_running, 1),
                "mean_waiting": _r(cur.mean_waiting, 1),
                "mean_kv_usage": _r(cur.mean_kv_usage, 3),
            },
        }
        if self.optimizer_best is not None:
            best = self.evaluate(self.optimizer_best)
            data["optimizer_best"] = {
                "flags": self.optimizer_best.model_dump(exclude={"rationale", "expected_effect"}),
                "metrics": self.metrics(best, self.optimizer_best.replicas),
            }
        return _bounded(data)

    def verify(self, proposal: BatchingAdvice) -> Verification:
        cur = self.evaluate(self.current_advice())
        new = self.evaluate(proposal)
        candidates = [
            Comparison(label="current", metrics=self.metrics(cur, self.replicas)),
            Comparison(label="proposed", metrics=self.metrics(new, proposal.replicas)),
        ]
        if self.optimizer_best is not None:
            best = self.evaluate(self.optimizer_best)
            candidates.append(
                Comparison(label="optimizer_best", metrics=self.metrics(best, self.optimizer_best.replicas))
            )
        same = _flags(proposal) == _flags(self.current_advice())
        misses = slo_misses(new, self.slo)
        if self.slo is not None:
            better, worse = _compare(new.goodput, cur.goodput, higher_is_better=True)
            measured = (
                f"goodput under the SLO {_moves(better, worse, 'rises', 'drops')}: {new.goodput:.3f} req/s "
                f"proposed vs {cur.goodput:.3f} now ({new.num_good} vs {cur.num_good} requests meet it)"
            )
        else:
            better, worse = _compare(new.e2e_ms.p99, cur.e2e_ms.p99, higher_is_better=False)
            measured = (
                f"p99 E2E {_moves(better, worse, 'better', 'worse')}: {new.e2e_ms.p99:.0f} ms proposed vs "
                f"{cur.e2e_ms.p99:.0f} ms now"
            )
        if misses:
            verdict: VerdictWord = "rejected_slo"
            head = "the current setting misses the SLO" if same else "the proposal misses the SLO"
            reason = f"{head}: {'; '.join(misses)}; {measured}"
        else:
            verdict = _word(same, better, worse)
            reason = {
                "no_change": f"the proposal is the current setting: nothing to change; {measured}",
                "no_gain": f"a change no better than now (within {TOLERANCE:.1%}): {measured}",
                "accepted": f"meets the SLO and improves: {measured}" if self.slo else measured,
            }.get(verdict, measured)
        return Verification.judged(verdict, reason, candidates)


# ------------------------------------------------------------------------------------- reschedule
@dataclass
class RescheduleCase:
    """In which order to re-admit interrupted requests."""

    problem: RescheduleInput
    step_time: StepTimeModel | None = None

    task: Task = "reschedule"

    def validation_context(self) -> dict[str, Any]:
        return {"valid_ids": [r.req_id for r in self.problem.interrupted_requests]}

    def project(self, order: list[str]) -> dict[str, float | int | None]:
        by_id = {r.req_id: r for r in self.problem.interrupted_requests}
        reordered = self.problem.model_copy(update={"interrupted_requests": [by_id[i] for i in order]})
        plan = reschedule(reordered, policy=Policy.fcfs, step_time=self.step_time)
        lateness = max((-p.slack_ms for p in plan.requests if p.violates), default=0.0)
        return {
            "violations": plan.num_violations,
            "makespan_ms": _r(plan.makespan_ms),
            "max_lateness_ms": _r(lateness),
        }

    def best_order(self) -> list[str]:
        return reschedule(self.problem, policy=Policy.sla_aware, step_time=self.step_time).rescheduled_queue

    def summary(self) -> str:
        if len(self.problem.interrupted_requests) > MAX_ITEMS:
            raise InputError(f"more than {MAX_ITEMS} requests to order one by one")
        plan = reschedule(self.problem, policy=Policy.sla_aware, step_time=self.step_time)
        by_id = {p.req_id: p for p in plan.requests}
        reqs = [
            {
                "req_id": r.req_id,
                "tokens_processed": r.tokens_processed,
                "tokens_remaining": r.tokens_remaining,
                "sla_budget_ms": r.sla_budget_ms,
                "priority": r.priority,
                "preemptions": r.preemptions,
                "reused_tokens": by_id[r.req_id].reused_tokens,
                "solo_slack_ms": _r(by_id[r.req_id].solo_slack_ms),
            }
            for r in self.problem.interrupted_requests
        ]
        return _bounded(
            {
                "task": "reschedule",
                "batch_capacity": self.problem.batch_capacity,
                "requests": reqs,
                "input_order": self.project([r.req_id for r in self.problem.interrupted_requests]),
            }
        )

    def verify(self, proposal: RescheduleAdvice) -> Verification:
        current = self.project([r.req_id for r in self.problem.interrupted_requests])
        proposed = self.project(proposal.order)
        best = self.project(self.best_order())
        same = proposal.order == [r.req_id for r in self.problem.interrupted_requests]
        better, worse = _compare(
            float(proposed["violations"] or 0), float(current["violations"] or 0), higher_is_better=False
        )
        return Verification.judged(
            _word(same, better, worse),
            (
                f"{proposed['violations']} projected SLA violations with the proposed order vs "
                f"{current['violations']} in arrival order ({best['violations']} with the SLA-aware policy)"
            ),
            candidates=[
                Comparison(label="current", metrics=current),
                Comparison(label="proposed", metrics=proposed),
                Comparison(label="optimizer_best", metrics=best),
            ],
        )


# --------------------------------------------------------------------------------------- fallback
@dataclass
class FallbackCase:
    """Migrate or restart each job of a lost node (costs from the recovery planner)."""

    plan: RecoveryPlan  # the planner's answer: per-job costs of both strategies

    task: Task = "fallback"

    def validation_context(self) -> dict[str, Any]:
        return {
            "valid_ids": [d.job_id for d in self.plan.scheduled_migrations],
            "checkpointed_ids": [
                d.job_id for d in self.plan.scheduled_migrations if d.migrate_ms is not None
            ],
        }

    def cost(self, strategies: Mapping[str, str]) -> dict[str, float | int | None]:
        total = worst = 0.0
        recompute = moved = 0
        for d in self.plan.scheduled_migrations:
            migrate = strategies[d.job_id] == "MIGRATE_STATE"
            ms = d.migrate_ms if migrate and d.migrate_ms is not None else d.cold_restart_ms
            ms += d.capacity_wait_ms or 0.0
            total += ms
            worst = max(worst, ms)
            if migrate:
                moved += d.bytes_to_move
                recompute += max(0, d.num_tokens - d.checkpoint_covered_tokens)
            else:
                recompute += d.num_tokens - d.prefix_hit_tokens
        return {
            "total_recovery_ms": _r(total),
            "max_recovery_ms": _r(worst),
            "recompute_tokens": recompute,
            "bytes_moved": moved,
        }

    def summary(self) -> str:
        if len(self.plan.scheduled_migrations) > MAX_ITEMS:
            raise InputError(f"more than {MAX_ITEMS} jobs to decide one by one")
        jobs = [
            {
                "job_id": d.job_id,
                "tokens": d.num_tokens,
                "checkpoint_covered_tokens": d.checkpoint_covered_tokens,
                "cold_restart_ms": _r(d.cold_restart_ms),
                "migrate_ms": _r(d.migrate_ms),
                "bytes_to_move": d.bytes_to_move,
                "capacity_wait_ms": _r(d.capacity_wait_ms),
                "break_even_gbps": _r(d.break_even_gbps),
            }
            for d in self.plan.scheduled_migrations
        ]
        ctx = self.plan.context
        return _bounded(
            {
                "task": "fallback",
                "interrupted_node": self.plan.interrupted_node,
                "context": ctx.model_dump(mode="json"),
                "capacity_status": str(self.plan.capacity_status),
                "jobs": jobs,
            }
        )

    def verify(self, proposal: FallbackAdvice) -> Verification:
        chosen = {d.job_id: d.strategy for d in proposal.decisions}
        restart = {d.job_id: "COLD_RESTART" for d in self.plan.scheduled_migrations}
        planner = {d.job_id: str(d.strategy.value) for d in self.plan.scheduled_migrations}
        cur, new, best = self.cost(restart), self.cost(chosen), self.cost(planner)
        same = chosen == restart
        better, worse = _compare(
            float(new["total_recovery_ms"] or 0), float(cur["total_recovery_ms"] or 0), higher_is_better=False
        )
        return Verification.judged(
            _word(same, better, worse),
            (
                f"jobs back after {new['total_recovery_ms']} ms in total with the proposal vs "
                f"{cur['total_recovery_ms']} ms restarting all "
                f"({best['total_recovery_ms']} ms with the planner)"
            ),
            candidates=[
                Comparison(label="current", metrics=cur),
                Comparison(label="proposed", metrics=new),
                Comparison(label="optimizer_best", metrics=best),
            ],
        )


Case = BatchingCase | RescheduleCase | FallbackCase


def verify(case: Case, answer: Advice) -> Verification:
    """Re-check ``answer`` for ``case`` (the answer type must be the case's task)."""
    if isinstance(case, BatchingCase) and isinstance(answer, BatchingAdvice):
        return case.verify(answer)
    if isinstance(case, RescheduleCase) and isinstance(answer, RescheduleAdvice):
        return case.verify(answer)
    if isinstance(case, FallbackCase) and isinstance(answer, FallbackAdvice):
        return case.verify(answer)
    raise InternalError(f"a {type(answer).__name__} does not answer a {case.task} case")
