"""Cutting ``hash_ids`` to the prefix other requests share changes nothing: the blocks past it
hold content no other request can hit, so keying them as unique (cheap) instead of by their
hash chain gives exactly the same prefix hits, evictions, schedule and records."""

from __future__ import annotations

from typing import Any

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import configs, examples, step_models

from servesim.engine import SimulationResult
from servesim.engine.engine import Engine, TraceArrays
from servesim.engine.kv_cache_manager import shared_id_prefixes
from servesim.engine.simulate import build_result
from servesim.traces.schema import Trace


def test_shared_prefix_counts_are_hand_worked() -> None:
    ids = [[1, 2, 3], [1, 2, 4], [1, 5], [7, 8], None, [1, 2, 3, 9]]
    prompts = [24, 24, 16, 16, 8, 20]  # hash block of 8 tokens; the last prompt covers 3 ids only
    # [1,2,3] is also the start of the last request; [1,2] of the second; [7,8] nobody else's.
    assert shared_id_prefixes(ids, prompts, 8) == [3, 2, 1, 0, 0, 3]


@settings(max_examples=examples(300), deadline=None)
@given(
    ids=st.lists(st.one_of(st.none(), st.lists(st.integers(0, 3), max_size=6)), max_size=12),
    data=st.data(),
)
def test_shared_prefix_counts_match_every_pair_compared(
    ids: list[list[int] | None], data: st.DataObject
) -> None:
    """By definition: the longest run of leading ids (those inside the prompt) that the request
    has in common with any one other request."""
    prompts = [data.draw(st.integers(1, 60)) for _ in ids]

    def described(i: int) -> list[int]:
        got = ids[i]
        return [] if got is None else got[: -(-prompts[i] // 8)]

    def common(a: list[int], b: list[int]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    expected = [
        max((common(described(i), described(k)) for k in range(len(ids)) if k != i), default=0)
        for i in range(len(ids))
    ]
    assert shared_id_prefixes(ids, prompts, 8) == expected


@st.composite
def hash_id_traces(draw: st.DrawFn) -> Trace:
    """Small traces whose prompts mix ids that repeat across requests with ids unique to one."""
    rows: list[dict[str, Any]] = []
    t = 0.0
    unique = 1000
    for i in range(draw(st.integers(1, 25))):
        t += draw(st.floats(0.0, 0.2))
        prompt = draw(st.integers(1, 400))
        k = draw(st.integers(0, prompt // 8 + 1))
        ids = draw(st.lists(st.integers(0, 2), min_size=k, max_size=k))
        cut = draw(st.integers(0, k))
        ids[cut:] = range(unique, unique + k - cut)
        unique += k
        rows.append(
            {
                "req_id": f"q{i}",
                "arrival_time_s": round(t, 4),
                "prompt_len": prompt,
                "output_len": draw(st.integers(1, 60)),
                "priority": draw(st.integers(0, 2)),
                "hash_ids": ids,
            }
        )
    return Trace.from_records(rows, source="hypothesis", hash_block_size=8)


def run(
    trace: Trace, config: Any, model: Any, trim: bool, fast: bool
) -> tuple[SimulationResult, list[dict[str, Any]]]:
    log: list[dict[str, Any]] = []
    engine = Engine(
        TraceArrays(trace, trim_hash_ids=trim),
        config,
        model,
        fast=fast,
        step_log=log.append,
        check_invariants=True,
    )
    engine.run()
    return build_result(engine, trace, None, {}), log


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_cutting_unshared_hash_ids_changes_nothing(data: st.DataObject) -> None:
    trace = data.draw(hash_id_traces())
    config = data.draw(configs(trace)).model_copy(update={"enable_prefix_caching": True})
    model = data.draw(step_models)
    fast = data.draw(st.booleans())
    whole, whole_log = run(trace, config, model, trim=False, fast=fast)
    cut, cut_log = run(trace, config, model, trim=True, fast=fast)
    assert cut_log == whole_log
    pd.testing.assert_frame_equal(cut.requests, whole.requests)
    pd.testing.assert_frame_equal(cut.steps, whole.steps)
    pd.testing.assert_frame_equal(cut.preemptions, whole.preemptions)
    assert cut.summary == whole.summary
