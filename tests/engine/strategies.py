"""Hypothesis strategies for engine tests: small random traces and valid engine configs."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import strategies as st

from servesim.engine import ConstantStepTime, EngineConfig, LinearStepTime
from servesim.traces.schema import Trace

#: ``make unit``'s second pass over tests/engine (SERVESIM_PURE_PYTHON=1, the reference core).
PURE_PASS = os.environ.get("SERVESIM_PURE_PYTHON", "").strip() not in ("", "0")


def examples(n: int) -> int:
    """The examples a heavy property test draws: ``n``, and a quarter of them on the pure-Python
    pass. That pass re-checks the same properties on the reference core, which is ~10x slower
    (these three tests took 5 of its 8 minutes); test_native_core.py compares the two cores byte
    for byte on 60 drawn runs and larger traces besides. The draws are derandomized: the same on
    every run of a pass."""
    return max(10, n // 4) if PURE_PASS else n


@st.composite
def traces(draw: st.DrawFn, max_requests: int = 30, max_prompt: int = 600, max_output: int = 80) -> Trace:
    n = draw(st.integers(0, max_requests))
    use_groups = draw(st.booleans())
    use_hash_ids = not use_groups and draw(st.booleans())
    tie_arrivals = draw(st.booleans())
    rows: list[dict[str, Any]] = []
    t = 0.0
    for i in range(n):
        t += 0.0 if tie_arrivals and draw(st.booleans()) else draw(st.floats(0.0, 0.3))
        prompt = draw(st.integers(1, max_prompt))
        row: dict[str, Any] = {
            "req_id": f"q{i}",
            "arrival_time_s": round(t, 4),
            "prompt_len": prompt,
            "output_len": draw(st.integers(1, max_output)),
            "priority": draw(st.integers(0, 2)),
        }
        if use_groups and prompt > 1 and draw(st.booleans()):
            row["prefix_group"] = draw(st.sampled_from(["a", "b"]))
            row["prefix_len"] = draw(st.integers(1, prompt - 1))
        if use_hash_ids:
            k = draw(st.integers(0, prompt // 8 + 1))
            row["hash_ids"] = draw(st.lists(st.integers(0, 3), min_size=k, max_size=k))
        if draw(st.integers(0, 9)) == 0:
            row["sla_ttft_ms"] = draw(st.floats(1.0, 5000.0))
        rows.append(row)
    return Trace.from_records(rows, source="hypothesis", hash_block_size=8 if use_hash_ids else None)


@st.composite
def configs(draw: st.DrawFn, trace: Trace) -> EngineConfig:
    df = trace.df
    longest = int((df["prompt_len"] + df["output_len"]).max()) + 1 if len(df) else 64
    bs = draw(st.sampled_from([1, 4, 8, 16, 32]))
    capped = draw(st.booleans())
    mml = draw(st.integers(2, longest)) if capped else longest
    chunked = draw(st.booleans())
    seqs = draw(st.integers(1, 16))
    budget = draw(st.integers(max(seqs, 1), 1024))
    if not chunked:
        budget = max(budget, mml)
    need = -(-mml // bs)
    blocks = need + 1 + draw(st.integers(0, 3 * need + 8))
    return EngineConfig(
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        block_size=bs,
        num_gpu_blocks=blocks,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=draw(st.booleans()),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 1, 7, 64])),
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        max_model_len=mml if capped else None,
        watermark=draw(st.sampled_from([0.0, 0.0, 0.05])),
        scheduler_reserve_full_isl=draw(st.booleans()),
        queue_timeout_s=draw(st.sampled_from([None, None, 0.5, 3.0])),
        starvation_threshold=draw(st.integers(1, 4)),
        starvation_mitigation=draw(st.sampled_from(["none", "none", "protect", "boost"])),
    )


step_models = st.one_of(
    st.builds(ConstantStepTime, step_time_s=st.sampled_from([0.015625, 0.01, 0.05])),
    st.builds(
        LinearStepTime,
        base_s=st.floats(1e-3, 2e-2),
        per_token_s=st.floats(0, 1e-4),
        per_decode_ctx_s=st.floats(0, 1e-6),
        per_prefill_attn_s=st.floats(0, 1e-8),
    ),
)


@st.composite
def connector_factories(draw: st.DrawFn, trace: Trace, config: EngineConfig, step_s: float) -> Any:
    """A KV connector, drawn once and built afresh per run (connectors keep per-run state): the
    CPU offload tier (small tiers refuse stores and evict; loads and stores of 0-3 steps or over a
    host link) or P/D (a random subset of decode legs whose prompt KV arrives 0-4 steps after
    admission, prefill legs whose blocks stay held 0-8 steps after they finish)."""
    from servesim.engine.kv_connector import HostLinkTiming, OffloadingConnector, StepCountTiming
    from servesim.engine.kv_pd import PDConnector

    n = len(trace.df)
    if draw(st.booleans()):
        chunks = draw(st.integers(0, 64))
        bpc = draw(st.integers(1, 2))
        host = draw(st.booleans())
        load, store = draw(st.integers(0, 3)), draw(st.integers(0, 3))
        link = (
            draw(st.sampled_from([1 << 14, 1 << 18])),
            draw(st.floats(1e6, 1e9)),
            draw(st.floats(0, 1e-3)),
        )

        def offload() -> OffloadingConnector:
            timing = HostLinkTiming(*link) if host else StepCountTiming(step_s, load, store)
            return OffloadingConnector(chunks, timing, config.block_size, bpc, config.enable_prefix_caching)

        return offload
    legs = draw(st.lists(st.sampled_from(["local", "decode", "prefill"]), min_size=n, max_size=n))
    load, send = draw(st.integers(0, 4)), draw(st.integers(0, 8))

    def pd() -> PDConnector:
        return PDConnector(
            StepCountTiming(step_s, load),
            {i for i, leg in enumerate(legs) if leg == "decode"},
            {i for i, leg in enumerate(legs) if leg == "prefill"},
            send_steps=send,
            step_s=step_s,
        )

    return pd
