"""Why a recommendation says what it says, as data: what changed, which metric moved, by how much.

Each ``Reason`` is one measured statement: the recommended value of a setting against an
alternative (the user's baseline, an ablation, more capacity), with ``Effect`` items giving the
metric under each and the change. Nothing here is English: ``servesim.views.tuning`` renders the
reasons for people, and a program reads the numbers. ``SAME_WITHIN`` is the noise band below which
a change counts as no change.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from servesim.tuning.evaluate import Status

#: Relative differences within this band are reported as "same" (seed-to-seed noise is larger).
SAME_WITHIN = 0.02

ReasonKind = Literal[
    "prediction",
    "headroom",
    "slo_knee",
    "versus_baseline",
    "ablation",
    "refused",
    "kv_cache",
    "prefix_sharing",
    "gateway",
    "capacity",
    "admission",
]
Scalar = float | int | str | bool | None


class Effect(BaseModel):
    """One metric with the recommendation and with the alternative."""

    metric: str = Field(description="ttft_p99_ms, tpot_p99_ms, e2e_p99_ms, good_fraction, gpus, ...")
    recommended: float | None
    alternative: float | None
    change: float | None = Field(description="alternative - recommended.")
    relative: float | None = Field(description="alternative / recommended - 1.")
    verdict: Literal["worse", "better", "same", "unknown"] = Field(
        description="The alternative against the recommendation (within SAME_WITHIN: same)."
    )

    @classmethod
    def of(
        cls, metric: str, recommended: float | None, alternative: float | None, higher_is_better: bool = False
    ) -> Effect:
        if recommended is None or alternative is None:
            return cls(
                metric=metric,
                recommended=recommended,
                alternative=alternative,
                change=None,
                relative=None,
                verdict="unknown",
            )
        change = alternative - recommended
        rel = change / recommended if recommended else (0.0 if change == 0 else None)
        small = abs(rel) <= SAME_WITHIN if rel is not None else False
        if small:
            verdict: Literal["worse", "better", "same", "unknown"] = "same"
        else:
            up = change > 0
            verdict = "better" if up == higher_is_better else "worse"
        return cls(
            metric=metric,
            recommended=recommended,
            alternative=alternative,
            change=change,
            relative=rel,
            verdict=verdict,
        )


class KnobChange(BaseModel):
    """A setting that differs between the recommendation and what it is compared with."""

    knob: str
    recommended: Any
    alternative: Any


class Reason(BaseModel):
    """One measured statement behind the recommendation (rendered by ``servesim.views.tuning``)."""

    kind: ReasonKind
    knob: str | None = Field(None, description="The setting the statement is about.")
    value: Any = Field(None, description="Its recommended value.")
    alternative: Any = Field(None, description="The value it is compared with.")
    against: Literal["baseline", "ablation", "capacity", "none"] = "none"
    changes: list[KnobChange] = Field(default_factory=list, description="Settings that differ (baseline).")
    effects: list[Effect] = Field(default_factory=list, description="Metrics: recommended vs alternative.")
    alternative_slo_ok: bool | None = None
    alternative_status: Status | None = None
    facts: dict[str, Scalar] = Field(default_factory=dict, description="Supporting measurements.")


def latency_effects(recommended: dict[str, float], alternative: dict[str, float | None]) -> list[Effect]:
    """p99 TTFT, TPOT and E2E (ms) under the recommendation and the alternative."""
    return [
        Effect.of(f"{m}_p99_ms", recommended[m], alternative.get(m))
        for m in ("ttft", "tpot", "e2e")
        if m in recommended
    ]


def knob_changes(
    recommended: dict[str, Any], alternative: dict[str, Any], knobs: list[str]
) -> list[KnobChange]:
    return [
        KnobChange(knob=k, recommended=recommended.get(k), alternative=alternative.get(k))
        for k in knobs
        if recommended.get(k) != alternative.get(k)
    ]
