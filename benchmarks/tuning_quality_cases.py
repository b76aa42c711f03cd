"""The cases of ``tuning_quality.py``: traffic, SLO, the user's configuration and a small space.

Every case is Llama-3.1-8B on H100 (the roofline step model, KV sized as vLLM sizes it), a few
hundred requests so that the exhaustive grid stays affordable. ``FlagCase``: the flag/replica
question (``servesim tune`` then ``recommend`` against the user's configuration, vLLM's defaults
when ``config`` is empty). ``LayoutCase``: the layouts question (``tune --layouts --gpus``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servesim.traces import GeneratorSpec, LogNormalLength, PoissonArrivals, Trace, load_trace
from servesim.traces.arrivals import DiurnalArrivals, GammaArrivals, OnOffArrivals
from servesim.tuning import PercentileSLO, Workload

LOOSE = "ttft_p99_ms=2000,tpot_p99_ms=100"
TIGHT = "ttft_p99_ms=500,tpot_p99_ms=50"

#: The space every flag case searches unless it says otherwise (the baseline's values are added).
SPACE: dict[str, list[Any]] = {
    "max_num_seqs": [64],
    "max_num_batched_tokens": [2048],
    "enable_chunked_prefill": [True, False],
    "long_prefill_token_threshold": [0],
    "enable_prefix_caching": [True],
    "block_size": [16],
    "gpu_memory_utilization": [0.9],
    "tensor_parallel_size": [1],
    "replicas": [1, 2, 3, 4],
    "queue_timeout_s": [None],
}


@dataclass(frozen=True)
class FlagCase:
    name: str
    traffic: str
    workload: Workload
    slo: str
    config: dict[str, Any] = field(default_factory=dict)
    space: dict[str, list[Any]] = field(default_factory=lambda: dict(SPACE))

    @property
    def goal(self) -> PercentileSLO:
        return PercentileSLO.parse(self.slo)


@dataclass(frozen=True)
class LayoutCase:
    name: str
    traffic: str
    workload: Workload
    slo: str
    gpus: int
    tps: tuple[int, ...] = (1, 2)

    @property
    def goal(self) -> PercentileSLO:
        return PercentileSLO.parse(self.slo)


def synth(
    name: str,
    n: int,
    arrival: Any,
    prompt: float = 1200,
    output: float = 150,
    prompt_max: int = 8192,
) -> Workload:
    return Workload.from_spec(
        GeneratorSpec(
            name=name,
            num_requests=n,
            arrival=arrival,
            prompt=LogNormalLength(mean=prompt, sigma=0.6, max=prompt_max),
            output=LogNormalLength(mean=output, sigma=0.8, max=2048),
        )
    )


def gamma(rate: float) -> GammaArrivals:
    """Bursty: gaps with CV 2 (vLLM's --burstiness 0.25), as the ``bursty`` preset."""
    return GammaArrivals(rate=rate, burstiness=0.25)


def diurnal(rate: float) -> DiurnalArrivals:
    """A rate swinging ±80 % around ``rate`` with a 20 s period (a few cycles per trace)."""
    return DiurnalArrivals(mean_rate=rate, amplitude=0.8, period_s=20.0)


def head(source: str, n: int) -> Workload:
    t = load_trace(source)
    return Workload.from_trace(
        Trace(t.df.head(n).reset_index(drop=True), t.provenance), name=f"{source}[:{n}]"
    )


def flag_cases(n: int) -> list[FlagCase]:
    """20 flag cases: bursty and diurnal traffic, baselines that need more replicas, cases where
    one change suffices or none is needed, long prompts, the users' own configurations."""
    onoff = OnOffArrivals(rate_on=30, rate_off=1, mean_on_s=5, mean_off_s=5)
    lp2 = synth("lp2", n, PoissonArrivals(rate=2), 6000, 100, 16000)
    lp5 = synth("lp5", n, PoissonArrivals(rate=5), 6000, 100, 16000)
    c512 = synth("c512", n, PoissonArrivals(rate=2), 6000, 100, 16000)
    lng = {**SPACE, "max_num_batched_tokens": [2048, 16384]}
    b8, b30 = synth("c8", n, gamma(8)), synth("c2r", n, gamma(30))
    small_budget = {"max_num_seqs": 256, "max_num_batched_tokens": 512}
    return [
        FlagCase("poisson-4 keep", "poisson", synth("p4", n, PoissonArrivals(rate=4)), TIGHT),
        FlagCase("poisson-12", "poisson", synth("p12", n, PoissonArrivals(rate=12)), TIGHT),
        FlagCase("poisson-24", "poisson", synth("p24", n, PoissonArrivals(rate=24)), TIGHT),
        FlagCase("bursty-8", "bursty", synth("b8", n, gamma(8)), TIGHT),
        FlagCase("bursty-16", "bursty", synth("b16", n, gamma(16)), TIGHT),
        FlagCase("bursty-30", "bursty", synth("b30", n, gamma(30)), TIGHT),
        FlagCase("bursty-40 (issue 46)", "bursty", synth("b40", n, gamma(40)), TIGHT),
        FlagCase("bursty-30 loose", "bursty", synth("b30l", n, gamma(30)), LOOSE),
        FlagCase("diurnal-8", "diurnal", synth("d8", n, diurnal(8)), TIGHT),
        FlagCase("diurnal-20", "diurnal", synth("d20", n, diurnal(20)), TIGHT),
        FlagCase("diurnal-20 loose", "diurnal", synth("d20l", n, diurnal(20)), LOOSE),
        FlagCase("onoff", "bursty", synth("onoff", n, onoff), TIGHT),
        FlagCase("long-prompt-2", "long prompts", lp2, TIGHT, space=lng),
        FlagCase("long-prompt-5", "long prompts", lp5, TIGHT, space=lng),
        FlagCase("azure-conv", "recorded", head("azure-conv", n), TIGHT),
        FlagCase("azure-code", "recorded", head("azure-code", n), TIGHT),
        FlagCase("seqs-8 config, bursty-8", "user config", b8, TIGHT, {"max_num_seqs": 8}),
        FlagCase("budget-512 config, long", "user config", c512, TIGHT, small_budget, lng),
        FlagCase(
            "3 replicas config, poisson-4", "user config", synth("c3r", n, PoissonArrivals(rate=4)), TIGHT,
            {"replicas": 3},
        ),
        FlagCase("2 replicas config, bursty-30", "user config", b30, TIGHT, {"replicas": 2}),
    ]  # fmt: skip


def layout_cases(n: int) -> list[LayoutCase]:
    """The layouts question: how few GPUs, which layout (agg / disagg, TP)."""
    ll4 = synth("ll4", n, PoissonArrivals(rate=4), 6000, 100, 16000)
    p10 = synth("lp10", n, PoissonArrivals(rate=10))
    return [
        LayoutCase("layouts bursty-30, 4 GPUs", "bursty", synth("lb30", n, gamma(30)), TIGHT, 4),
        LayoutCase("layouts poisson-10, 2 GPUs", "poisson", p10, TIGHT, 2),
        LayoutCase("layouts long-prompt-4, 4 GPUs", "long prompts", ll4, TIGHT, 4),
    ]  # fmt: skip
