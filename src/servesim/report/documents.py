"""The report's inputs: the ``--json`` documents of the commands, recognised by their shape.

Why: a user hands ``servesim report`` whatever they saved (``simulate --json > run.json``, a
saturation sweep, a study, a recovery plan, ...); the report tells which is which from the keys
each command always writes, and says clearly when a file is none of them. ``simulation_document``
is what ``servesim simulate --json`` prints: the ``SimulationReport`` plus optional ``sections``
(the workload and simulation views, with the per-step series and histograms a saved summary
cannot give back) and the caveats of the step-time model.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from servesim.errors import InputError, describe

if TYPE_CHECKING:
    from collections.abc import Sequence

    from servesim.cluster import FailureEvent, RouterSpec
    from servesim.cluster.compare import LinkSpec, StrategyOutcome
    from servesim.cluster.pd import DisaggSpec
    from servesim.cluster.pd_results import PDResult
    from servesim.engine import SimulationResult
    from servesim.services.advice import AdviseAnswer
    from servesim.services.cluster import ClusterAnswer, DisaggregatedAnswer
    from servesim.services.recovery import RecoverAnswer
    from servesim.services.rescheduling import RescheduleAnswer
    from servesim.services.run import SimulateAnswer
    from servesim.spec import ClusterSpec
    from servesim.traces import Trace, TraceStats
    from servesim.traces.schema import TraceProvenance
    from servesim.views.model import Section

Kind = Literal[
    "simulate",
    "trace",
    "saturate",
    "tune",
    "recommendation",
    "layouts",
    "cluster",
    "disaggregated",
    "recover",
    "reschedule",
    "advise",
]

#: Keys every document of a kind holds (the first matching kind wins), and the command behind it.
SHAPES: list[tuple[Kind, frozenset[str], str]] = [
    ("simulate", frozenset({"config", "step_time_model", "summary"}), "servesim simulate --json"),
    ("tune", frozenset({"study", "recommendation"}), "servesim tune --json"),
    ("recommendation", frozenset({"vllm_serve_command", "deployment", "rationale"}), "recommendation.json"),
    ("layouts", frozenset({"layouts"}), "servesim tune --layouts agg,disagg --gpus N --json"),
    ("saturate", frozenset({"points", "saturation_rps", "deployment"}), "servesim saturate --json"),
    ("cluster", frozenset({"strategies", "failures", "router"}), "servesim cluster --json"),
    (
        "disaggregated",
        frozenset({"spec", "summary", "requests", "recoveries"}),
        "servesim cluster --prefill-replicas N --decode-replicas M --json",
    ),
    ("recover", frozenset({"scheduled_migrations", "interrupted_node"}), "servesim recover --json"),
    ("reschedule", frozenset({"rescheduled_queue", "requests", "policy"}), "servesim reschedule --json"),
    ("advise", frozenset({"advice", "verification", "advisor"}), "servesim advise --json"),
    (
        "trace",
        frozenset({"num_requests", "mean_rate_rps", "prompt", "output"}),
        "servesim trace inspect --json",
    ),
]


#: The version of the documents' layout; a document says it beside its ``kind``.
SCHEMA_VERSION = 1
KINDS: frozenset[str] = frozenset(k for k, _, _ in SHAPES)


def stamped(kind: Kind, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its ``kind`` and ``schema_version``: how the report (and anyone else) tells
    what a saved result is without guessing from its keys."""
    return {**doc, "kind": kind, "schema_version": SCHEMA_VERSION}


def cluster_run_document(
    rows: Sequence[StrategyOutcome],
    events: Sequence[FailureEvent],
    link: LinkSpec,
    route: RouterSpec,
    provenance: TraceProvenance | None,
    run: ClusterSpec | None = None,
) -> dict[str, Any]:
    """The typed ``cluster`` document of a recovery comparison, the same from ``servesim cluster
    --json`` and the web's cluster run: the failures, link, router, one row per strategy, the
    trace's provenance and ``run``, the ``ClusterSpec`` that produced it."""
    from servesim.cluster.compare import cluster_document

    extra = {"run": run.model_dump(mode="json")} if run is not None else None
    doc = cluster_document(events, link, route, rows, extra)
    doc["trace_provenance"] = None if provenance is None else provenance.model_dump(mode="json")
    return stamped("cluster", doc)


def cluster_answer_document(answer: ClusterAnswer | DisaggregatedAnswer) -> dict[str, Any]:
    """The document of a ``servesim.services.cluster`` answer, the one ``servesim cluster
    --json``, the web's cluster run, ``dashboard --headless`` and the demo give for the same
    request. Replicas: a ``cluster`` document (every strategy's row, the spec as ``run``, the
    trace's provenance, the shown run's fleet and replica views as ``sections`` and, when the
    planner ran, its per-request decisions and how many requests starved). Pools: a
    ``disaggregated`` document (``disaggregated_run_document``)."""
    from servesim.services.cluster import DisaggregatedAnswer
    from servesim.views.fleet import fleet_sections

    if isinstance(answer, DisaggregatedAnswer):
        return disaggregated_run_document(
            answer.result, answer.pools, answer.spec, answer.trace.provenance, answer.title
        )

    r = answer.resolved
    doc = cluster_run_document(answer.rows, r.events, r.link, r.router, answer.trace.provenance, answer.spec)
    views = fleet_sections(answer.result, len(r.replicas), answer.shown)
    doc["sections"] = [v.model_dump(mode="json") for v in views]
    planner = answer.results.get("planner")
    if planner is not None and r.events:
        doc["decisions"] = planner.moves.to_dict(orient="records")
        doc["num_starved"] = int(planner.requests["starved"].sum())
    doc["num_requests"] = len(answer.trace)
    return doc


def disaggregated_title(source: str, num_requests: int) -> str:
    """The title of a disaggregated run, as the CLI and the web give it."""
    return f"{source}: {num_requests:,} requests, disaggregated"


def disaggregated_run_document(
    result: PDResult,
    pools: DisaggSpec,
    run: ClusterSpec,
    provenance: TraceProvenance | None,
    title: str,
) -> dict[str, Any]:
    """The typed ``disaggregated`` document of a prefill/decode run, the same from ``servesim
    cluster --prefill-replicas ... --json`` (or ``--out``) and the web's disaggregated run: the
    pools as given (``spec``), ``run`` (the ``ClusterSpec`` that produced it), the result (summary
    with the per-leg breakdown, every request's legs, failures, recoveries), the trace's
    provenance and ``sections``: the run's view (``servesim.views.disagg``) that ``servesim
    report`` and the web page draw."""
    from servesim.views.disagg import disagg_sections

    doc: dict[str, Any] = {
        "title": title,
        "spec": pools.model_dump(mode="json"),
        "run": run.model_dump(mode="json"),
        **result.model_dump(mode="json"),
        "trace_provenance": None if provenance is None else provenance.model_dump(mode="json"),
        "sections": [v.model_dump(mode="json") for v in disagg_sections(result, pools, title=title)],
    }
    return stamped("disaggregated", doc)


class ReportInputError(InputError):
    """A file the report cannot use (names the file and what was expected)."""


@dataclass(frozen=True)
class Document:
    """One input of the report: what it is, where it came from, its bytes' digest."""

    kind: Kind
    name: str
    digest: str
    data: dict[str, Any]


def detect(data: Any) -> Kind | None:
    """The kind a document says it is, or for an older one without ``kind`` the kind its keys
    show (None: not a servesim result)."""
    if not isinstance(data, dict):
        return None
    said = data.get("kind")
    if isinstance(said, str) and said in KINDS and isinstance(data.get("schema_version"), int):
        return said  # type: ignore[return-value]
    keys = set(data)
    for kind, needed, _ in SHAPES:
        if needed <= keys:
            return kind
    return None


def known_shapes() -> str:
    return ", ".join(cmd for _, _, cmd in SHAPES)


def read_document(path: str | Path, name: str | None = None) -> Document:
    """Read and recognise one input file; a clear error naming the file otherwise."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ReportInputError(f"{p}: cannot read it ({e.strerror or e})") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        where = f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        raise ReportInputError(
            f"{p}: not a JSON document{where}; give the --json output of a command"
        ) from None
    if isinstance(data, dict) and isinstance(data.get("plans"), list) and data["plans"]:
        data = data["plans"][0] if len(data["plans"]) == 1 else data
    said = data.get("kind") if isinstance(data, dict) else None
    if isinstance(said, str) and said not in KINDS and "schema_version" in data:
        raise ReportInputError(
            f"{p}: a document of kind {said!r}, which this servesim does not know "
            f"(it reads {', '.join(sorted(KINDS))}); a newer servesim wrote it?"
        )
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise ReportInputError(
            f"{p}: schema_version {version} is newer than this servesim reads ({SCHEMA_VERSION})"
        )
    kind = detect(data)
    if kind is None:
        found = ", ".join(sorted(data)[:8]) if isinstance(data, dict) else type(data).__name__
        raise ReportInputError(
            f"{p}: not a servesim result (found {found}); the report reads the output of {known_shapes()}"
        )
    check_schema(kind, data, p)
    return Document(kind, name or p.name, "sha256:" + hashlib.sha256(raw).hexdigest(), data)


def _result_models() -> dict[str, type[Any]]:
    """Each kind's published model (``servesim schema NAME``): what its document must satisfy."""
    from servesim.cluster.pd_results import PDResult
    from servesim.cluster.recovery.models import RecoveryPlan
    from servesim.engine.results import SimulationReport
    from servesim.resched.models import ReschedulePlan
    from servesim.traces.inspect import TraceStats
    from servesim.tuning.recommend import SchedulerRecommendation
    from servesim.tuning.saturation import SaturationReport
    from servesim.tuning.search import TuneResult

    return {
        "simulate": SimulationReport,
        "trace": TraceStats,
        "saturate": SaturationReport,
        "tune study": TuneResult,
        "recommendation": SchedulerRecommendation,
        "disaggregated": PDResult,
        "recover": RecoveryPlan,
        "reschedule": ReschedulePlan,
    }


def check_schema(kind: str, data: Any, path: Path) -> None:
    """Validate a result document against its kind's model at the door: a field removed or of the
    wrong type is one error naming the file and the field, never a KeyError deep in a view.
    Keys the model does not know (a document's views, manifests) are left to their readers."""
    from pydantic import BaseModel, ValidationError

    if kind == "tune" and isinstance(data, dict):  # ``tune --json``: {study, recommendation}
        check_schema("tune study", data.get("study"), path)
        if data.get("recommendation") is not None:
            check_schema("recommendation", data["recommendation"], path)
        return
    model = _result_models().get(kind)
    if model is None or not issubclass(model, BaseModel):
        return
    if not isinstance(data, dict):
        raise ReportInputError(f"{path}: not a valid {kind} result: an object is needed")
    known = {k: v for k, v in data.items() if k in model.model_fields}
    try:
        model.model_validate(known)
    except ValidationError as exc:
        raise ReportInputError(f"{path}: not a valid {kind} result: {describe(exc)}") from None


def simulation_document(
    result: SimulationResult,
    *,
    trace: Trace | None = None,
    stats: TraceStats | None = None,
    title: str = "simulation",
    notes: list[str] | None = None,
    model: str | None = None,
    command: str | None = None,
    include_requests: bool = False,
    sections: bool = True,
    setup: dict[str, Any] | None = None,
    view: Section | None = None,
) -> dict[str, Any]:
    """``servesim simulate --json``: the report plus the views (workload, simulation) and caveats.
    ``view``: the result's ``simulation_view`` titled ``title``, when the caller has built it."""
    from servesim.views.simulation import simulation_view
    from servesim.views.workload import workload_view

    report = result.report(include_requests=False)
    if trace is not None:
        report.trace_provenance = trace.provenance  # every row dropped while reading, listed
    doc: dict[str, Any] = report.model_dump(mode="json")
    # Per-request records straight from the result's columns (no model per request).
    doc["requests"] = result.request_rows() if include_requests else None
    if sections:
        views = []
        if trace is not None and stats is not None:
            views.append(workload_view(trace, stats).model_dump(mode="json"))
        sim = simulation_view(result, title=title) if view is None else view
        views.append(sim.model_dump(mode="json"))
        doc["sections"] = views
    if setup is not None:  # how the run was set up: the spec and the vllm serve defaults applied
        doc["setup"] = setup
    if notes:
        doc["notes"] = list(notes)
    if model:
        doc["model"] = model
    if command:
        doc["command"] = command
    return stamped("simulate", doc)


def simulate_document(
    answer: SimulateAnswer,
    *,
    include_requests: bool = False,
    sections: bool = True,
    view: Section | None = None,
) -> dict[str, Any]:
    """The ``simulate`` document of a ``servesim.services.run`` answer: what ``servesim simulate
    --json`` prints, the web's run stores and the demo writes for the same request (``view``: the
    answer's ``simulation_view`` titled ``answer.title`` when the caller has built it)."""
    from servesim.traces import inspect_trace

    return simulation_document(
        answer.result,
        trace=answer.trace,
        stats=inspect_trace(answer.trace),
        title=answer.title,
        include_requests=include_requests,
        sections=sections,
        setup=answer.setup.describe(),
        view=view,
    )


def recover_document(
    answer: RecoverAnswer, manifests: Sequence[Sequence[Path]] | None = None
) -> dict[str, Any]:
    """The document of a ``servesim.services.recovery`` answer, the same from ``servesim recover
    --json``, the web's recovery and the demo's: one record's plan (kind ``recover``), or for a
    failure log the totals and every plan. ``manifests``: the hand-off manifests the interface
    wrote (per plan), listed under ``manifests`` (a machine's paths: an interface's output, not
    part of the answer)."""
    plans = answer.plans
    written = None if manifests is None else [str(p) for w in manifests for p in w]
    if answer.single:
        doc: dict[str, Any] = plans[0].model_dump(mode="json")
        if written is not None:
            doc["manifests"] = written
        return stamped("recover", doc)
    log: dict[str, Any] = {
        "num_events": len(plans),
        "total_recompute_tokens": answer.total_recompute_tokens,
        "total_bytes_to_move": sum(p.total_bytes_to_move for p in plans),
        "num_invalid_jobs": answer.num_invalid_jobs,
        "requires_human_review": True,
        "plans": [p.model_dump(mode="json") for p in plans],
    }
    if written is not None:
        log["manifests"] = written
    return log


def reschedule_document(answer: RescheduleAnswer) -> dict[str, Any]:
    """The ``reschedule`` document of a ``servesim.services.rescheduling`` answer: what ``servesim
    reschedule --json`` prints, the web stores and the demo writes for the same input."""
    return stamped("reschedule", answer.plan.model_dump(mode="json"))


def advise_document(answer: AdviseAnswer, outbox_files: Sequence[str] | None = None) -> dict[str, Any]:
    """The ``advise`` document of a ``servesim.services.advice`` answer, the same from ``servesim
    advise --json``, the web's advise job and the demo: the checked advice with every advisor
    call, a recovery record's invalid jobs (left out of the advice), a trace's provenance.
    ``outbox_files``: what the interface wrote for review, listed under ``outbox_files``."""
    doc: dict[str, Any] = answer.result.model_dump(mode="json")
    if outbox_files is not None:
        doc["outbox_files"] = list(outbox_files)
    if answer.case.task == "fallback":
        doc["invalid_jobs"] = [j.model_dump(mode="json") for j in answer.invalid_jobs]
    trace = answer.trace
    if trace is not None:
        doc["trace_provenance"] = (
            None if trace.provenance is None else trace.provenance.model_dump(mode="json")
        )
    return stamped("advise", doc)


__all__ = [
    "KINDS",
    "SCHEMA_VERSION",
    "SHAPES",
    "Document",
    "Kind",
    "ReportInputError",
    "advise_document",
    "cluster_answer_document",
    "cluster_run_document",
    "detect",
    "disaggregated_run_document",
    "disaggregated_title",
    "known_shapes",
    "read_document",
    "recover_document",
    "reschedule_document",
    "simulate_document",
    "simulation_document",
    "stamped",
]
