"""The view of an advisor's checked answer: who answered (and for Claude the model and tokens),
what it proposes and why, and the simulator's verdict next to the current setting."""

from __future__ import annotations

from typing import Any

from servesim.advisor import AdviceResult, BatchingAdvice, FallbackAdvice, RescheduleAdvice, Verification
from servesim.views.model import Column, Kpi, Section, Table, Verdict, VerdictStatus

#: The simulator's verdict as words and a colour: green only for a real change that improves.
VERDICT_WORDS: dict[str, tuple[str, VerdictStatus]] = {
    "accepted": ("accepted", "pass"),
    "no_change": ("no change", "info"),
    "no_gain": ("no gain", "info"),
    "rejected": ("rejected", "fail"),
    "rejected_slo": ("rejected: still misses the SLO", "fail"),
}


def answered_by(result: AdviceResult) -> str:
    """Which program answered, in words every interface shows (the result's ``program`` and ``score``)."""
    if result.program == "rules" or result.advisor == "rules":
        who = "the rules advisor"
    elif result.advisor == "claude":
        who = "Claude (pydantic-ai)"
    else:
        who = "the DSPy program, " + result.program.removeprefix("dspy ")
    return who


def score_words(result: AdviceResult) -> str | None:
    """The re-simulated metric of the answer (advisor/metric.py), or None when none was computed."""
    if result.score is None:
        return None
    return (
        f"simulator score {result.score:.3f} "
        "(re-simulated: 0.5 = the baseline, 1 = at least the better of the baseline and the rules advisor)"
    )


def verdict_words(v: Verification) -> tuple[str, VerdictStatus]:
    """What the re-simulation says of a proposal, in words, and its colour."""
    return VERDICT_WORDS[v.verdict]


def verification_verdict(v: Verification) -> Verdict:
    words, status = verdict_words(v)
    return Verdict(key="verification", label="simulator check", status=status, text=f"{words}: {v.reason}")


def advice_table(advice: BatchingAdvice | RescheduleAdvice | FallbackAdvice) -> Table:
    if isinstance(advice, BatchingAdvice):
        data = advice.model_dump(exclude={"rationale", "expected_effect"})
        return Table(
            key="advice",
            title="proposed settings",
            columns=[
                Column(key="setting", label="setting", kind="str"),
                Column(key="value", label="value", kind="str"),
            ],
            rows=[[k, _setting(v)] for k, v in data.items()],
        )
    if isinstance(advice, RescheduleAdvice):
        why = {r.req_id: r.reason for r in advice.reasons}
        return Table(
            key="advice",
            title="proposed re-admission order",
            columns=[
                Column(key="position", label="#", kind="int"),
                Column(key="req_id", label="request", kind="str"),
                Column(key="reason", label="why", kind="str"),
            ],
            rows=[[i + 1, r, why.get(r, "")] for i, r in enumerate(advice.order)],
        )
    return Table(
        key="advice",
        title="proposed recovery per job",
        columns=[
            Column(key="job_id", label="job", kind="str"),
            Column(key="strategy", label="strategy", kind="str"),
            Column(key="reason", label="why", kind="str"),
        ],
        rows=[[d.job_id, d.strategy, d.reason] for d in advice.decisions],
    )


def _setting(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "on" if v else "off"
    return f"{v:,}" if isinstance(v, int) else str(v)


def advice_view(result: AdviceResult) -> Section:
    v = result.verification
    names = list(v.candidates[0].metrics) if v.candidates else []
    check = Table(
        key="verification",
        title="re-simulated: current setting, the proposal and the optimizer's best",
        columns=[Column(key="candidate", label="candidate", kind="str")]
        + [
            Column(
                key=n,
                label=n.replace("_", " "),
                kind="int" if all(isinstance(c.metrics[n], int) for c in v.candidates) else "float",
                decimals=2,
            )
            for n in names
        ],
        rows=[[c.label, *(c.metrics[n] for n in names)] for c in v.candidates],
    )
    calls = [e for e in result.action_log if e.advisor == result.advisor]
    model = next((e.model for e in calls if e.model), None)
    who = f"answered by {answered_by(result)}"
    if model:
        tokens_in = sum(e.input_tokens for e in calls)
        tokens_out = sum(e.output_tokens for e in calls)
        who += f" ({model}, {len(calls)} calls, {tokens_in:,} input / {tokens_out:,} output tokens)"
    else:
        who += " (deterministic rules: no model, no tokens)"
    text = [who]
    if (score := score_words(result)) is not None:
        text.append(score)
    if result.notice:
        text.append(result.notice)
    advice: Any = result.advice
    if isinstance(advice, BatchingAdvice):
        text += [f"why: {r}" for r in advice.rationale] + [f"expected effect: {advice.expected_effect}"]
    kpis = [Kpi(key="advisor_rounds", label="advisor rounds", value=result.rounds, unit=None, decimals=0)]
    return Section(
        key="advisor",
        title=f"advisor: {result.task}",
        kpis=kpis,
        tables=[advice_table(result.advice), check],
        verdicts=[verification_verdict(v)],
        text=text,
    )


__all__ = ["VERDICT_WORDS", "advice_table", "advice_view", "verdict_words", "verification_verdict"]
