"""From the commands' documents to one ``Report``: the views of each result, a KPI strip, the
``vllm serve`` command, caveats and the provenance needed to reproduce every number.

Why one model in the middle: the HTML, Markdown and PDF renderers (and the diff of two reports)
all read the same ``Report``, so they cannot disagree; it holds no time stamp and no machine
path, so the same inputs give the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.errors import InputError, ServesimError, describe
from servesim.report.documents import Document, Kind, ReportInputError, read_document
from servesim.views.model import Kpi, Section, Table

#: What each part of a report is about, in reading order.
ORDER: list[Kind] = [
    "trace",
    "simulate",
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


class InputRef(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    kind: str
    digest: str


class Provenance(BaseModel):
    """What reproduces every number: the version, the inputs' digests, the seeds, the command."""

    model_config = ConfigDict(frozen=True)
    servesim_version: str
    command_line: str
    inputs: list[InputRef]
    seeds: dict[str, list[int]] = Field(description="Input name -> the seeds its result used.")


class ReportPart(BaseModel):
    """One input's sections (a simulation gives workload + simulation, a study trials + advice)."""

    model_config = ConfigDict(frozen=True)
    kind: str
    source: str
    title: str
    sections: list[Section]
    commands: list[str] = Field(default_factory=list, description="`vllm serve` command lines.")
    caveats: list[str] = Field(default_factory=list)


class KpiGroup(BaseModel):
    """One group of the KPI strip at the top (figures of one result)."""

    model_config = ConfigDict(frozen=True)
    title: str
    kpis: list[Kpi]


class Lead(BaseModel):
    """What the report opens with: the verdict in one sentence, then the command to run."""

    model_config = ConfigDict(frozen=True)
    sentence: str
    status: str = Field(description="pass | fail | info: the colour of the verdict.")
    command: str | None = None
    source: str


class Report(BaseModel):
    model_config = ConfigDict(frozen=True)
    title: str
    lead: Lead | None = None
    kpis: list[KpiGroup]
    parts: list[ReportPart]
    provenance: Provenance

    def sections(self) -> list[Section]:
        return [s for p in self.parts for s in p.sections]


# ----------------------------------------------------------------------------- per kind
def _simulate(doc: Document) -> ReportPart:
    from servesim.engine import EngineConfig, SimulationSummary
    from servesim.views.simulation import summary_view

    data = doc.data
    summary = SimulationSummary.model_validate(data["summary"])
    config = EngineConfig.model_validate(data["config"])
    if data.get("sections"):
        from servesim.views.simulation import config_table

        sections = [Section.model_validate(s) for s in data["sections"]]
        fixed = config_table(config, summary.max_model_len)  # as the command pins it
        sections = [
            s.model_copy(update={"tables": [fixed if t.key == "config" else t for t in s.tables]})
            for s in sections
        ]
    else:
        sections = [summary_view(summary, config, title=str(data.get("title", "simulation")))]
    step = data.get("step_time_model") or {}
    title = next((s.title for s in sections if s.key == "simulation"), "simulation")
    return ReportPart(
        kind=doc.kind,
        source=doc.name,
        title=title,
        sections=sections,
        commands=[serve_command(config, summary.max_model_len, step, data.get("model"))],
        caveats=[*timing_caveats(step), *map(str, data.get("notes", []))],
    )


def serve_command(config: Any, max_model_len: int, step: dict[str, Any], model: str | None) -> str:
    """The simulated engine settings as the ``vllm serve`` command of one replica."""
    from servesim.tuning import Deployment
    from servesim.tuning.hardware import _hf_id

    tp = int(step.get("tp") or 1)
    name = model or step.get("model")
    dep = Deployment.from_engine_config(
        config,
        max_model_len=config.max_model_len or max_model_len,
        replicas=1,
        tensor_parallel_size=tp,
        gpu_memory_utilization=0.9,
        data_parallel_size=int((step.get("data_parallel") or {}).get("data_parallel_size") or 1),
        enable_expert_parallel=bool(step.get("enable_expert_parallel")),
    )
    # the simulated settings as they ran: a speculative head servesim cannot name is DRAFT_MODEL
    return dep.vllm_serve_command(_hf_id(str(name)) if name else "MODEL", strict=False)


def timing_caveats(step: dict[str, Any]) -> list[str]:
    """What the step-time model behind the numbers is, and how well it was calibrated."""
    kind = step.get("kind")
    if kind == "linear":
        return [
            "Step times come from servesim's linear stand-in model (roughly an 8B model on one H100-class "
            "GPU), not a calibrated profile: latencies are indicative; pass --model/--gpu for the roofline."
        ]
    if kind == "constant":
        return [
            "Every engine step takes the same time (--step-time-ms): a scheduling study, not a timing one."
        ]
    if kind != "roofline":
        return [f"Step times come from a {kind or 'custom'} step-time model."]
    out = [
        f"Step times: the roofline model of {step.get('model')} on {step.get('tp', 1)} x "
        f"{str(step.get('gpu', '')).upper()} (servesim.perf)."
    ]
    profile = step.get("profile") or {}
    cal = profile.get("calibration") if isinstance(profile, dict) else None
    if isinstance(cal, dict) and cal.get("mape_after") is not None:
        cases = cal.get("cases") or []
        out.append(
            f"Calibration of profile {profile.get('name')!r}: mean absolute percentage error "
            f"{float(cal['mape_after']):.1f} % over {cal.get('targets', '?')} measured figures of "
            f"{len(cases)} vLLM runs ({cal.get('method', 'fit')})."
        )
        rng = profile.get("fitted_range") or {}
        tok = rng.get("tokens_per_step")
        rps = rng.get("requests_per_second")
        if tok and rps:
            out.append(
                f"Fitted on {tok[0]:,.0f}-{tok[1]:,.0f} tokens per step and {rps[0]:.1f}-{rps[1]:.1f} req/s; "
                "figures outside that range are extrapolated on the roofline."
            )
    return out


def _trace(doc: Document) -> ReportPart:
    from servesim.traces import TraceStats
    from servesim.views.workload import stats_table

    stats = TraceStats.model_validate(doc.data)
    section = Section(key="workload", title=f"workload: {stats.source}", tables=[stats_table(stats)])
    return ReportPart(kind=doc.kind, source=doc.name, title=section.title, sections=[section])


def _saturate(doc: Document) -> ReportPart:
    from servesim.tuning import SaturationReport
    from servesim.views.saturation import saturation_view

    rep = SaturationReport.model_validate(doc.data)
    return ReportPart(
        kind=doc.kind,
        source=doc.name,
        title="saturation sweep",
        sections=[saturation_view(rep)],
        caveats=list(rep.notes),
    )


def _recommendation_part(doc: Document, rec_data: dict[str, Any], extra: list[Section]) -> ReportPart:
    from servesim.tuning import SchedulerRecommendation
    from servesim.views.tuning import recommendation_view

    rec = SchedulerRecommendation.model_validate(rec_data)
    return ReportPart(
        kind=doc.kind,
        source=doc.name,
        title="tuning study and recommendation",
        sections=[*extra, recommendation_view(rec)],
        commands=[rec.vllm_serve_command],
        caveats=list(rec.warnings),
    )


def _tune(doc: Document) -> ReportPart:
    from servesim.tuning import TuneResult
    from servesim.views.tuning import trials_view

    study = TuneResult.model_validate(doc.data["study"])
    trials = [trials_view(study)]
    if doc.data.get("gpu_types") is not None:  # tune --gpu-types: the types compared, first
        from servesim.services.gpu_types import GpuTypesAnswer
        from servesim.views.gpu_types import gpu_types_view

        trials.insert(0, gpu_types_view(GpuTypesAnswer.model_validate(doc.data["gpu_types"])))
    rec = doc.data.get("recommendation")
    if rec is None:
        return ReportPart(kind=doc.kind, source=doc.name, title="tuning study", sections=trials)
    return _recommendation_part(doc, rec, trials)


def _recommendation(doc: Document) -> ReportPart:
    return _recommendation_part(doc, doc.data, [])


def _layouts(doc: Document) -> ReportPart:
    """``tune --layouts``: the layouts compared, the recommendation and its checks."""
    from servesim.tuning.layouts import LayoutAnswer
    from servesim.views.layouts import layouts_view

    try:
        ans = LayoutAnswer.model_validate(doc.data.get("layouts"))
    except ValidationError as exc:
        raise ReportInputError(f"{doc.name}: not a valid layouts answer: {describe(exc)}") from None
    return ReportPart(
        kind=doc.kind, source=doc.name, title="aggregated or disaggregated", sections=[layouts_view(ans)]
    )


def _cluster(doc: Document) -> ReportPart:
    """The strategies compared, then the run's own views when the document holds them (the
    fleet's and each replica's, ``servesim.views.fleet``: the same sections the web draws)."""
    from servesim.views.cluster import cluster_view

    raw = doc.data.get("sections") or []
    if not isinstance(raw, list):
        raise ReportInputError(f"{doc.name}: not a valid cluster result: sections must be a list of views")
    try:
        views = [Section.model_validate(s) for s in raw]
    except ValidationError as exc:
        raise ReportInputError(
            f"{doc.name}: not a valid cluster result: a view in sections: {describe(exc)}"
        ) from None
    return ReportPart(
        kind=doc.kind,
        source=doc.name,
        title=str(doc.data.get("title") or "cluster with failures"),
        sections=[cluster_view(doc.data), *views],
    )


def _disaggregated(doc: Document) -> ReportPart:
    """A prefill/decode run: the view the document holds (``servesim.views.disagg``, the one the
    web draws), or for a document without it the same view built again from its result."""
    from servesim.cluster.pd import DisaggSpec
    from servesim.cluster.pd_results import PDResult
    from servesim.views.disagg import disagg_sections

    raw = doc.data.get("sections")
    title = str(doc.data.get("title") or "disaggregated run")
    if raw:
        if not isinstance(raw, list):
            raise ReportInputError(
                f"{doc.name}: not a valid disaggregated result: sections must be a list of views"
            )
        try:
            sections = [Section.model_validate(s) for s in raw]
        except ValidationError as exc:
            raise ReportInputError(
                f"{doc.name}: not a valid disaggregated result: a view in sections: {describe(exc)}"
            ) from None
    else:
        try:
            pools = DisaggSpec.model_validate(doc.data["spec"])
        except ValidationError as exc:
            raise ReportInputError(
                f"{doc.name}: not a valid disaggregated result: spec: {describe(exc)}"
            ) from None
        result = PDResult.model_validate({k: v for k, v in doc.data.items() if k in PDResult.model_fields})
        sections = disagg_sections(result, pools, title=title)
    return ReportPart(kind=doc.kind, source=doc.name, title=title, sections=sections)


def _recover(doc: Document) -> ReportPart:
    from servesim.cluster.recovery import RecoveryPlan
    from servesim.views.recovery import recovery_view

    plan = RecoveryPlan.model_validate(doc.data)
    return ReportPart(
        kind=doc.kind,
        source=doc.name,
        title="recovery decisions",
        sections=[recovery_view(plan)],
        caveats=list(plan.assumptions),
    )


def _reschedule(doc: Document) -> ReportPart:
    from servesim.resched import ReschedulePlan
    from servesim.views.resched import resched_view

    plan = ReschedulePlan.model_validate(doc.data)
    return ReportPart(
        kind=doc.kind,
        source=doc.name,
        title="rescheduling of interrupted requests",
        sections=[resched_view(plan)],
        caveats=list(plan.assumptions),
    )


def _advise(doc: Document) -> ReportPart:
    from servesim.advisor import AdviceResult
    from servesim.views.advisor import advice_view

    result = AdviceResult.model_validate({k: v for k, v in doc.data.items() if k != "outbox_files"})
    return ReportPart(kind=doc.kind, source=doc.name, title="advisor", sections=[advice_view(result)])


BUILDERS: dict[str, Callable[[Document], ReportPart]] = {
    "simulate": _simulate,
    "trace": _trace,
    "saturate": _saturate,
    "tune": _tune,
    "recommendation": _recommendation,
    "layouts": _layouts,
    "cluster": _cluster,
    "disaggregated": _disaggregated,
    "recover": _recover,
    "reschedule": _reschedule,
    "advise": _advise,
}


# ----------------------------------------------------------------------------- the report
#: The KPI strip: which figures of which view, in this order (the rest stay in their sections).
HEADLINE: dict[str, list[str]] = {
    "simulation": ["ttft_ms_p99", "tpot_ms_p99", "e2e_ms_p99", "goodput", "output_token_throughput"],
    "recommendation": ["gpus", "knee_headroom", "headroom"],
    "layouts": ["goodput_per_gpu", "gpus", "break_even_gbps"],
    "cluster": ["best_recovery_e2e_p99_ms", "starved"],
    "fleet": ["ttft_ms_p99", "tpot_ms_p99", "e2e_ms_p99", "goodput", "output_token_throughput"],
    "disaggregated": ["ttft_ms_p99", "tpot_ms_p99", "e2e_ms_p99", "goodput", "output_token_throughput"],
}


GROUP_TITLES = {
    "simulation": "simulated configuration",
    "recommendation": "recommended configuration",
    "layouts": "recommended layout",
    "cluster": "node failure",
    "fleet": "the fleet",
    "disaggregated": "prefill/decode pools",
}


def headline(parts: Sequence[ReportPart], documents: Sequence[Document] = ()) -> list[KpiGroup]:
    """The KPI strip: the first simulation's latency, goodput and throughput; the sweep's knee and
    unstable rate; the recommendation's size and headroom; what a failure cost."""

    groups: list[KpiGroup] = []
    seen: set[str] = set()
    for part in parts:
        for s in part.sections:
            keys = HEADLINE.get(s.key)
            if not keys or s.key in seen:
                continue
            seen.add(s.key)
            kpis = [k for key in keys for k in s.kpis if k.key == key]
            if kpis:  # each card group says which configuration (and which input) it is about
                name = GROUP_TITLES.get(s.key, s.title)
                groups.append(KpiGroup(title=f"{name} ({part.source})", kpis=kpis))
        doc = next((d for d in documents if d.name == part.source and d.kind == "saturate"), None)
        if doc is not None and "saturation" not in seen:
            seen.add("saturation")
            groups.append(sweep_kpis(doc))
    return groups


def sweep_kpis(doc: Document) -> KpiGroup:
    """The sweep's SLO knee and unstable rate, titled with what they were measured on (the
    traffic and the SLO: a sweep of resampled traffic or under another SLO says so here)."""
    from servesim.tuning import SaturationReport
    from servesim.views.glossary import METRICS
    from servesim.views.saturation import scope_text

    kpis = [
        Kpi(
            key=key,
            label=METRICS[key].label if key != "saturation_rps" else "unstable from",
            value=doc.data.get(key),
            unit="req/s",
            decimals=1,
            help=METRICS[key].definition,
        )
        for key in ("goodput_knee_rps", "saturation_rps")
    ]
    rep = SaturationReport.model_validate(
        {k: v for k, v in doc.data.items() if k in SaturationReport.model_fields}
    )
    return KpiGroup(title=f"saturation sweep {scope_text(rep)} ({doc.name})", kpis=kpis)


def lead_of(documents: Sequence[Document]) -> Lead | None:
    """The verdict the report opens with: the (first) recommendation's sentence and command."""
    from servesim.tuning import SchedulerRecommendation
    from servesim.views.tuning import lead_sentence

    for doc in sorted(documents, key=lambda d: ORDER.index(d.kind)):
        data = doc.data.get("recommendation") if doc.kind == "tune" else doc.data
        if doc.kind in ("tune", "recommendation") and isinstance(data, dict):
            rec = SchedulerRecommendation.model_validate(data)
            status = "info" if rec.meets_slo is None else ("pass" if rec.meets_slo else "fail")
            return Lead(
                sentence=lead_sentence(rec), status=status, command=rec.vllm_serve_command, source=doc.name
            )
    return None


def seeds_of(doc: Document) -> list[int]:
    """The seeds a result names (replicates, sampler, verification), in order, once each."""
    found: list[int] = []

    def visit(value: Any, depth: int) -> None:
        if depth > 3 or not isinstance(value, dict):
            return
        for k, v in value.items():
            if k in ("seed", "seeds", "verification_seeds", "verify_seeds"):
                for x in v if isinstance(v, list) else [v]:
                    if isinstance(x, int) and not isinstance(x, bool) and x not in found:
                        found.append(x)
            elif isinstance(v, dict):
                visit(v, depth + 1)

    visit(doc.data, 0)
    return found


def _part(doc: Document) -> ReportPart:
    """The document's part; a document its kind's model does not cover (cluster, advise) that
    lacks a field or has one of the wrong type is one error naming the file, not a traceback."""
    try:
        return BUILDERS[doc.kind](doc)
    except ServesimError:
        raise
    except KeyError as exc:
        raise ReportInputError(
            f"{doc.name}: not a valid {doc.kind} result: field {exc.args[0]!r} is missing"
        ) from None
    except (TypeError, AttributeError, IndexError, ValueError) as exc:
        raise ReportInputError(
            f"{doc.name}: not a valid {doc.kind} result: a field is of the wrong type or shape "
            f"({describe(exc)})"
        ) from None


def build_report(
    documents: Sequence[Document],
    *,
    command_line: str = "servesim report",
    title: str | None = None,
    compare: bool = True,
) -> Report:
    """One report over the documents; two of the same kind are compared (a diff first) unless
    ``compare`` is off."""
    from servesim import __version__

    if not documents:
        raise InputError("no input: give the --json output of at least one command")
    if compare and len(documents) == 2 and documents[0].kind == documents[1].kind:
        from servesim.report.diff import diff_part

        a, b = documents
        pa, pb = _part(a), _part(b)
        parts = [
            diff_part(a, b, pa, pb),
            pa.model_copy(update={"title": f"A: {pa.title}"}),
            pb.model_copy(update={"title": f"B: {pb.title}"}),
        ]
        title = title or f"servesim report: {a.name} against {b.name}"
    else:
        ranked = sorted(documents, key=lambda d: ORDER.index(d.kind))
        parts = [_part(d) for d in ranked]
    return Report(
        title=title or "servesim schedule recommendation report",
        lead=lead_of(documents),
        kpis=headline(parts, documents),
        parts=parts,
        provenance=Provenance(
            servesim_version=__version__,
            command_line=command_line,
            inputs=[InputRef(name=d.name, kind=d.kind, digest=d.digest) for d in documents],
            seeds={d.name: s for d in documents if (s := seeds_of(d))},
        ),
    )


def read_inputs(paths: Sequence[str | Path], base: str | Path | None = None) -> list[Document]:
    """Read every input; names are relative to ``base`` when given (no machine path in a report)."""
    docs = []
    for p in paths:
        path = Path(p)
        name = path.name
        if base is not None:
            try:
                name = str(path.resolve().relative_to(Path(base).resolve()))
            except ValueError:
                name = path.name
        docs.append(read_document(path, name))
    names = [d.name for d in docs]
    if len(set(names)) < len(names):  # a.json vs b/a.json: tell them apart by their folders
        docs = [
            d if names.count(d.name) == 1 else replace(d, name=f"{Path(p).parent.name}/{d.name}")
            for d, p in zip(docs, paths, strict=True)
        ]
    return docs


def all_tables(report: Report) -> list[Table]:
    return [t for s in report.sections() for t in s.tables]


__all__ = [
    "InputRef",
    "KpiGroup",
    "Lead",
    "Provenance",
    "Report",
    "ReportPart",
    "all_tables",
    "build_report",
    "headline",
    "lead_of",
    "read_inputs",
    "seeds_of",
    "serve_command",
    "timing_caveats",
]
