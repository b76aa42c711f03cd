"""Stand-alone rescheduling analysis of interrupted (preempted) requests (issue 7, parts 1-3).

    from servesim.resched import reschedule
    plan = reschedule({"batch_capacity": 4, "interrupted_requests": [...]})
    plan.rescheduled_queue, plan.prefix_cache_savings_tokens, plan.sla_violation_projected

See docs/resched.md for the reuse rule, the projection model, the policies and aging.
"""

from servesim.resched.models import (
    InterruptedRequest,
    Policy,
    ProjectedRequest,
    RescheduleInput,
    RescheduleInputError,
    ReschedulePlan,
    parse_input,
)
from servesim.resched.plan import reschedule
from servesim.resched.policies import OrderKeys, is_aged, order
from servesim.resched.projection import Job, Projection, project, solo_service_s
from servesim.resched.reuse import ReuseSplit, reusable_tokens, reuse_split

__all__ = [
    "InterruptedRequest",
    "Job",
    "OrderKeys",
    "Policy",
    "ProjectedRequest",
    "Projection",
    "RescheduleInput",
    "RescheduleInputError",
    "ReschedulePlan",
    "ReuseSplit",
    "is_aged",
    "order",
    "parse_input",
    "project",
    "reschedule",
    "reusable_tokens",
    "reuse_split",
    "solo_service_s",
]
