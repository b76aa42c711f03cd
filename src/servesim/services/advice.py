"""An advice: ``AdviseRequest`` -> ``AdviseAnswer``.

``servesim advise``, the web's advise job and the demo's advisor step all build an
``AdviseRequest`` and call ``advise`` (or ``prepare`` then ``run``): the same case from the same
input (``BatchingCase`` on the deployment ``servesim.spec.resolve`` makes of the trace,
``RescheduleCase`` of a rescheduling input, ``FallbackCase`` of a recovery record's plan), the same
optimizer's best, the same choice of advisor (the DSPy program with ``ANTHROPIC_API_KEY``, else
the rules; Claude's pydantic-ai agent by name) and the same re-check by simulation. Its document is
``servesim.report.documents.advise_document(answer)``.

Writing the advice to an outbox for review is an interface's choice (``AdviseAnswer.write_outbox``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from servesim.actionlog import AdvisorUsage
from servesim.advisor import ClaudeAdvisor
from servesim.advisor.models import ActionLogEntry
from servesim.bounds import MAX_SEED
from servesim.errors import InputError, shown
from servesim.services.inputs import Progress, TraceInput, dropped_rows_line, timing_words
from servesim.spec import DeploymentSpec, PercentileSLO

if TYPE_CHECKING:
    from servesim.advisor import AdviceResult
    from servesim.advisor.cases import Case
    from servesim.cluster.recovery import InvalidJob
    from servesim.spec import ResolvedDeployment
    from servesim.traces import Trace

TASKS = ("batching", "reschedule", "fallback")
ADVISORS = ("auto", "dspy", "claude", "rules")


class AdviseRequest(BaseModel):
    """What to advise on: a trace (batching advice for ``deployment`` against ``slo``), or a
    rescheduling input / recovery record (``data``). ``task`` None: from the input."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str | None = Field(None, description="batching | reschedule | fallback (default: from the input).")
    trace: TraceInput | None = Field(None, description="The traffic (batching advice).")
    data: Any = Field(None, description="A rescheduling input or a recovery record, as read from JSON.")
    deployment: DeploymentSpec = Field(
        default_factory=DeploymentSpec,
        description="The current deployment: its engine keys, replicas, and what times the steps.",
    )
    slo: PercentileSLO | None = Field(None, description="p99 caps, also per-request thresholds (batching).")
    optimize: int = Field(12, ge=0, le=1000, description="Optuna trials for the optimizer's best (batching).")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of the optimizer.")
    advisor: str = Field("auto", description="auto | dspy | claude | rules.")
    claude_model: str | None = Field(None, description="Anthropic model (default: the advisor's).")
    rounds: int = Field(3, ge=1, le=10, description="Propose-simulate-refine rounds with Claude.")
    timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False, description="Per Claude call.")

    @property
    def source(self) -> str:
        """The input's name in errors (the trace's, or what the data is)."""
        return self.trace.name if self.trace is not None else "the request's data"

    def kind(self) -> str:
        """The task: the one asked, else the one the data asks for, else batching."""
        from servesim.advisor import infer_task

        kind = self.task or (infer_task(self.data) if self.data is not None else "batching")
        if kind not in TASKS:
            raise InputError(f"unknown task {shown(kind)}: use batching, reschedule or fallback")
        return kind


@dataclass(frozen=True)
class PreparedAdvice:
    """A request with its case built (trace read and deployment resolved, the rescheduling input
    validated, the recovery record planned): what the advice is about, said before it is asked."""

    request: AdviseRequest
    case: Case
    timed_as: str
    #: the served model a batching answer's ``vllm serve`` command names (None: no model times it)
    served_model: str | None = None
    #: skipped trace rows and the step-time model's extrapolation notes (stderr lines)
    warnings: tuple[str, ...] = ()

    def run(
        self,
        *,
        progress: Progress | None = None,
        on_log: Callable[[ActionLogEntry], None] | None = None,
    ) -> AdviseAnswer:
        """The optimizer's best (batching, ``optimize`` trials), then the advisor's answer, re-checked
        (``progress``: phases ``optimizing`` and ``advising``; ``on_log``: each advisor call)."""
        from servesim.advisor import BatchingCase
        from servesim.advisor import advise as ask

        req = self.request
        if isinstance(self.case, BatchingCase) and req.optimize > 0:
            from servesim.advisor.optimize import optimizer_best

            if progress is not None:
                progress("optimizing", 0, 1)
            self.case.optimizer_best = optimizer_best(self.case, req.optimize, req.seed)
        if progress is not None:
            progress("advising", 0, 1)
        claude, program = _proposers(req)
        result = ask(self.case, req.advisor, claude=claude, program=program, rounds=req.rounds, on_log=on_log)
        if progress is not None:
            progress("advising", 1, 1)
        return AdviseAnswer(prepared=self, result=result)


@dataclass(frozen=True)
class AdviseAnswer:
    """The checked advice, with the case it answers."""

    prepared: PreparedAdvice
    result: AdviceResult

    @property
    def request(self) -> AdviseRequest:
        return self.prepared.request

    @property
    def case(self) -> Case:
        return self.prepared.case

    @property
    def timed_as(self) -> str:
        return self.prepared.timed_as

    @property
    def trace(self) -> Trace | None:
        """The batching case's traffic (None for the other tasks)."""
        from servesim.advisor import BatchingCase

        return self.case.trace if isinstance(self.case, BatchingCase) else None

    @property
    def invalid_jobs(self) -> list[InvalidJob]:
        """A recovery record's jobs left out of the advice (as ``recover`` lists them)."""
        from servesim.advisor import FallbackCase

        return list(self.case.plan.invalid_jobs) if isinstance(self.case, FallbackCase) else []

    @property
    def invalid_job_lines(self) -> list[str]:
        """One warning line per invalid job: excluded from the advice, never dropped silently."""
        return [
            f"warning: invalid job {j.index} ({j.job_id or 'no job_id'}) excluded: {j.reason}"
            for j in self.invalid_jobs
        ]

    def usage(self) -> AdvisorUsage:
        """Which advisor answered, Claude's model and its tokens (the action log's record)."""
        r = self.result
        calls = [e for e in r.action_log if e.advisor == r.advisor]
        model = next((e.model for e in calls if e.model), None)
        return AdvisorUsage(
            advisor=r.advisor,
            model=model,
            input_tokens=sum(e.input_tokens for e in calls) if model else None,
            output_tokens=sum(e.output_tokens for e in calls) if model else None,
        )

    def write_outbox(self, outbox: Path) -> list[Path]:
        """The advice (and for batching the vLLM config and ``vllm serve`` command of the deployment's
        model) under ``outbox``, for human review; nothing is applied or sent."""
        from servesim.advisor import write_outbox

        return write_outbox(self.result, self.case, outbox, model=self.prepared.served_model or "<model>")


def _proposers(req: AdviseRequest) -> tuple[Any, Any]:
    """Claude's agent (asked by name) and the DSPy program (by name, or ``auto`` with a key)."""
    from servesim.advisor import DEFAULT_MODEL, ClaudeAdvisor

    model = req.claude_model or DEFAULT_MODEL
    claude = ClaudeAdvisor(model, timeout_s=req.timeout_s) if req.advisor == "claude" else None
    program = None
    if req.advisor == "dspy" or (req.advisor == "auto" and ClaudeAdvisor.available()):
        from servesim.advisor.program import DSPyAdvisor

        program = DSPyAdvisor(model, timeout_s=req.timeout_s)
    return claude, program


def _batching(req: AdviseRequest, trace: Trace | None) -> PreparedAdvice:
    from servesim.advisor import BatchingCase
    from servesim.spec import resolve_for_trace

    if req.trace is None:
        raise InputError("batching advice needs a trace")
    slo = None if req.slo is None else req.slo.per_request()  # good= refused before any work
    trace = req.trace.open() if trace is None else trace
    setup: ResolvedDeployment = resolve_for_trace(req.deployment, trace)[0]
    case = BatchingCase(
        trace,
        setup.config,
        setup.step_time,
        slo=slo,
        replicas=req.deployment.replicas,
        hardware=setup.timed_as,
    )
    drops = dropped_rows_line(trace.provenance)
    warnings = (*([drops] if drops else []), *(f"warning: {n}" for n in setup.notes))
    return PreparedAdvice(
        request=req, case=case, timed_as=setup.timed_as, served_model=setup.model, warnings=warnings
    )


def _data(req: AdviseRequest, kind: str, what: str) -> Any:
    """The rescheduling input or recovery record the task needs, or one line saying it is missing."""
    if req.data is None:
        if req.trace is not None:
            raise InputError(f"{req.trace.name}: {what} must be a JSON/YAML file")
        raise InputError(f"{kind} advice needs data (the reschedule input or recovery record)")
    return req.data


def _reschedule(req: AdviseRequest) -> PreparedAdvice:
    from servesim.advisor import RescheduleCase
    from servesim.engine import ConstantStepTime
    from servesim.engine.simulate import describe_model
    from servesim.resched import parse_input
    from servesim.resched.plan import step_time_model_of

    d = req.deployment
    problem = parse_input(_data(req, "reschedule", "a reschedule input"), model=d.model, gpu=d.gpu, tp=d.tp)
    step = ConstantStepTime(step_time_s=d.step_time_ms / 1000.0) if d.step_time_ms is not None else None
    timed = timing_words(describe_model(step_time_model_of(problem, step)))
    return PreparedAdvice(request=req, case=RescheduleCase(problem, step), timed_as=timed)


def _fallback(req: AdviseRequest) -> PreparedAdvice:
    from servesim.advisor import FallbackCase
    from servesim.cluster.recovery import plan_recovery
    from servesim.services.recovery import TIMED_AS

    data = _data(req, "fallback", "a recovery record")
    record = data[0] if isinstance(data, list) else data
    d = req.deployment
    context = {k: v for k, v in {"model": d.model, "gpu": d.gpu, "tp": d.tp}.items() if v is not None}
    plan = plan_recovery(record, context) if context else plan_recovery(record)
    c = plan.context
    return PreparedAdvice(
        request=req, case=FallbackCase(plan), timed_as=TIMED_AS.format(model=c.model, tp=c.tp, gpu=c.gpu)
    )


def check_advisor(name: str) -> None:
    """An unknown advisor fails before any work (``servesim.advisor.advise`` would, after it)."""
    if name not in ADVISORS:
        raise InputError(f"unknown advisor {shown(name)}: use dspy, claude, rules or auto")


def prepare(request: AdviseRequest, *, trace: Trace | None = None) -> PreparedAdvice:
    """Build the request's case (the advisor and the task are checked first). ``trace``: the
    request's trace, when the caller has read it already (the demo reads it once for every step)."""
    check_advisor(request.advisor)
    kind = request.kind()
    if kind == "reschedule":
        return _reschedule(request)
    if kind == "fallback":
        return _fallback(request)
    return _batching(request, trace)


def advise(
    request: AdviseRequest,
    *,
    progress: Progress | None = None,
    on_log: Callable[[ActionLogEntry], None] | None = None,
) -> AdviseAnswer:
    """``prepare`` and ``run``: "what should I change?", answered and re-checked by simulation."""
    return prepare(request).run(progress=progress, on_log=on_log)


@dataclass(frozen=True)
class CompiledAdvisor:
    """A compiled DSPy advisor: where it was saved and its scores (``SavedProgram`` less its state)."""

    path: Path
    summary: dict[str, Any]


def compile_advisor(
    claude_model: str | None,
    *,
    timeout_s: float = 60.0,
    optimizer: str = "bootstrap",
    max_demos: int = 3,
    say: Callable[[str], None] | None = None,
) -> CompiledAdvisor:
    """The DSPy advisor compiled with the simulator as its metric (needs ``ANTHROPIC_API_KEY``),
    saved in servesim's data folder; ``say``: a line per stage."""
    from servesim.advisor import DEFAULT_MODEL, ClaudeAdvisor
    from servesim.advisor.program import NO_KEY, compile_program, make_lm

    if not ClaudeAdvisor.available():
        raise InputError(f"advise compile: {NO_KEY.replace(' (or use --advisor rules)', '')}")
    if optimizer not in ("bootstrap", "mipro"):
        raise InputError(f"--optimizer {shown(optimizer)}: use bootstrap or mipro")
    model = claude_model or DEFAULT_MODEL
    lm = make_lm(model, timeout_s=timeout_s)
    path, saved = compile_program(
        lm, model_name=model, optimizer=optimizer, max_demos=max_demos, path=None, progress=say
    )
    return CompiledAdvisor(path=path, summary=saved.model_dump(exclude={"state"}))


def read_input(source: str) -> Any:
    """A JSON/YAML input file's data (a rescheduling input or recovery record), or None when
    ``source`` is not such a file (then it names a trace)."""
    p = Path(source)
    if p.suffix.lower() not in (".json", ".yaml", ".yml") or not p.exists():
        return None
    import yaml

    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{source}: {e}") from e


__all__ = [
    "ADVISORS",
    "ActionLogEntry",
    "AdviseAnswer",
    "AdviseRequest",
    "ClaudeAdvisor",
    "CompiledAdvisor",
    "PreparedAdvice",
    "advise",
    "check_advisor",
    "compile_advisor",
    "prepare",
    "read_input",
]
