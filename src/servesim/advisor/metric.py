"""The simulator as the advisor's metric: a proposal's score from its re-simulated outcome.

``outcome(case, advice)`` re-runs servesim's own model of the decision and returns losses (lower
is better, all >= 0):

* reschedule (the order re-projected, first come first served in the proposed order):
  ``sla_misses``, ``near_done_ms`` (mean completion of the requests with the fewest tokens left,
  the quarter nearest done: they should not wait behind long ones), ``recompute_tokens``;
* fallback (the recovery planner's cost model): ``total_recovery_ms``, ``max_recovery_ms``,
  ``recompute_tokens``;
* batching (the trace re-simulated): ``sla_misses`` (requests that miss the SLO: goodput),
  ``rejected`` (queue timeouts, prompts too long), ``e2e_p99_ms``.

``score`` compares each loss with the baseline (arrival order / restart all / the current flags)
and with the rules advisor's answer: 1.0 when it is at least as good as the better of the two,
0.5 at the baseline, in between linearly, below 0.5 when worse than the baseline (0.5 * b / p);
the weighted mean over the losses. A proposal that fails the task's validation (unknown, missing
or duplicate ids, migrating a job without a checkpoint, flags vLLM would refuse) scores 0.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from servesim.advisor.cases import BatchingCase, Case, FallbackCase, RescheduleCase
from servesim.advisor.models import OUTPUT_TYPES, Advice, BatchingAdvice, FallbackAdvice, RescheduleAdvice
from servesim.advisor.rules import rules_batching, rules_fallback, rules_reschedule
from servesim.errors import InternalError, ServesimError
from servesim.resched import Policy, reschedule

#: weight per loss, per task (sum 1)
WEIGHTS: dict[str, dict[str, float]] = {
    "reschedule": {"sla_misses": 0.5, "near_done_ms": 0.3, "recompute_tokens": 0.2},
    "fallback": {"total_recovery_ms": 0.6, "max_recovery_ms": 0.2, "recompute_tokens": 0.2},
    "batching": {"sla_misses": 0.6, "rejected": 0.2, "e2e_p99_ms": 0.2},
}


def validated(case: Case, answer: Any) -> Advice | None:
    """``answer`` re-validated with the case's constraints (valid ids, max_model_len); None if it
    breaks one: such a proposal scores 0 and is never shown."""
    try:
        data = answer.model_dump() if hasattr(answer, "model_dump") else answer
        out = OUTPUT_TYPES[case.task].model_validate(data, context=case.validation_context())
    except (ValidationError, ServesimError, TypeError, ValueError):
        return None
    if isinstance(case, BatchingCase) and isinstance(out, BatchingAdvice):
        try:  # the engine's own start-up checks (KV pool vs max_model_len, ...)
            case.evaluate(out)
        except ServesimError:
            return None
    if not isinstance(out, BatchingAdvice | RescheduleAdvice | FallbackAdvice):
        raise InternalError(f"invariant broken: a validated proposal is a {type(out).__name__}")
    return out


def _reschedule_outcome(case: RescheduleCase, order: list[str]) -> dict[str, float]:
    by_id = {r.req_id: r for r in case.problem.interrupted_requests}
    problem = case.problem.model_copy(update={"interrupted_requests": [by_id[i] for i in order]})
    plan = reschedule(problem, policy=Policy.fcfs, step_time=case.step_time)
    ranked = sorted(plan.requests, key=lambda p: (p.tokens_remaining, p.req_id))
    near = ranked[: max(1, len(ranked) // 4)]
    return {
        "sla_misses": float(plan.num_violations),
        "near_done_ms": sum(p.completion_ms for p in near) / len(near),
        "recompute_tokens": float(sum(p.recomputed_tokens for p in plan.requests)),
    }


def outcome(case: Case, advice: Advice) -> dict[str, float]:
    """The re-simulated losses of a valid ``advice`` (see the module doc)."""
    if isinstance(case, RescheduleCase) and isinstance(advice, RescheduleAdvice):
        return _reschedule_outcome(case, advice.order)
    if isinstance(case, FallbackCase) and isinstance(advice, FallbackAdvice):
        c = case.cost({d.job_id: d.strategy for d in advice.decisions})
        return {k: float(c[k] or 0.0) for k in WEIGHTS["fallback"]}
    if not (isinstance(case, BatchingCase) and isinstance(advice, BatchingAdvice)):
        raise InternalError(f"invariant broken: {type(advice).__name__} for a {type(case).__name__}")
    s = case.evaluate(advice)
    return {
        "sla_misses": float(s.num_requests - s.num_good),
        "rejected": float(s.num_rejected_queue_timeout + s.num_rejected_prompt_too_long),
        "e2e_p99_ms": float(s.e2e_ms.p99),
    }


def baseline(case: Case) -> Advice:
    """What happens without advice: arrival order, restart every job, the current flags."""
    if isinstance(case, RescheduleCase):
        return RescheduleAdvice(order=[r.req_id for r in case.problem.interrupted_requests])
    if isinstance(case, FallbackCase):
        return FallbackAdvice.model_validate(
            {
                "decisions": [
                    {"job_id": d.job_id, "strategy": "COLD_RESTART", "reason": "baseline"}
                    for d in case.plan.scheduled_migrations
                ]
            }
        )
    return case.current_advice()


def rules_for(case: Case) -> Advice:
    if isinstance(case, BatchingCase):
        return rules_batching(case)
    if isinstance(case, RescheduleCase):
        return rules_reschedule(case)
    return rules_fallback(case)


def _part(p: float, b: float, r: float) -> float:
    best = min(b, r)
    if p <= best:
        return 1.0
    if p <= b:
        return 0.5 + 0.5 * (b - p) / (b - best)
    return 0.5 * (b + 1.0) / (p + 1.0)


def score(case: Case, answer: Any, rules: Advice | None = None) -> float:
    """0..1: the proposal's re-simulated outcome vs the baseline and the rules advisor (see above)."""
    advice = validated(case, answer)
    if advice is None:
        return 0.0
    if rules is None:
        rules = rules_for(case)
    p, b, r = outcome(case, advice), outcome(case, baseline(case)), outcome(case, rules)
    total = sum(w * _part(p[k], b[k], r[k]) for k, w in WEIGHTS[case.task].items())
    return round(total, 4)
