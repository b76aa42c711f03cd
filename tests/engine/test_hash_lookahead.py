"""EAGLE/EAGLE-3/MTP with prefix caching: vLLM 0.33 hashes each block with the token after it.

``VllmConfig.num_hash_lookahead_tokens`` is 1 for an EAGLE-style drafter with prefix caching
(``get_request_block_hasher`` adds block end's next token to the hash's extra keys), so a block
is shared only when that token is shared too, and is hashed only once that token exists. The
oracle cases (``test_oracle_eagle_cases.py``, ``_prefix``) check it against vLLM on prefix
groups; here the key derivation is worked by hand, and the ``hash_ids`` path is held to the
prefix-group path on the same content.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples

from servesim.engine import ConstantStepTime, EngineConfig
from servesim.engine.block_pool import BlockPool
from servesim.engine.engine import Engine, TraceArrays
from servesim.engine.kv_cache_manager import KVCacheManager, hash_id_keys
from servesim.engine.request import Request
from servesim.engine.speculative import SpeculativeConfig
from servesim.traces.schema import Trace


def test_only_eagle_style_drafters_with_prefix_caching_hash_the_next_token() -> None:
    for method, want in (("eagle", 1), ("eagle3", 1), ("mtp", 1), ("ngram", 0)):
        spec = SpeculativeConfig(method=method, num_speculative_tokens=3)
        assert spec.num_hash_lookahead_tokens(True) == want
        assert spec.num_hash_lookahead_tokens(False) == 0
    draft = SpeculativeConfig(method="draft_model", num_speculative_tokens=3, model="llama-3.2-1b")
    assert draft.num_hash_lookahead_tokens(True) == 0


def test_hash_id_keys_with_a_lookahead_are_hand_worked() -> None:
    # 32-token ids, 16-token blocks, 64-token prompts: blocks 0-3. Without the lookahead block 1
    # (tokens 16..31) is described by id 0 alone; with it, by ids 0 and 1 (token 32 is id 1's).
    a, b = [5, 6], [5, 7]
    assert hash_id_keys(a, 32, 16, 64)[:2] == hash_id_keys(b, 32, 16, 64)[:2]
    la, lb = hash_id_keys(a, 32, 16, 64, 1), hash_id_keys(b, 32, 16, 64, 1)
    assert len(la) == 3  # block 3's next token is past the prompt: not yet hashable
    assert la[0] == lb[0] and la[1] != lb[1] and la[2] != lb[2]


def test_a_group_prefix_shares_one_block_less_when_it_ends_on_a_boundary() -> None:
    kv = KVCacheManager(BlockPool(100, True), 16, 4096, 0.0)
    r = Request(0, "r", 0.0, 100, 10, group=0, prefix_len=64)
    kv.init_request(r)
    assert r.num_shared_blocks == 4
    kv.hash_lookahead = 1
    kv.init_request(r)
    assert r.num_shared_blocks == 3  # block 3's next token (64) is the request's own
    r2 = Request(1, "s", 0.0, 100, 10, group=0, prefix_len=65)
    kv.init_request(r2)
    assert r2.num_shared_blocks == 4


@st.composite
def prefix_traces(draw: st.DrawFn) -> tuple[Trace, Trace]:
    """One workload twice: shared prefixes as prefix groups, and as ``hash_ids`` (8-token ids,
    the group's ids over its prefix, ids unique to the request after it)."""
    groups, ids = [], []
    unique = 1000
    t = 0.0
    for i in range(draw(st.integers(1, 14))):
        t += draw(st.floats(0.0, 0.2))
        g = draw(st.sampled_from([0, 1]))
        prompt = draw(st.integers(9, 300))
        plen = 8 * draw(st.integers(1, (prompt - 1) // 8))
        row: dict[str, Any] = {
            "req_id": f"q{i}",
            "arrival_time_s": round(t, 4),
            "prompt_len": prompt,
            "output_len": draw(st.integers(1, 40)),
        }
        groups.append({**row, "prefix_group": f"g{g}", "prefix_len": plen})
        tail = -(-(prompt - plen) // 8)
        ids.append(
            {**row, "hash_ids": [100 * g + j for j in range(plen // 8)] + list(range(unique, unique + tail))}
        )
        unique += tail
    return (
        Trace.from_records(groups, source="hypothesis"),
        Trace.from_records(ids, source="hypothesis", hash_block_size=8),
    )


def _log(trace: Trace, config: EngineConfig) -> list[dict[str, Any]]:
    log: list[dict[str, Any]] = []
    Engine(
        TraceArrays(trace, trim_hash_ids=False),  # every id keyed: the keys past the prefix too
        config,
        ConstantStepTime(step_time_s=0.01),
        fast=False,
        step_log=log.append,
        check_invariants=True,
    ).run()
    return log


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=prefix_traces(), bs=st.sampled_from([4, 8, 16]), spare=st.integers(1, 300), k=st.integers(1, 4))
def test_hash_ids_and_prefix_groups_agree_under_eagle(
    pair: tuple[Trace, Trace], bs: int, spare: int, k: int
) -> None:
    """The lookahead keys of ``hash_ids`` (the next id joins a block's key) give the same hits,
    evictions and schedule as the prefix-group keys (a block is shared when its next token is)."""
    groups, ids = pair
    longest = int((groups.df["prompt_len"] + groups.df["output_len"]).max()) + 1
    config = EngineConfig(
        block_size=bs,
        num_gpu_blocks=-(-longest // bs) + spare,  # short of blocks at times: evictions, preemptions
        max_num_seqs=8,
        max_num_batched_tokens=256,
        enable_prefix_caching=True,
        speculative_config={"method": "eagle", "num_speculative_tokens": k, "draft_step_fraction": 0.0},
    )
    assert _log(groups, config) == _log(ids, config)
