"""A recovery plan: ``RecoverRequest`` -> ``RecoverAnswer``.

``servesim recover``, the web's ``POST /api/recover`` and the demo's recovery step all build a
``RecoverRequest`` (the failure record or log as JSON data, plus what the user overrides) and call
``recover`` (or ``prepare`` then ``run``, to say what times the steps and how many jobs there are
before planning starts): the same parsing, the same catalog and the same planner, so the same
plan. Its document is ``servesim.report.documents.recover_document(answer)`` for all of them.

Writing the hand-off manifests and the decision matrix is something an interface chooses to do
(``RecoverAnswer.write_manifests``, ``export_matrix``): nothing here writes a file unasked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.cluster.recovery import (
    ClusterSpec,
    FailureLogSpec,
    JobDecision,
    JobSpec,
    RecoveryInput,
    RecoveryPlan,
)
from servesim.cluster.recovery.manifests import MANIFEST_HEADER
from servesim.errors import InputError
from servesim.services.inputs import Progress

if TYPE_CHECKING:
    from servesim.cluster.recovery import TargetSpec
    from servesim.perf.catalog import Catalog

#: What every plan says it is timed by (the planner times the survivors' steps by the roofline).
TIMED_AS = "{model} on {tp} x {gpu}, roofline step times"


class RecoverRequest(BaseModel):
    """One failure record or a failure log, with the context the user overrides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    events: Any = Field(description="A failure record (object) or a list of them, as read from JSON.")
    context: dict[str, Any] = Field(
        default_factory=dict,
        description="ContextSpec fields that win over every record's context (None: not given).",
    )
    bandwidth_gbps: float | None = Field(None, description="Overrides every record's network_bandwidth_gbps.")
    cluster: list[Any] | None = Field(
        None, description="The survivors (TargetSpec objects) for every record, instead of the records'."
    )
    catalog: Path | None = Field(None, description="An extra model/GPU catalog YAML file.")

    @property
    def single(self) -> bool:
        """One record (its plan alone is the answer) rather than a log (a list of plans)."""
        return not isinstance(self.events, list)


@dataclass(frozen=True)
class PreparedRecovery:
    """A request with its records parsed and its catalog loaded: what will be planned."""

    request: RecoverRequest
    inputs: list[RecoveryInput]
    catalog: Catalog

    @property
    def num_jobs(self) -> int:
        """Jobs to plan, over every record (the progress's total)."""
        return sum(len(i.active_jobs) for i in self.inputs)

    @property
    def timed_as(self) -> str:
        """``llama-3.1-8b on 1 x h100, roofline step times``: what times the survivors' steps."""
        c = self.inputs[0].context
        return TIMED_AS.format(model=c.model, tp=c.tp, gpu=c.gpu)

    def run(self, *, progress: Progress | None = None) -> RecoverAnswer:
        """Plan every record in order (``progress``: phase ``planning``, one call per job, its
        decision in ``detail``)."""
        from servesim.cluster.recovery import plan_recovery

        total = self.num_jobs
        done = 0

        def step(d: JobDecision) -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress("planning", done, total, decision_detail(d))

        plans = [plan_recovery(inp, catalog=self.catalog, on_decision=step) for inp in self.inputs]
        return RecoverAnswer(prepared=self, plans=plans)


@dataclass(frozen=True)
class RecoverAnswer:
    """The plans (one per record), with what produced them."""

    prepared: PreparedRecovery
    plans: list[RecoveryPlan]

    @property
    def request(self) -> RecoverRequest:
        return self.prepared.request

    @property
    def single(self) -> bool:
        return self.request.single

    @property
    def timed_as(self) -> str:
        return self.prepared.timed_as

    @property
    def num_invalid_jobs(self) -> int:
        return sum(len(p.invalid_jobs) for p in self.plans)

    @property
    def total_recompute_tokens(self) -> int:
        return sum(p.total_recompute_tokens for p in self.plans)

    def check_outbox(self, outbox: Path) -> None:
        """Refuse, before anything is written, two records whose manifests would share a file."""
        from servesim.cluster.recovery import manifest_paths

        manifest_paths(self.plans, outbox)

    def write_manifests(self, outbox: Path) -> list[list[Path]]:
        """One hand-off manifest per target node of every plan into ``outbox`` (marked for human
        review; nothing is sent): the paths, per plan."""
        from servesim.cluster.recovery import write_manifests

        self.check_outbox(outbox)
        return [write_manifests(p, outbox) for p in self.plans]

    def export_matrix(self, path: Path) -> Path:
        """The decision matrix as ``.csv`` or ``.json`` (one record: its plan's; a log: every plan's
        with the event's node, batch and time first)."""
        from servesim.cluster.recovery import export_decision_matrix

        return export_decision_matrix(self.plans[0] if self.single else self.plans, path)


def decision_detail(d: JobDecision) -> dict[str, Any]:
    """A decision as the progress's ``detail``: what an interface shows while planning."""
    return {
        "job_id": d.job_id,
        "strategy": d.strategy.value,
        "target": d.target,
        "est_recovery_ms": d.est_recovery_ms,
        "waits_for_capacity": d.waits_for_capacity,
    }


def check_matrix_name(path: Path) -> None:
    """A decision matrix file name that is neither ``.csv`` nor ``.json`` fails before any work."""
    from servesim.cluster.recovery.manifests import matrix_format

    matrix_format(path)


def read_json(path: Path) -> Any:
    """A JSON input file (a record, a log, survivors): one line naming the file when it is not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def read_cluster(path: Path) -> list[TargetSpec]:
    """The survivors of ``--cluster FILE``: ``{targets: [...]}`` or a bare list, each field checked."""
    from servesim.cluster.recovery import ClusterSpec

    data = read_json(path)
    if isinstance(data, list):
        data = {"targets": data}
    try:
        return ClusterSpec.model_validate(data).targets
    except ValidationError as exc:
        msg = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'cluster'}: {e['msg']}" for e in exc.errors())
        raise InputError(f"{path}: {msg}") from None


@dataclass(frozen=True)
class FailureLog:
    """A synthetic failure log: its records and their JSON text (``servesim recover``'s input)."""

    records: list[dict[str, Any]]
    text: str

    @property
    def num_jobs(self) -> int:
        return sum(len(r["active_jobs"]) for r in self.records)


def generate_failure_log(settings: Mapping[str, Any]) -> FailureLog:
    """A seeded failure log from ``FailureLogSpec`` settings (same seed, same bytes)."""
    from servesim.cluster.recovery import FailureLogSpec, failure_log_json, generate_failures

    records = generate_failures(FailureLogSpec.model_validate(dict(settings)))
    return FailureLog(records=records, text=failure_log_json(records))


def prepare(request: RecoverRequest) -> PreparedRecovery:
    """Parse the records (bad jobs are listed in each plan's ``invalid_jobs``, a bad record is one
    error naming it) with the request's overrides, and load the catalog."""
    from servesim.cluster.recovery import parse_events
    from servesim.perf import load_catalog

    catalog = load_catalog(request.catalog) if request.catalog is not None else load_catalog()
    overrides: dict[str, Any] = {
        "context": dict(request.context),
        "network_bandwidth_gbps": request.bandwidth_gbps,
    }
    if request.cluster is not None:
        overrides["cluster"] = list(request.cluster)
    return PreparedRecovery(
        request=request, inputs=parse_events(request.events, **overrides), catalog=catalog
    )


def recover(request: RecoverRequest, *, progress: Progress | None = None) -> RecoverAnswer:
    """``prepare`` and ``run``: "how do the interrupted jobs come back, each?"."""
    return prepare(request).run(progress=progress)


__all__ = [
    "MANIFEST_HEADER",
    "ClusterSpec",
    "FailureLog",
    "FailureLogSpec",
    "JobDecision",
    "JobSpec",
    "PreparedRecovery",
    "RecoverAnswer",
    "RecoverRequest",
    "RecoveryInput",
    "RecoveryPlan",
    "check_matrix_name",
    "decision_detail",
    "generate_failure_log",
    "prepare",
    "read_cluster",
    "read_json",
    "recover",
]
