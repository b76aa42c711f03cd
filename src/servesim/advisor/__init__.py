"""The advisor: Claude (or deterministic rules) proposes, servesim's simulator verifies.

    from servesim.advisor import advise, BatchingCase, RescheduleCase, FallbackCase
    result = advise(RescheduleCase(problem), advisor="auto")   # Claude if ANTHROPIC_API_KEY is set
    result.advisor, result.advice, result.verification.accepted, result.action_log

Every answer is re-checked (re-simulated / re-projected / re-costed) next to the current setting
and the optimizer's best; ``write_outbox`` is the only "apply" there is. See docs/advisor.md.
"""

from servesim.advisor.cases import BatchingCase, FallbackCase, RescheduleCase
from servesim.advisor.claude import DEFAULT_MODEL, ClaudeAdvisor
from servesim.advisor.models import (
    ActionLogEntry,
    AdviceResult,
    BatchingAdvice,
    FallbackAdvice,
    JobStrategy,
    OrderReason,
    RejectedProposal,
    RescheduleAdvice,
    Verification,
)
from servesim.advisor.outbox import write_outbox
from servesim.advisor.service import advise, infer_task, rules_answer

__all__ = [
    "DEFAULT_MODEL",
    "ActionLogEntry",
    "AdviceResult",
    "BatchingAdvice",
    "BatchingCase",
    "ClaudeAdvisor",
    "FallbackAdvice",
    "FallbackCase",
    "JobStrategy",
    "OrderReason",
    "RejectedProposal",
    "RescheduleAdvice",
    "RescheduleCase",
    "Verification",
    "advise",
    "infer_task",
    "rules_answer",
    "write_outbox",
]
