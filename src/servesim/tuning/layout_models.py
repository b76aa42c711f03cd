"""The records of the layout search (``layouts``): a layout, its simulated point, the break-even
probe, the fresh-seed checks, and how the recommendation and the fewest GPUs were chosen
(``layout_choice``). Kept apart so the choice's logic and the search share them without a cycle.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servesim.tuning.noise import GapVerdict


class Layout(BaseModel):
    """One way to spend the GPU budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["agg", "disagg", "dpep"]
    replicas: int = Field(0, ge=0, description="Aggregated: replicas.")
    tp: int = Field(1, ge=1, description="Aggregated: TP of a replica; dpep: TP of a DP rank.")
    dp: int = Field(
        1,
        ge=1,
        exclude_if=lambda v: v == 1,
        description="dpep: one vllm serve of dp ranks (--data-parallel-size) with "
        "--enable-expert-parallel (servesim.perf.expert_parallel).",
    )
    prefill_replicas: int = Field(0, ge=0)
    prefill_tp: int = Field(1, ge=1)
    decode_replicas: int = Field(0, ge=0)
    decode_tp: int = Field(1, ge=1)
    prefill_config: dict[str, int] = Field(default_factory=dict, description="vLLM keys of the prefill pool.")
    decode_config: dict[str, int] = Field(default_factory=dict, description="vLLM keys of the decode pool.")

    @property
    def gpus(self) -> int:
        if self.kind == "agg":
            return self.replicas * self.tp
        if self.kind == "dpep":
            return self.dp * self.tp
        return self.prefill_replicas * self.prefill_tp + self.decode_replicas * self.decode_tp

    @property
    def label(self) -> str:
        if self.kind == "agg":
            return f"agg {self.replicas}xTP{self.tp}"
        if self.kind == "dpep":
            return f"DP{self.dp}xTP{self.tp}+EP{self.dp * self.tp}"
        flags = "".join(f" P.{k}={v}" for k, v in self.prefill_config.items())
        flags += "".join(f" D.{k}={v}" for k, v in self.decode_config.items())
        return (
            f"{self.prefill_replicas}P{self.decode_replicas}D TP{self.prefill_tp}/TP{self.decode_tp}{flags}"
        )


class LayoutPoint(BaseModel):
    label: str
    layout: Layout
    gpus: int
    good_requests: int
    num_requests: int
    goodput_rps: float
    goodput_per_gpu: float
    ttft_p99_ms: float
    tpot_p99_ms: float | None
    e2e_p99_ms: float
    meets_p99: bool = Field(description="TTFT p99 and TPOT p99 within the SLO's caps.")
    pareto: bool = False


class BreakEven(BaseModel):
    layout: str = Field(description="The disaggregated layout bisected.")
    against: str = Field(description="The aggregated layout it has to beat.")
    link: str
    link_gbps: float
    gbps: float | None = Field(description="Below this bandwidth per TP rank it stops beating it.")
    note: str
    probes: list[tuple[float, float]] = Field(description="(Gbit/s, goodput per GPU) simulated.")


class SeedCheck(BaseModel):
    seed: int
    recommended_per_gpu: float
    against_per_gpu: float
    recommended_meets_p99: bool


class LayoutVerification(BaseModel):
    """The recommendation and the best layout of the other kind, re-run on fresh seeds: traffic
    the comparison never saw (``Workload``'s seeds: redrawn arrivals, or circular shifts of a
    recorded trace), as every other ``tune`` recommendation is re-verified."""

    recommended: str = Field(description="The layout the search trace ranked first.")
    against: str = Field(description="The best layout of the other kind on the search trace.")
    checks: list[SeedCheck]
    holds: bool = Field(description="Its mean goodput per GPU over the fresh seeds is at least the other's.")
    wins: int = Field(description="Fresh seeds on which it was at least as good.")
    note: str


class LayoutRun(BaseModel):
    """One layout on one fresh seed (or on the search trace: seed None)."""

    seed: int | None
    label: str
    goodput_per_gpu: float
    good_requests: int
    num_requests: int
    meets_p99: bool


class LayoutComparison(BaseModel):
    """Two layouts on the same seeds: the gap in goodput per GPU against the noise."""

    challenger: str
    incumbent: str
    verdict: GapVerdict = Field(description="a: the challenger, b: the incumbent, or equivalent.")
    both_serve_all: bool = Field(
        description="Both served every request within the SLO on every seed: equivalent whatever the "
        "gap (goodput per GPU then differs only by how fast the trace's tail drains)."
    )
    outcome: str = Field(description="Which one the comparison keeps.")
    note: str


class LayoutChoice(BaseModel):
    """How the recommendation was chosen: a winner only beyond noise, else the simpler layout."""

    rule: str
    lead: str = Field(description="The search trace's best (the Pareto front's highest goodput per GPU).")
    recommended: str
    floor: float = Field(description="The step-time model's measured error of goodput per GPU.")
    seeds: list[int] = Field(description="Fresh seeds compared on (empty: the search trace alone).")
    runs: list[LayoutRun]
    comparisons: list[LayoutComparison]


class FewestTry(BaseModel):
    gpus: int
    layout: str
    meets_p99: bool = Field(description="On the search trace.")
    fresh_meets: bool | None = Field(description="On every fresh seed (None: not run, it missed first).")


class FewestGpus(BaseModel):
    """The fewest GPUs of the kinds searched whose simplest layout meets the SLO on the search
    trace and every fresh seed (bisection: more GPUs are taken never to hurt)."""

    budget: int
    gpus: int | None = Field(description="None: not even the budget meets the SLO.")
    layout: str | None
    tried: list[FewestTry]
    note: str
