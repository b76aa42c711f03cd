"""Recovery planner for jobs interrupted by a node failure (issue 6, parts 3-5).

    from servesim.cluster.recovery import plan_recovery
    plan = plan_recovery({"interrupted_node": "node-3", "preemption_timestamp": "...",
                          "network_bandwidth_gbps": 10, "active_jobs": [...]})
    plan.total_recompute_tokens, plan.scheduled_migrations, plan.decision_matrix()

For the cluster simulation: ``decide_job(job, context, targets) -> JobDecision`` and
``place(target, job, decision) -> TargetState``. See docs/recovery.md.
"""

from servesim.cluster.recovery.costs import (
    RecoveryContext,
    Release,
    StrategyCost,
    TargetState,
    Timeline,
    break_even_gbps,
    cold_restart_cost,
    migrate_cost,
    prefill_timeline,
)
from servesim.cluster.recovery.failures import FailureLogSpec, failure_log_json, generate_failures
from servesim.cluster.recovery.manifests import (
    MANIFEST_HEADER,
    decision_matrix,
    export_decision_matrix,
    manifest_name,
    manifest_paths,
    manifests_for,
    write_manifests,
)
from servesim.cluster.recovery.models import (
    CapacityStatus,
    ClusterSpec,
    ContextSpec,
    ContextSummary,
    InvalidJob,
    JobDecision,
    JobSpec,
    RecoveryInput,
    RecoveryInputError,
    RecoveryPlan,
    ReleaseSpec,
    Strategy,
    TargetSpec,
    TargetSummary,
    WaitingJob,
    parse_events,
    parse_input,
    parse_jobs,
)
from servesim.cluster.recovery.planner import (
    build_context,
    build_step_time,
    decide_job,
    default_targets,
    place,
    plan_events,
    plan_recovery,
    target_from_spec,
    usable_blocks,
)

__all__ = [
    "MANIFEST_HEADER",
    "CapacityStatus",
    "ClusterSpec",
    "ContextSpec",
    "ContextSummary",
    "FailureLogSpec",
    "InvalidJob",
    "JobDecision",
    "JobSpec",
    "RecoveryContext",
    "RecoveryInput",
    "RecoveryInputError",
    "RecoveryPlan",
    "Release",
    "ReleaseSpec",
    "Strategy",
    "StrategyCost",
    "TargetSpec",
    "TargetState",
    "TargetSummary",
    "Timeline",
    "WaitingJob",
    "break_even_gbps",
    "build_context",
    "build_step_time",
    "cold_restart_cost",
    "decide_job",
    "decision_matrix",
    "default_targets",
    "export_decision_matrix",
    "failure_log_json",
    "generate_failures",
    "manifest_name",
    "manifest_paths",
    "manifests_for",
    "migrate_cost",
    "parse_events",
    "parse_input",
    "parse_jobs",
    "place",
    "plan_events",
    "plan_recovery",
    "prefill_timeline",
    "target_from_spec",
    "usable_blocks",
    "write_manifests",
]
