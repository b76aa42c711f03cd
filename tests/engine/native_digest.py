"""Run by test_native_core.py in a subprocess: simulate a fixed set of runs and print one digest
of every byte they produce (records, step series, preemptions, summary, step log).

The runs are hypothesis-drawn (derandomized, so every process draws the same ones) plus two
larger generated traces, one with shared prefixes and a tight KV pool (preemptions), so the
compiled core and the pure-Python reference can be compared byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import configs, step_models, traces

from servesim.engine import EngineConfig, LinearStepTime, SimulationResult, _native, simulate
from servesim.traces import FixedLength, GeneratorSpec, PoissonArrivals, generate_trace
from servesim.traces.adapters import LoRASpec
from servesim.traces.prefixes import PrefixSpec

DIGEST = hashlib.sha256()


def same_draws_on_both_cores() -> None:
    """Hypothesis mixes the literals of the local modules it finds loaded into what it draws
    (``hypothesis.internal.constants_ast``): it reads the pure-Python core's ``.py`` modules but
    not the compiled core's extensions, so the two processes would draw different runs as soon as
    an engine module gains a constant. Both draw with none (an empty pool), the same runs."""
    from hypothesis.internal.conjecture import providers

    assert hasattr(providers, "_get_local_constants"), "hypothesis changed: pin its constant pool anew"
    providers._get_local_constants = providers.Constants  # type: ignore[attr-defined]


def absorb(result: SimulationResult, log: list[dict[str, object]]) -> None:
    for frame in (result.requests, result.steps, result.preemptions):
        DIGEST.update(frame.to_csv(index=False, float_format="%.17g").encode())
    DIGEST.update(result.summary.model_dump_json().encode())
    DIGEST.update(json.dumps(log, sort_keys=True, default=str).encode())


@settings(
    max_examples=60, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)
@given(data=st.data())
def drawn_runs(data: st.DataObject) -> None:
    trace = data.draw(traces())
    config = data.draw(configs(trace))
    model = data.draw(step_models)
    fast = data.draw(st.booleans())
    log: list[dict[str, object]] = []
    absorb(simulate(trace, config, model, fast=fast, step_log=log.append), log)


def generated_runs() -> None:
    """1,000 requests: the pure-Python core runs the same servesim lines and line-to-line arcs
    (1,798 lines, 2,088 arcs, traced) for these six runs at 1,000 requests as at 3,000, the size
    this had before (27 of the test's 87 CPU-s on the 2-core machine); the tight pool preempts
    at either size. The LoRA runs below lose a line of engine.py below 800 requests: 800 stay."""
    spec = GeneratorSpec(
        num_requests=1000,
        seed=7,
        arrival=PoissonArrivals(rate=40.0),
        prefix=PrefixSpec(num_groups=8, prefix_len=FixedLength(value=700), fraction=0.6),
    )
    trace = generate_trace(spec)
    for config in (
        EngineConfig(num_gpu_blocks=30_000, max_num_seqs=256, max_num_batched_tokens=8192),
        EngineConfig(num_gpu_blocks=900, max_num_seqs=64, max_num_batched_tokens=2048, policy="priority"),
        # async scheduling (async_steps.py runs on either core's objects), preemptions included
        EngineConfig(num_gpu_blocks=900, max_num_seqs=64, max_num_batched_tokens=2048, async_scheduling=True),
    ):
        for fast in (True, False):
            log: list[dict[str, object]] = []
            absorb(simulate(trace, config, LinearStepTime(), fast=fast, step_log=log.append), log)


def speculative_runs() -> None:
    """Speculative decoding with the drafter on its own roofline (an EAGLE-3 head, a draft model)
    and as a fraction of the target's step: the engine's drafter hook in both cores."""
    import warnings

    from servesim.perf.roofline import build_step_time_model

    trace = generate_trace(GeneratorSpec(num_requests=400, seed=3, arrival=PoissonArrivals(rate=30.0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = build_step_time_model("llama-3.1-8b", "h100", max_num_seqs=64, max_num_batched_tokens=1024)
    for spec in (
        {"method": "eagle3", "num_speculative_tokens": 3},
        {"method": "draft_model", "model": "llama-3.2-1b", "num_speculative_tokens": 2},
        {"method": "eagle", "num_speculative_tokens": 4, "draft_step_fraction": 0.05},
    ):
        config = EngineConfig(
            num_gpu_blocks=4000, max_num_seqs=64, max_num_batched_tokens=1024, speculative_config=spec
        )
        log: list[dict[str, object]] = []
        absorb(simulate(trace, config, model, step_log=log.append), log)
    # async scheduling's speculative placeholders (async_steps.py on either core's objects), and
    # the EAGLE hash lookahead over shared prefixes under KV pressure
    shared = generate_trace(
        GeneratorSpec(
            num_requests=300,
            seed=5,
            arrival=PoissonArrivals(rate=30.0),
            prefix=PrefixSpec(num_groups=4, prefix_len=FixedLength(value=256), fraction=0.7),
        )
    )
    eagle3 = {"method": "eagle3", "num_speculative_tokens": 3}
    for t, config in (
        (
            trace,
            EngineConfig(
                num_gpu_blocks=900, max_num_seqs=64, async_scheduling=True, speculative_config=eagle3
            ),
        ),
        (
            shared,
            EngineConfig(
                num_gpu_blocks=900,
                max_num_seqs=64,
                speculative_config={"method": "mtp", "num_speculative_tokens": 1},
            ),
        ),
        (shared, EngineConfig(num_gpu_blocks=900, async_scheduling=True, speculative_config=eagle3)),
    ):
        log = []
        absorb(simulate(t, config, model, step_log=log.append), log)


def lora_runs() -> None:
    """LoRA adapters under max_loras (the waiting loop's skips), with prefix groups shared across
    adapters (keys per adapter) and KV pressure (a preempted request frees its adapter's slot)."""
    trace = generate_trace(
        GeneratorSpec(
            num_requests=800,
            seed=11,
            arrival=PoissonArrivals(rate=40.0),
            prefix=PrefixSpec(num_groups=4, prefix_len=FixedLength(value=300), fraction=0.6),
            lora=LoRASpec(num_adapters=6, zipf_s=1.0, fraction=0.8),
        )
    )
    for config in (
        EngineConfig(enable_lora=True, max_loras=2, num_gpu_blocks=900, max_num_seqs=64),
        EngineConfig(enable_lora=True, max_loras=3, num_gpu_blocks=30_000, policy="priority"),
        EngineConfig(enable_lora=True, max_loras=1, num_gpu_blocks=900, async_scheduling=True),
    ):
        for fast in (True, False):
            log: list[dict[str, object]] = []
            absorb(simulate(trace, config, LinearStepTime(), fast=fast, step_log=log.append), log)


if __name__ == "__main__":
    same_draws_on_both_cores()
    drawn_runs()
    generated_runs()
    speculative_runs()
    lora_runs()
    json.dump({"core": _native.core(), "digest": DIGEST.hexdigest()}, sys.stdout)
