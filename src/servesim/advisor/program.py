"""The advisor as a DSPy program: one typed module per decision, compiled against the simulator.

Three ``dspy.ChainOfThought`` modules with Pydantic signatures answer the advisor's questions
(question models in, the advisor's answer types out): re-admission order (``RescheduleAdvice``),
MIGRATE_STATE / COLD_RESTART per job (``FallbackAdvice``) and scheduler flags incl.
``queue_timeout_s`` (``BatchingAdvice``). The LM is hosted Claude through ``dspy.LM`` (LiteLLM's
Anthropic route), with the model name and key handling of ``claude.py``: the key comes from
``ANTHROPIC_API_KEY`` (or is given), goes only into the LM client, and is scrubbed from any text
shown or logged. ``compile_program`` runs a DSPy optimiser with ``metric.score`` (the
re-simulated outcome) on the shipped training scenarios and saves the program with its
validation score before and after (``servesim.paths.data_dir()/advisor/program.json``).

dspy is imported only here and only when a program is built (``servesim --help`` stays fast);
its on-disk cache is off and LiteLLM uses its bundled model-cost map (no network at import).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from servesim.advisor.cases import Case
from servesim.advisor.claude import DEFAULT_MODEL, INSTRUCTIONS
from servesim.advisor.metric import rules_for, score, validated
from servesim.advisor.models import ActionLogEntry, Advice, Task
from servesim.advisor.scenarios import Scenario, build_scenario_case, shipped_scenarios
from servesim.errors import InputError, InternalError
from servesim.io import write_text_atomic
from servesim.paths import data_dir

PROGRAM_FORMAT = 1
PROGRAM_FILE = "advisor/program.json"
NO_KEY = "the DSPy advisor needs ANTHROPIC_API_KEY (or use --advisor rules)"


def program_path() -> Path:
    return data_dir() / PROGRAM_FILE


# ------------------------------------------------------------------------------ typed questions
class RequestView(BaseModel):
    model_config = ConfigDict(extra="forbid")
    req_id: str
    tokens_processed: int
    tokens_remaining: int
    sla_budget_ms: float
    priority: int
    preemptions: int
    reused_tokens: int
    solo_slack_ms: float | None


class RescheduleQuestion(BaseModel):
    """Interrupted requests to re-admit (``RescheduleCase.summary``)."""

    model_config = ConfigDict(extra="forbid")
    batch_capacity: int
    requests: list[RequestView]
    input_order: dict[str, float | int | None]


class JobView(BaseModel):
    model_config = ConfigDict(extra="forbid")
    job_id: str
    tokens: int
    checkpoint_covered_tokens: int
    cold_restart_ms: float | None
    migrate_ms: float | None
    bytes_to_move: int
    capacity_wait_ms: float | None
    break_even_gbps: float | None


class FallbackQuestion(BaseModel):
    """The jobs of a lost node with both strategies' costs (``FallbackCase.summary``)."""

    model_config = ConfigDict(extra="forbid")
    interrupted_node: str
    context: dict[str, Any]
    capacity_status: str
    jobs: list[JobView]


class BatchingQuestion(BaseModel):
    """Traffic, SLO and the current flags with their simulated metrics (``BatchingCase.summary``)."""

    model_config = ConfigDict(extra="forbid")
    hardware: str
    traffic: dict[str, Any]
    slo_ms: dict[str, float] | None
    max_model_len: int
    current: dict[str, Any]
    optimizer_best: dict[str, Any] | None = None


QUESTION_TYPES: dict[Task, type[BaseModel]] = {
    "reschedule": RescheduleQuestion,
    "fallback": FallbackQuestion,
    "batching": BatchingQuestion,
}


def question_of(case: Case) -> BaseModel:
    data = json.loads(case.summary())
    data.pop("task", None)
    return QUESTION_TYPES[case.task].model_validate(data)


# ------------------------------------------------------------------------------------ dspy parts
def _dspy() -> Any:
    """Import dspy with no network and no disk cache (LiteLLM's bundled cost map)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("DSPY_CACHEDIR", str(data_dir() / "dspy-cache"))
    import dspy

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    return dspy


@cache
def _signatures() -> dict[Task, Any]:
    from servesim.advisor.models import BatchingAdvice, FallbackAdvice, RescheduleAdvice

    dspy = _dspy()
    feedback_desc = "The simulator's numbers on the previous answer (empty on the first try)."

    answers = {"reschedule": RescheduleAdvice, "fallback": FallbackAdvice, "batching": BatchingAdvice}
    return {
        task: dspy.Signature(
            {
                "question": (QUESTION_TYPES[task], dspy.InputField()),
                "feedback": (str, dspy.InputField(desc=feedback_desc)),
                "advice": (answers[task], dspy.OutputField()),
            },
            INSTRUCTIONS[task],
        )
        for task in ("reschedule", "fallback", "batching")
    }


def new_program() -> Any:
    """The uncompiled program: three ChainOfThought modules, one per task."""
    dspy = _dspy()
    sigs = _signatures()

    class AdvisorProgram(dspy.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.reschedule = dspy.ChainOfThought(sigs["reschedule"])
            self.fallback = dspy.ChainOfThought(sigs["fallback"])
            self.batching = dspy.ChainOfThought(sigs["batching"])

        def forward(self, task: str, question: BaseModel, feedback: str = "") -> Any:
            return getattr(self, task)(question=question, feedback=feedback)

    return AdvisorProgram()


def make_lm(
    model_name: str = DEFAULT_MODEL,
    *,
    api_key: str | None = None,
    timeout_s: float = 60.0,
    api_base: str | None = None,
) -> Any:
    """Hosted Claude through ``dspy.LM`` (429/5xx retried by LiteLLM, ``num_retries=3``);
    ``api_base``: another Messages API endpoint (a proxy; the tests' local recording)."""
    secret = api_key or os.environ.get("ANTHROPIC_API_KEY") or ""
    if not secret:
        raise InputError(NO_KEY)
    dspy = _dspy()
    import litellm

    litellm.suppress_debug_info = True
    return dspy.LM(
        f"anthropic/{model_name}",
        api_key=secret,
        max_tokens=4096,
        num_retries=3,
        timeout=timeout_s,
        cache=False,
        **({"api_base": api_base} if api_base else {}),
    )


# ----------------------------------------------------------------------------- saved programs
class SavedProgram(BaseModel):
    """A compiled program on disk: versioned, with what it was compiled with and how it scored."""

    model_config = ConfigDict(extra="forbid")
    format: int = PROGRAM_FORMAT
    dspy_version: str
    model: str
    optimizer: str
    scenario_seed: int
    train_scenarios: int
    val_scenarios: int
    val_score_before: float
    val_score_after: float
    state: dict[str, Any]


def load_saved(path: Path | None = None) -> SavedProgram | None:
    """The saved program (None when there is none); a damaged file is a one-line error."""
    p = path or program_path()
    if not p.exists():
        return None
    try:
        saved = SavedProgram.model_validate_json(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{p}: not a servesim advisor program ({' '.join(str(e).split())[:200]})") from e
    if saved.format != PROGRAM_FORMAT:
        raise InputError(f"{p}: program format {saved.format}, this servesim reads {PROGRAM_FORMAT}")
    return saved


def program_from(saved: SavedProgram | None) -> Any:
    program = new_program()
    if saved is not None:
        program.load_state(saved.state)
    return program


def save_program(program: Any, meta: dict[str, Any], path: Path | None = None) -> Path:
    dspy = _dspy()
    saved = SavedProgram(dspy_version=dspy.__version__, state=program.dump_state(), **meta)
    return write_text_atomic(path or program_path(), saved.model_dump_json(indent=1) + "\n")


# ------------------------------------------------------------------------------------ advising
class DSPyAdvisor:
    """Asks the DSPy program (compiled or not) for one task's answer, like ``ClaudeAdvisor``."""

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        lm: Any = None,
        saved: SavedProgram | None = None,
        use_saved: bool = True,
    ) -> None:
        self._secret = api_key or os.environ.get("ANTHROPIC_API_KEY") or ""
        self.lm = lm if lm is not None else make_lm(model_name, api_key=api_key, timeout_s=timeout_s)
        self.saved = saved if saved is not None else (load_saved() if use_saved else None)
        self.model_name = model_name
        self.program = program_from(self.saved)

    @property
    def label(self) -> str:
        """Which program answers, as every advice says it."""
        if self.saved is None:
            return "dspy uncompiled"
        return f"dspy compiled ({self.saved.optimizer}, validation score {self.saved.val_score_after:.3f})"

    def redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def propose(
        self, case: Case, feedback: str | None, round_no: int
    ) -> tuple[Advice | None, ActionLogEntry]:
        dspy = _dspy()
        question = question_of(case)
        t0 = time.perf_counter()
        outcome, detail, answer, usage = "ok", None, None, {}
        try:
            with dspy.context(lm=self.lm, track_usage=True):
                pred = self.program(task=case.task, question=question, feedback=feedback or "")
            usage = _usage(pred)
            answer = validated(case, pred.advice)
            if answer is None:
                outcome, detail = "invalid_output", "the answer breaks the task's constraints"
        except Exception as exc:  # LiteLLM / DSPy raise many classes; each is classified and logged
            name = type(exc).__name__
            if "Timeout" in name:
                outcome = "timeout"
            elif type(exc).__module__.startswith(_API_MODULES) or name.startswith("LM"):
                outcome = "api_error"
            else:
                outcome = "invalid_output"
            detail = f"{name}: {exc}"
        entry = ActionLogEntry(
            task=case.task,
            advisor="dspy",
            round=round_no,
            model=self.model_name,
            latency_ms=round((time.perf_counter() - t0) * 1e3, 1),
            input_tokens=int(usage.get("prompt_tokens", 0)),
            output_tokens=int(usage.get("completion_tokens", 0)),
            requests=int(usage.get("requests", 1 if outcome == "ok" else 0)),
            prompt_chars=len(question.model_dump_json()),
            outcome=outcome,
            detail=None if detail is None else self.redact(" ".join(detail.split()))[:500],
        )
        return answer, entry


#: where the LM client's errors come from (dspy.clients: LMAuthError, LMRateLimitError, ...);
#: anything else (DSPy's AdapterParseError, a validator) is an invalid answer
_API_MODULES = ("litellm", "httpx", "openai", "anthropic", "dspy.clients")


def _usage(pred: Any) -> dict[str, int]:
    get = getattr(pred, "get_lm_usage", None)
    per_model = (get() if callable(get) else None) or {}
    out = {"prompt_tokens": 0, "completion_tokens": 0}
    for u in per_model.values():
        for k in out:
            out[k] += int((u or {}).get(k, 0) or 0)
    return out


# ----------------------------------------------------------------------------------- compiling
def _examples(scenarios: list[Scenario]) -> list[Any]:
    dspy = _dspy()
    out = []
    for s in scenarios:
        case = build_scenario_case(s)
        ex = dspy.Example(task=s.task, question=question_of(case), feedback="", scenario_id=s.id)
        out.append(ex.with_inputs("task", "question", "feedback"))
    return out


@cache
def _case(scenario_id: str) -> tuple[Case, Advice]:
    s = shipped_scenarios()
    found = next(x for x in s.train + s.val if x.id == scenario_id)
    case = build_scenario_case(found)
    return case, rules_for(case)


def dspy_metric(example: Any, pred: Any, trace: Any = None) -> float | bool:
    """DSPy's metric: the simulator's score; while bootstrapping (``trace`` set) a demo must be at
    least as good as the rules advisor (score 1)."""
    case, rules = _case(example.scenario_id)
    s = score(case, getattr(pred, "advice", None), rules)
    return s >= 1.0 if trace is not None else s


def evaluate_program(program: Any, lm: Any, scenarios: list[Scenario]) -> float:
    """Mean metric over ``scenarios`` (a failed call scores 0)."""
    dspy = _dspy()
    total = 0.0
    with dspy.context(lm=lm):
        for ex in _examples(scenarios):
            try:
                pred = program(**ex.inputs())
            except Exception:  # an LM or parse failure is a zero, as for the metric
                continue
            total += float(dspy_metric(ex, pred))
    return round(total / max(1, len(scenarios)), 4)


def compile_program(
    lm: Any,
    *,
    model_name: str = DEFAULT_MODEL,
    optimizer: str = "bootstrap",
    max_demos: int = 3,
    path: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Path, SavedProgram]:
    """Compile the program on the training scenarios, score it on the validation ones before and
    after, and save it (also when it did not improve: the scores say so)."""
    dspy = _dspy()
    say = progress or (lambda _m: None)
    sset = shipped_scenarios()
    base = new_program()
    say(f"scoring the uncompiled program on {len(sset.val)} validation scenarios")
    before = evaluate_program(base, lm, sset.val)
    train = _examples(sset.train)
    say(f"compiling with {optimizer} on {len(train)} training scenarios")
    with dspy.context(lm=lm):
        if optimizer == "bootstrap":
            opt = dspy.BootstrapFewShot(
                metric=dspy_metric, max_bootstrapped_demos=max_demos, max_labeled_demos=0
            )
            compiled = opt.compile(new_program(), trainset=train)
        elif optimizer == "mipro":
            opt = dspy.MIPROv2(metric=dspy_metric, auto="light", num_threads=1, verbose=False)
            compiled = opt.compile(
                new_program(),
                trainset=train,
                max_bootstrapped_demos=max_demos,
                max_labeled_demos=0,
                minibatch=False,  # 20 training scenarios: fewer than a minibatch (35)
            )
        else:
            raise InputError(f"unknown optimizer {optimizer!r}: use bootstrap or mipro")
    say("scoring the compiled program")
    after = evaluate_program(compiled, lm, sset.val)
    meta = {
        "model": model_name,
        "optimizer": optimizer,
        "scenario_seed": sset.seed,
        "train_scenarios": len(sset.train),
        "val_scenarios": len(sset.val),
        "val_score_before": before,
        "val_score_after": after,
    }
    out = save_program(compiled, meta, path)
    saved = load_saved(out)
    if saved is None:
        raise InternalError(f"invariant broken: the program just saved to {out} does not load")
    return out, saved


__all__ = [
    "NO_KEY",
    "BatchingQuestion",
    "DSPyAdvisor",
    "FallbackQuestion",
    "RescheduleQuestion",
    "SavedProgram",
    "compile_program",
    "dspy_metric",
    "evaluate_program",
    "load_saved",
    "make_lm",
    "new_program",
    "program_path",
    "question_of",
]
