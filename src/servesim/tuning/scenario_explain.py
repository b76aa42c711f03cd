"""Why a load scenario's answer is what it is, and what is missing when no flag helps.

``explain_load`` turns the load scenario's measured runs into structured ``Reason`` items (the
chosen ``max_num_seqs`` against ``vllm serve``'s default, chunked prefill against its opposite),
and ``scenario_capacity`` answers an overload with capacity instead of a flag: the fewest replicas
(each with the scenario's KV cache) and the fewest KV blocks on one replica that give a stable
queue at the scenario's rate, both found by doubling then bisecting.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from servesim.engine import EngineConfig
from servesim.errors import InternalError
from servesim.traces.schema import Trace
from servesim.tuning.deployment import Deployment
from servesim.tuning.evaluate import EvalSettings, RunMetrics, run_once
from servesim.tuning.hardware import PerfHardware
from servesim.tuning.reasons import Effect, Reason, latency_effects


class ScenarioCapacity(BaseModel):
    """What makes an overloaded load scenario stable: more replicas, or more KV on one."""

    replicas: int | None = Field(description="Fewest replicas (each with the given KV blocks); None: > cap.")
    replicas_tried: list[tuple[int, str]] = Field(description="(replicas, status), in order.")
    replicas_ttft_p99_ms: float | None = Field(description="TTFT p99 with that many replicas.")
    kv_blocks: int | None = Field(description="Fewest usable KV blocks on one replica; None: no amount does.")
    kv_blocks_tried: list[tuple[int, str]] = Field(description="(usable blocks, status), in order.")
    kv_ttft_p99_ms: float | None = Field(description="TTFT p99 with that many blocks.")
    service_rps: float = Field(description="Requests per second the given replica completed (steady state).")


def _fewest(check: Callable[[int], bool], start: int, cap: int, rel: float = 0.0) -> int | None:
    """The smallest n in (start, cap] with check(n), assuming it flips once (doubling, then
    bisection down to ``rel`` of n; 0: exact)."""
    lo, n, hi = start, start, None
    while n < cap:
        n = min(cap, max(n + 1, 2 * n))
        if check(n):
            hi = n
            break
        lo = n
    if hi is None:
        return None
    while hi - lo > max(1, int(rel * hi)):
        mid = (lo + hi) // 2
        if check(mid):
            hi = mid
        else:
            lo = mid
    return hi


def scenario_capacity(
    trace: Trace,
    config: EngineConfig,
    hw: PerfHardware,
    ev: EvalSettings,
    base: RunMetrics,
    *,
    max_replicas: int = 32,
    max_blocks_factor: int = 64,
) -> ScenarioCapacity:
    """Replicas and KV blocks that give a STABLE status at the scenario's rate."""
    if not (config.max_model_len is not None and hw.num_gpu_blocks is not None):
        raise InternalError(
            "invariant broken: config.max_model_len is not None and hw.num_gpu_blocks is not None"
        )
    d = Deployment.from_engine_config(config, max_model_len=config.max_model_len)
    runs: dict[tuple[str, int], RunMetrics] = {}

    def by_replicas(n: int) -> bool:
        m = run_once(trace, d.model_copy(update={"replicas": n}), hw, None, ev)
        runs[("r", n)] = m
        return m.status == "STABLE"

    def by_blocks(usable: int) -> bool:
        more = hw.model_copy(update={"num_gpu_blocks": usable + 1})
        m = run_once(trace, d, more, None, ev)
        runs[("b", usable)] = m
        return m.status == "STABLE"

    blocks = hw.num_gpu_blocks - 1
    reps = _fewest(by_replicas, 1, max_replicas)
    kv = _fewest(by_blocks, blocks, blocks * max_blocks_factor, rel=0.05)
    return ScenarioCapacity(
        replicas=reps,
        replicas_tried=[(k, m.status) for (kind, k), m in sorted(runs.items()) if kind == "r"],
        replicas_ttft_p99_ms=runs[("r", reps)].ttft_ms.p99 if reps is not None else None,
        kv_blocks=kv,
        kv_blocks_tried=[(k, m.status) for (kind, k), m in sorted(runs.items()) if kind == "b"],
        kv_ttft_p99_ms=runs[("b", kv)].ttft_ms.p99 if kv is not None else None,
        service_rps=base.throughput_rps,
    )


def explain_load(
    sweep: list[tuple[int, RunMetrics]],
    baseline_seqs: int,
    chosen_seqs: int,
    chunked: bool,
    on: RunMetrics,
    off: RunMetrics,
    holds: int,
    capacity: ScenarioCapacity | None,
    rate: float,
    blocks: int,
    prompt_facts: dict[str, float | int],
    tolerance: dict[str, float | str] | None = None,
) -> list[Reason]:
    """The scenario's answers as measured statements (rendered by ``servesim.views.tuning``)."""
    runs = dict(sweep)
    base = runs[baseline_seqs]
    mine = runs[chosen_seqs]
    out = [
        Reason(
            kind="ablation",
            knob="max_num_seqs",
            value=chosen_seqs,
            alternative=baseline_seqs,
            against="baseline",
            effects=latency_effects(mine.p99(), dict(base.p99())),
            alternative_status=base.status,
            facts={
                "mean_running": mine.mean_running,
                "sequences_the_cache_holds": holds,
                "rule": "smallest power of two whose TTFT p99 is within the step-time model's measured "
                "error of vllm serve's default",
                "sweep": ", ".join(f"{k}: {m.ttft_ms.p99:,.0f} ms" for k, m in sweep),
                **(tolerance or {}),
            },
        ),
        Reason(
            kind="ablation",
            knob="enable_chunked_prefill",
            value=chunked,
            alternative=not chunked,
            against="ablation",
            effects=latency_effects((on if chunked else off).p99(), dict((off if chunked else on).p99())),
            alternative_status=(off if chunked else on).status,
            facts={
                **prompt_facts,
                "rule": "on unless off lowers both TTFT p99 and TPOT p99 by more than 2 %",
            },
        ),
    ]
    if capacity is not None:
        out.append(
            Reason(
                kind="capacity",
                knob="replicas",
                value=capacity.replicas,
                alternative=1,
                against="capacity",
                effects=[
                    Effect.of("ttft_p99_ms", capacity.replicas_ttft_p99_ms, base.ttft_ms.p99),
                ],
                facts={
                    "flags_gpus": 1,
                    "gpus": capacity.replicas,
                    "found": capacity.replicas is not None,
                    "max_replicas": 32,
                    "tried": ", ".join(f"{k}:{v}" for k, v in capacity.replicas_tried),
                    "rate_rps": rate,
                    "service_rps": capacity.service_rps,
                    "kv_blocks_given": blocks,
                    "kv_blocks_needed": capacity.kv_blocks,
                    "criterion": "keep the queue stable",
                },
            )
        )
    return out
