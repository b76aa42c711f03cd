#!/usr/bin/env python3
"""Generate speculative-decoding regression cases from vLLM's real scheduler. Not run in CI.

vLLM 0.33's ``Scheduler`` runs with a real ``SpeculativeConfig(method="ngram")``; the fake model
runner of ``vllm_oracle.py`` (this folder's copy) returns 1 + a sampled tokens for a request that
verified d drafts, a drawn from a seeded per-position chain, and the fake drafter proposes k
drafts after every step (``update_draft_token_ids``). The ``lookahead`` family also sets the
scheduler's ``num_lookahead_tokens`` to k, as EAGLE/MTP/draft-model drafters do, with prefix
caching off. Each case stores the per-step schedule and the accepted counts, in the ``--out``
folder; the committed ones (``tests/engine/oracle_spec_cases/``, replayed through servesim with
the same accepted counts by ``tests/engine/test_oracle_spec_cases.py``) are only replaced with
``--force``.

Usage (the oracle's virtualenv python):
    ~/.cache/vllm-oracle-venv/bin/python tools/oracle/make_spec_cases.py --out DIR [--seed 0] [--per-family 3]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_cases import (  # noqa: E402
    add_maker_args,
    chosen_families,
    oracle_runs,
    out_folder,
    random_config,
    random_trace,
    step_row,
    store_case,
)

FAMILIES = {  # spec family -> make_cases family its trace and config come from
    "spec_basic": "basic",
    "spec_prefix": "prefix",
    "spec_pressure": "pressure",
    "spec_priority": "priority",
    "spec_threshold": "threshold",
    "spec_small_seqs": "small_seqs",
    "spec_lookahead": "pressure",
}
#: vLLM 0.33's knobs with speculation (issue 49), made only when named: the committed ones with
#: ``--families spec_scheduled_tokens,spec_cadence,spec_active_seqs --seed 49`` (kept out of
#: FAMILIES so the default command still draws the older cases again).
#: Real EAGLE / EAGLE-3 / MTP SpeculativeConfigs (issue 49; ``vllm_oracle.py`` says what the
#: scheduler reads from them) and drafts shorter than k, made only when named: the ``_short``
#: families' drafter proposes a seeded length in [0, k] after each step; the committed ones with
#: ``--families spec_eagle,spec_eagle3,spec_mtp,spec_eagle_short,spec_mtp_short,spec_ngram_short
#: --seed 4903``. Prefix caching is off there; the ``_prefix`` families turn it on with shared
#: prefixes (many of them block-aligned), where vLLM 0.33 hashes each block with the next token
#: (``num_hash_lookahead_tokens`` = 1) and a hit at a prefix's block boundary comes out a block
#: shorter: the committed ones with ``--families spec_eagle_prefix,spec_eagle3_prefix,
#: spec_mtp_prefix,spec_eagle_prefix_short --seed 4904``.
DRAFTER_FAMILIES = {
    "spec_eagle": ("pressure", "eagle"),
    "spec_eagle3": ("basic", "eagle3"),
    "spec_mtp": ("threshold", "mtp"),
    "spec_eagle_short": ("pressure", "eagle"),
    "spec_mtp_short": ("basic", "mtp"),
    "spec_ngram_short": ("prefix", "ngram"),
    "spec_eagle_prefix": ("prefix", "eagle"),
    "spec_eagle3_prefix": ("prefix_pressure", "eagle3"),
    "spec_mtp_prefix": ("cascade", "mtp"),
    "spec_eagle_prefix_short": ("mixed", "eagle"),
    # vLLM's AsyncScheduler with a real EAGLE/EAGLE-3/MTP config (``async_scheduling``: the
    # drafts stay on the worker, the scheduler schedules k placeholders): the committed ones,
    # in tests/engine/oracle_async_spec_cases/, with ``--families async_eagle,async_eagle3,
    # async_mtp,async_eagle_prefix,async_mtp_prefix,async_eagle3_priority --seed 4905``.
    "async_eagle": ("basic", "eagle"),
    "async_eagle3": ("pressure", "eagle3"),
    "async_mtp": ("threshold", "mtp"),
    "async_eagle_prefix": ("prefix", "eagle"),
    "async_mtp_prefix": ("prefix_pressure", "mtp"),
    "async_eagle3_priority": ("priority", "eagle3"),
}
KNOB_FAMILIES = {
    "spec_scheduled_tokens": "scheduled_tokens",
    "spec_cadence": "cadence",
    "spec_active_seqs": "active_seqs",
}


def spec_steps(records: list[dict]) -> list[list]:
    """A speculative case's ``steps``: the plain columns, then drafts scheduled and accepted."""
    return [[*step_row(d), d["spec_scheduled"], d["spec_accepted"]] for d in records]


def draft_lengths(records: list[dict]) -> dict[str, list[int]]:
    """Each request's proposed draft counts in order (what vLLM's scheduler was given): stored in
    the case's ``speculative`` (an output of the run, not a config key) for servesim's replay."""
    lengths: dict[str, list[int]] = {}
    for d in records:
        for rid, n_d in d["spec_proposed"].items():
            lengths.setdefault(rid, []).append(n_d)
    return lengths


def draw_case(rng: random.Random, fam: str, base: str) -> tuple[list[dict], dict, dict]:
    """One case of ``fam``: its trace and scheduler config (of ``make_cases``' family ``base``)
    and its ``speculative`` settings (stored apart from the config; vLLM is given both)."""
    rows = random_trace(rng, base)
    if len(rows) > 40:
        rows = rows[:40]
    cfg = random_config(rng, base, rows)
    k = rng.randint(1, 5)
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], cfg["max_num_seqs"], k + 1)
    spec = {
        "spec_method": "ngram",
        "num_speculative_tokens": k,
        "spec_accept_rates": [round(rng.uniform(0.2, 0.95), 2) for _ in range(rng.randint(1, k))],
        "spec_accept_seed": rng.randint(0, 1000),
    }
    if fam in DRAFTER_FAMILIES:
        spec["spec_method"] = DRAFTER_FAMILIES[fam][1]
        if spec["spec_method"] != "ngram" and "_prefix" not in fam:
            cfg["enable_prefix_caching"] = False
        if fam.endswith("_short"):
            spec["spec_draft_min"] = 0
        if fam.startswith("async_"):
            cfg["async_scheduling"] = True
    if fam == "spec_lookahead":
        cfg["enable_prefix_caching"] = False
        spec["spec_lookahead_tokens"] = k
    return rows, cfg, spec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_maker_args(ap, 3, "comma-separated families to make (default: FAMILIES, in order)")
    args = ap.parse_args()
    known = {**FAMILIES, **KNOB_FAMILIES, **{f: b for f, (b, _) in DRAFTER_FAMILIES.items()}}
    chosen = chosen_families(ap, args.families, list(FAMILIES), known)
    out = out_folder(args.out, args.force)
    rng = random.Random(args.seed)
    drawn = {
        f"{fam}_{j:02d}": draw_case(rng, fam, known[fam]) for fam in chosen for j in range(args.per_family)
    }
    cases = [(name, rows, {**cfg, **spec}) for name, (rows, cfg, spec) in drawn.items()]
    for name, rows, _, summary, records in oracle_runs(cases):
        _, cfg, spec = drawn[name]
        if spec.get("spec_draft_min") is not None:
            spec["draft_lengths"] = draft_lengths(records)
        note = f", k={spec['num_speculative_tokens']}"
        store_case(out, name, summary, cfg, rows, spec_steps(records), totals=(), note=note, speculative=spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
