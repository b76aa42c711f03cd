"""Aggregated or disaggregated at one GPU budget: ``LayoutsRequest`` -> ``LayoutsAnswer``.

The layouts question of ``servesim tune --layouts agg,disagg --gpus N`` (and of the web's Tune
job given ``layouts``): every layout of the budget simulated on the trace
(``tuning.layouts.compare_layouts``), the recommendation re-run against the other kind's best on
fresh seeds of the same traffic, and the break-even link bandwidth. The answer's document is
``report.capacity.layouts_document(answer)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import ConfigError
from servesim.services.capacity import check_names, workload_of
from servesim.services.inputs import TraceInput
from servesim.spec import DeploymentSpec, PercentileSLO
from servesim.tuning.layouts import DEPLOYMENT_KEYS, LayoutAnswer

LayoutKind = Literal["agg", "disagg", "dpep"]
LAYOUT_KINDS: tuple[LayoutKind, ...] = ("agg", "disagg", "dpep")
#: What is compared unless the kinds are named (dpep: a MoE model's DP + EP, asked for by name).
DEFAULT_LAYOUT_KINDS: tuple[LayoutKind, ...] = ("agg", "disagg")
#: The model every layout serves when the deployment names none.
DEFAULT_LAYOUT_MODEL = "llama-3.1-8b"


class LayoutsRequest(BaseModel):
    """Which way to spend ``gpus`` GPUs on this traffic: aggregated replicas or prefill/decode
    pools (each pool's TP searched), scored by goodput per GPU under the SLO."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: TraceInput
    deployment: DeploymentSpec = Field(
        default_factory=DeploymentSpec,
        description="The model and GPU (or a fixed step time) of every layout; TP is searched. Of its "
        "vLLM keys only quantization and kv_cache_dtype (the checkpoint's weight format, the KV dtype) "
        "are given, and every layout runs with them; every other key is vllm serve's default but for "
        "the values tried.",
    )
    gpus: int = Field(ge=1, le=64, description="The GPU budget every layout spends.")
    layouts: list[LayoutKind] = Field(
        default_factory=lambda: list(DEFAULT_LAYOUT_KINDS), min_length=1, description="The kinds compared."
    )
    slo: PercentileSLO | None = Field(None, description="TTFT/TPOT caps of a good request.")
    link: str = Field("rdma-400g", min_length=1, max_length=100, description="KV-transfer link preset.")
    short_prompt_tokens: int = Field(
        0, ge=0, description="Prompts shorter than this prefill on their decode replica."
    )
    prefill_batched_tokens: list[int] = Field(
        default_factory=list, description="Prefill pool max_num_batched_tokens values (none: the default)."
    )
    decode_max_seqs: list[int] = Field(
        default_factory=list, description="Decode pool max_num_seqs values (none: the default)."
    )
    break_even: bool = Field(True, description="Bisect the bandwidth where disaggregation stops paying.")
    verify_seeds: int = Field(3, ge=1, le=20, description="Fresh seeds re-running the recommendation.")


@dataclass(frozen=True)
class LayoutsAnswer:
    """The layouts compared, with the size of the traffic they ran."""

    request: LayoutsRequest
    answer: LayoutAnswer
    num_requests: int

    @property
    def title(self) -> str:
        """``trace.csv: 300 requests, 4 GPUs``."""
        return f"{self.request.trace.name}: {self.num_requests:,} requests, {self.request.gpus} GPUs"


def refused_keys(spec: DeploymentSpec) -> list[str]:
    """The deployment's settings a layout search cannot keep (``tp``: it is searched; a vLLM key
    other than ``DEPLOYMENT_KEYS``: every pool runs vllm serve's defaults but for the values
    tried), so the CLI and the web refuse them, each in its own names, instead of ignoring them."""
    return [k for k in spec.engine if k not in DEPLOYMENT_KEYS] + (["tp"] if spec.tp is not None else [])


def compare(request: LayoutsRequest) -> LayoutsAnswer:
    """Simulate every layout of the budget, recommend one, re-run it on fresh seeds against the
    other kind's best and find the break-even bandwidth. The link and the deployment are checked
    before the trace is read."""
    from servesim.cluster.pd import link_preset
    from servesim.tuning.layouts import LayoutRunner, compare_layouts
    from servesim.tuning.workload import fresh_seeds

    spec = request.deployment
    if spec.fixed_timing and (spec.model is not None or spec.gpu is not None):
        raise ConfigError(
            "a model and GPU time the steps by the roofline; a fixed or linear step time replaces "
            "them: give one or the other"
        )
    refused = refused_keys(spec)
    if refused:
        raise ConfigError(
            f"a layout search runs every pool at vllm serve's defaults and searches TP: drop "
            f"{', '.join(refused)} (of the vLLM keys only {', '.join(DEPLOYMENT_KEYS)} are kept)"
        )
    check_names(spec)
    link_preset(request.link)  # an unknown link is refused before anything runs
    caps: Mapping[str, float] = request.slo.caps() if request.slo is not None else {}
    trace = request.trace.open()
    workload = workload_of(request.trace)
    runner = LayoutRunner(
        trace,
        model=spec.model or DEFAULT_LAYOUT_MODEL,
        gpu=spec.gpu,
        step_time_ms=spec.step_time_ms,
        linear_step_time=spec.linear_step_time,
        link=request.link,
        short_prompt_tokens=request.short_prompt_tokens,
        ttft_ms=caps.get("ttft"),
        tpot_ms=caps.get("tpot"),
        engine={k: spec.engine[k] for k in DEPLOYMENT_KEYS if k in spec.engine},
    )
    answer = compare_layouts(
        runner,
        request.gpus,
        request.layouts,
        prefill_batched_tokens=_values(request.prefill_batched_tokens),
        decode_max_seqs=_values(request.decode_max_seqs),
        break_even=request.break_even,
        fresh=lambda s: runner.with_trace(workload.trace(None, s)),
        verify_seeds=fresh_seeds(request.verify_seeds),
    )
    return LayoutsAnswer(request, answer, len(trace))


def _values(given: list[int]) -> list[int | None]:
    """The pool's values to try, in order without repeats (none given: vllm serve's default)."""
    return list(dict.fromkeys(given)) if given else [None]


__all__ = [
    "DEFAULT_LAYOUT_KINDS",
    "DEFAULT_LAYOUT_MODEL",
    "DEPLOYMENT_KEYS",
    "LAYOUT_KINDS",
    "LayoutAnswer",
    "LayoutKind",
    "LayoutsAnswer",
    "LayoutsRequest",
    "compare",
    "refused_keys",
]
