"""Speculative decoding: the config as vLLM spells it, the acceptance model, and what a run gives.

The schedule itself is checked against vLLM's scheduler in test_oracle_spec_cases.py; here the
acceptance draws (closed form of the chain), the step-level accounting (tokens emitted = 1 +
accepted, drafts in the budget) and the figures users read.
"""

from __future__ import annotations

import pytest

from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.engine.request import Request
from servesim.engine.speculative import AcceptanceModel, SpeculativeConfig
from servesim.errors import ConfigError, describe
from servesim.traces.schema import Trace


def _trace(n: int = 12, out: int = 40) -> Trace:
    return Trace.from_records(
        [
            {"req_id": f"r{i}", "arrival_time_s": 0.01 * i, "prompt_len": 50 + 7 * i, "output_len": out}
            for i in range(n)
        ],
        source="t",
    )


def test_vllm_json_form_and_derived_slots() -> None:
    cfg = EngineConfig(speculative_config='{"method": "eagle3", "num_speculative_tokens": 3}')
    sp = cfg.speculative_config
    assert sp is not None and sp.method == "eagle3" and sp.num_speculative_tokens == 3
    assert sp.num_lookahead_tokens == 3 and sp.draft_slots == 0  # vLLM: eagle reserves k slots
    ngram = SpeculativeConfig(method="ngram", num_speculative_tokens=4, prompt_lookup_max=4)  # type: ignore[call-arg]
    assert ngram.num_lookahead_tokens == 0
    assert (
        SpeculativeConfig(method="draft_model", num_speculative_tokens=2, model="llama-3.2-1b").draft_slots
        == 1
    )
    for bad in ('{"method": "medusa", "num_speculative_tokens": 2}', "not json", '{"method": "ngram"}'):
        with pytest.raises((ConfigError, ValueError)):
            EngineConfig(speculative_config=bad)


def test_acceptance_draws_follow_the_chain_closed_form() -> None:
    """E[accepted] = sum_i prod_{j<=i} p_j; seeded draws are reproducible per request."""
    sp = SpeculativeConfig(method="eagle3", num_speculative_tokens=4, acceptance_rates=(0.9, 0.6, 0.5, 0.2))
    assert sp.mean_accepted() == pytest.approx(0.9 + 0.54 + 0.27 + 0.054)
    model = AcceptanceModel(sp.rates(), seed=7)
    r = Request(0, "x", 0.0, 10, 10)
    draws = []
    for i in range(20_000):
        r.idx, r.spec_verifications = i % 97, i
        draws.append(model.accepted(r, 4))
    assert abs(sum(draws) / len(draws) - sp.mean_accepted()) < 0.03
    r.idx, r.spec_verifications = 3, 5
    assert model.accepted(r, 4) == model.accepted(r, 4)
    assert max(draws) == 4 and min(draws) == 0


def test_run_emits_one_plus_accepted_tokens_and_keeps_drafts_in_the_budget() -> None:
    log: list[dict] = []
    cfg = EngineConfig(
        max_num_seqs=8,
        max_num_batched_tokens=64,
        speculative_config={"method": "eagle", "num_speculative_tokens": 3, "draft_step_fraction": 0.0},
    )
    res = simulate(
        _trace(),
        cfg,
        ConstantStepTime(step_time_s=0.01),
        fast=False,
        step_log=log.append,
        check_invariants=True,
    )
    sp = res.summary.speculative
    assert sp is not None and sp.verifications > 0
    assert sp.accepted_tokens == sum(sum(d["spec_accepted"].values()) for d in log)
    assert sp.draft_tokens == sum(sum(d["spec_scheduled"].values()) for d in log)
    for d in log:
        assert d["num_tokens"] <= 64
        for rid, k in d["spec_scheduled"].items():
            assert k <= 3 and d["scheduled_tokens"][rid] >= 1 + k
    # every output token is accounted: 40 per request, in fewer steps than one token a step
    assert res.summary.num_finished == 12
    assert sp.mean_acceptance_length == pytest.approx(1 + sp.accepted_tokens / sp.verifications)
    off = simulate(
        _trace(), EngineConfig(max_num_seqs=8, max_num_batched_tokens=64), ConstantStepTime(step_time_s=0.01)
    )
    assert res.summary.tpot_ms.mean < off.summary.tpot_ms.mean  # same step time, more tokens per step
    assert off.summary.speculative is None
    assert "speculative" not in off.summary.model_dump()  # off: the document has no such key


def test_no_acceptance_means_one_token_a_step_and_the_same_output_as_off() -> None:
    cfg = EngineConfig(
        max_num_seqs=8,
        max_num_batched_tokens=256,
        speculative_config={"method": "ngram", "num_speculative_tokens": 2, "acceptance_rates": [0.0]},
    )
    on = simulate(_trace(), cfg, ConstantStepTime(step_time_s=0.01), fast=False)
    off = simulate(
        _trace(), EngineConfig(max_num_seqs=8, max_num_batched_tokens=256), ConstantStepTime(step_time_s=0.01)
    )
    assert on.summary.speculative is not None and on.summary.speculative.accepted_tokens == 0
    assert list(on.requests["finish_s"]) == list(off.requests["finish_s"])  # rejected drafts cost no step


def test_draft_time_is_charged() -> None:
    base = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rates": [0.7]}
    free = simulate(
        _trace(),
        EngineConfig(speculative_config={**base, "draft_step_fraction": 0.0}),
        ConstantStepTime(step_time_s=0.01),
    )
    paid = simulate(
        _trace(),
        EngineConfig(speculative_config={**base, "draft_step_fraction": 0.1}),
        ConstantStepTime(step_time_s=0.01),
    )
    assert free.summary.speculative.draft_time_s == 0.0  # type: ignore[union-attr]
    assert paid.summary.speculative.draft_time_s > 0  # type: ignore[union-attr]
    assert paid.summary.tpot_ms.mean > free.summary.tpot_ms.mean


def test_every_preset_states_its_source_and_the_figures_it_quotes_are_its_own() -> None:
    """The 'N tokens/step at k = K' a source note quotes is what the preset gives (no drift)."""
    import re

    from servesim.engine.speculative import ACCEPTANCE_PRESETS, ACCEPTANCE_SOURCES

    assert set(ACCEPTANCE_SOURCES) == set(ACCEPTANCE_PRESETS)
    for method, note in ACCEPTANCE_SOURCES.items():
        quoted = re.findall(r"(\d\.\d\d) tokens/step at k = (\d)", note)
        quoted += re.findall(r"(\d\.\d\d) at k = (\d)", note)
        assert quoted, method
        for length, k in quoted:
            model = "llama-3.2-1b" if method == "draft_model" else None
            sp = SpeculativeConfig(method=method, num_speculative_tokens=int(k), model=model)  # type: ignore[arg-type]
            assert 1 + sp.mean_accepted() == pytest.approx(float(length), abs=0.005), (method, k)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (  # issue 47: a seed past 2**64 simulated, then the JSON writer failed with a traceback
            '{"method": "ngram", "num_speculative_tokens": 3, "acceptance_seed": 18446744073709551616}',
            "acceptance_seed: Input should be less than or equal to 9223372036854775807",
        ),
        ('{"method": "ngram", "num_speculative_tokens": 3, "acceptance_seed": -1}', "acceptance_seed"),
        (
            '{"method": "ngram", "num_speculative_tokens": true}',
            "num_speculative_tokens: expected an integer",
        ),
        ('{"method": "ngram", "num_speculative_tokens": 3, "acceptance_seed": false}', "expected an integer"),
        ('{"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rates": [true]}', "a boolean"),
        (
            '{"method": "eagle3", "num_speculative_tokens": 3, "draft_step_fraction": true}',
            "expected a number",
        ),
        ('{"method": "eagle3", "num_speculative_tokens": 3, "draft_step_fraction": NaN}', "a finite number"),
        ('{"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rates": [NaN]}', "each in [0, 1]"),
        (
            '{"method": "ngram", "num_speculativ_tokens": 3}',
            "num_speculativ_tokens: unknown key; did you mean 'num_speculative_tokens'?",
        ),
        (
            '{"method": "ngram", "num_speculative_tokens": 3, "colour": 1}',
            "colour: unknown key; known: method",
        ),
        (
            '{"method": "draft_model", "num_speculative_tokens": 3}',
            "method 'draft_model' needs the draft model",
        ),
    ],
)
def test_the_speculative_config_is_strict(value: str, said: str) -> None:
    """Unknown keys are named (with the closest key), booleans are not numbers, a seed fits
    JSON and numpy (servesim.bounds.MAX_SEED), and draft_model names its draft model as vLLM needs."""
    with pytest.raises(ValueError) as refused:
        EngineConfig(speculative_config=value)
    assert said in describe(refused.value)


def test_methods_with_a_catalog_drafter_need_no_model() -> None:
    """eagle/eagle3/mtp resolve their head from the catalog (perf.speculators): no model needed."""
    for method in ("eagle", "eagle3", "mtp", "ngram"):
        assert SpeculativeConfig(method=method, num_speculative_tokens=2).model is None
    top = SpeculativeConfig(method="ngram", num_speculative_tokens=1, acceptance_seed=2**63 - 1)
    assert top.acceptance_seed == 2**63 - 1
