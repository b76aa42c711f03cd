"""``advise()``: ask an advisor, re-check its answer by simulation, and say who answered.

With Claude the loop is: propose -> re-simulate -> if the objective got worse, send the numbers
back and ask again, at most ``rounds`` times. If Claude cannot give a usable answer (API errors
after retries, a timeout, output that keeps failing validation) or every proposal made things
worse, the deterministic rules advisor answers instead and the result carries a visible notice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from servesim.advisor.cases import BatchingCase, Case, FallbackCase, RescheduleCase, verify
from servesim.advisor.claude import ClaudeAdvisor
from servesim.advisor.metric import rules_for, score
from servesim.advisor.models import (
    ActionLogEntry,
    Advice,
    AdviceResult,
    AdvisorName,
    RejectedProposal,
    Verification,
)
from servesim.errors import InputError, shown

AdvisorChoice = AdvisorName | str  # "dspy", "claude", "rules" or "auto"
NO_ADVICE_SCORE = 0.5  # metric.score of the baseline when the rules advisor cannot beat it
CHOICES = ("auto", "dspy", "claude", "rules")


class Proposer(Protocol):
    """What answers in the loop: ``ClaudeAdvisor`` (pydantic-ai) or ``program.DSPyAdvisor``."""

    def propose(
        self, case: Case, feedback: str | None, round_no: int
    ) -> tuple[Advice | None, ActionLogEntry]: ...


def rules_answer(case: Case) -> Advice:
    return rules_for(case)


def _choose(
    advisor: AdvisorChoice, claude: ClaudeAdvisor | None, program: Proposer | None
) -> tuple[str, Proposer | None]:
    """The fallback order: an advisor passed in, else the DSPy program (compiled when one is saved,
    else uncompiled) when ``ANTHROPIC_API_KEY`` is set, else the rules."""
    if advisor not in CHOICES:
        raise InputError(f"unknown advisor {shown(advisor)}: use dspy, claude, rules or auto")
    if advisor == "rules":
        return "rules", None
    if advisor == "claude" or (advisor == "auto" and claude is not None):
        return "claude", claude or ClaudeAdvisor()
    if advisor == "dspy" or program is not None or ClaudeAdvisor.available():
        if program is None:
            from servesim.advisor.program import DSPyAdvisor

            program = DSPyAdvisor()
        return "dspy", program
    return "rules", None


def program_label(name: str, proposer: Proposer | None) -> str:
    if name == "claude":
        return "claude (pydantic-ai)"
    return str(getattr(proposer, "label", name)) if proposer is not None else "rules"


def advise(
    case: Case,
    advisor: AdvisorChoice = "auto",
    *,
    claude: ClaudeAdvisor | None = None,
    program: Proposer | None = None,
    rounds: int = 3,
    on_log: Callable[[ActionLogEntry], None] | None = None,
) -> AdviceResult:
    """The checked answer to ``case``. ``advisor``: ``dspy``, ``claude`` (the pydantic-ai agent),
    ``rules``, or ``auto`` (see ``_choose``). Every result names the program that answered and the
    simulator's score of its answer (``metric.score``)."""
    name, proposer = _choose(advisor, claude, program)
    log: list[ActionLogEntry] = []

    def record(entry: ActionLogEntry) -> None:
        log.append(entry)
        if on_log is not None:
            on_log(entry)

    rejected: list[RejectedProposal] = []
    notice: str | None = None
    who = "Claude" if name == "claude" else "the DSPy program"
    if proposer is not None:
        feedback: str | None = None
        for k in range(1, max(1, rounds) + 1):
            answer, entry = proposer.propose(case, feedback, k)
            record(entry)
            if answer is None:
                notice = (
                    f"{who} gave no usable answer ({entry.outcome}: {entry.detail}); "
                    "the rules advisor answered instead"
                )
                break
            verification = verify(case, answer)
            got = score(case, answer)
            if verification.accepted and got < NO_ADVICE_SCORE:
                verification = Verification.judged(
                    "rejected",
                    f"the simulator's score {got} is below no advice's {NO_ADVICE_SCORE} "
                    f"(metric.py: SLA misses, near-done completion, recompute tokens); {verification.reason}",
                    verification.candidates,
                )
            if verification.accepted:
                return AdviceResult(
                    task=case.task,
                    advisor="claude" if name == "claude" else "dspy",
                    program=program_label(name, proposer),
                    score=got,
                    advice=answer,
                    verification=verification,
                    rounds=k,
                    action_log=log,
                    rejected=rejected,
                )
            rejected.append(RejectedProposal(advice=answer, verification=verification))
            feedback = f"rejected: {verification.reason}. Candidates: " + "; ".join(
                f"{c.label} {c.metrics}" for c in verification.candidates
            )
        else:
            notice = (
                f"all {len(rejected)} of {who}'s proposals missed the SLO or made the objective worse on "
                "re-simulation "
                "(see rejected); the rules advisor answered instead"
            )
    answer = rules_answer(case)
    verification = verify(case, answer)
    record(ActionLogEntry(task=case.task, advisor="rules", round=len(log) + 1, latency_ms=None, outcome="ok"))
    return AdviceResult(
        task=case.task,
        advisor="rules",
        program="rules",
        score=score(case, answer, answer),
        notice=notice,
        advice=answer,
        verification=verification,
        rounds=len(log),
        action_log=log,
        rejected=rejected,
    )


def infer_task(data: Any) -> str:
    """The task an input file asks for: a reschedule input, a recovery record, or a trace."""
    if isinstance(data, dict):
        if "interrupted_requests" in data:
            return "reschedule"
        if "active_jobs" in data:
            return "fallback"
    if isinstance(data, list) and data and isinstance(data[0], dict) and "active_jobs" in data[0]:
        return "fallback"
    return "batching"


__all__ = ["BatchingCase", "FallbackCase", "RescheduleCase", "advise", "infer_task", "rules_answer"]
