"""Speculative decoding's batched acceptance draws (``spec_draws``) give exactly the numbers of
``AcceptanceModel.accepted``, which draws from a fresh ``random.Random(key)`` per verification:
CPython's own Mersenne Twister is the independent reference, over keys of 1 to 4 32-bit words
(CPython seeds with as many words as the key needs), per-request rates with NaN rows, and every
draft count up to ``MAX_SPEC_TOKENS``."""

from __future__ import annotations

import importlib.util
import random
from array import array
from pathlib import Path
from types import ModuleType

import pytest

from servesim.engine import spec_draws, speculative
from servesim.engine.request import Request
from servesim.engine.speculative import MAX_SPEC_TOKENS, AcceptanceModel

SEEDS = (0, 1, 65_535, 65_536, 123_456_789, (1 << 63) - 1)
INDICES = (0, 5, 4095, 4096, 1 << 30, (1 << 44) - 1)


def reference(seed: int, r: Request, n: int, rates: tuple[float, ...], flat: list[float] | None) -> int:
    """The chain rule drawn from CPython's generator, written out here (not the engine's code)."""
    rng = random.Random((seed << 48) ^ (r.idx << 20) ^ r.spec_verifications)
    own = flat is not None and r.idx < len(flat) and flat[r.idx] == flat[r.idx]
    a = 0
    while a < n and rng.random() < (
        flat[r.idx] if own and flat is not None else rates[min(a, len(rates) - 1)]
    ):
        a += 1
    return a


def requests(rng: random.Random, count: int) -> list[Request]:
    out = []
    for _ in range(count):
        r = Request(rng.choice([*INDICES, rng.randrange(1 << 40)]), "r", 0.0, 10, 10)
        r.spec_verifications = rng.choice([0, 1, rng.randrange(1 << 20), rng.randrange(1 << 40)])
        out.append(r)
    return out


def test_a_steps_draws_equal_cpythons_generator_one_by_one() -> None:
    rng = random.Random(11)
    rates = (0.97, 0.9, 0.99, 0.8)
    flat = [float("nan") if rng.random() < 0.5 else rng.random() for _ in range(5000)]
    for seed in SEEDS:
        reqs = requests(rng, 37)  # not a multiple of the 8 lanes
        ns = [rng.randrange(0, MAX_SPEC_TOKENS + 1) for _ in reqs]
        for per_request in (None, flat):
            model = AcceptanceModel(rates, seed, per_request)
            got = model.accepted_many(reqs, ns)
            assert got == [reference(seed, r, n, rates, per_request) for r, n in zip(reqs, ns, strict=True)]
            assert got == [model.accepted(r, n) for r, n in zip(reqs, ns, strict=True)]


def test_high_rates_reach_every_position() -> None:
    """Rates near 1 accept long runs: the draws past the first few twisted words are right too."""
    rng = random.Random(3)
    rates = (0.999,)
    reqs = requests(rng, 64)
    ns = [MAX_SPEC_TOKENS] * len(reqs)
    got = AcceptanceModel(rates, 7).accepted_many(reqs, ns)
    assert max(got) == MAX_SPEC_TOKENS
    assert got == [reference(7, r, MAX_SPEC_TOKENS, rates, None) for r in reqs]


def source_module() -> ModuleType:
    """spec_draws.py run as Python whichever core is installed: the source the core compiles."""
    path = Path(spec_draws.__file__).with_name("spec_draws.py")
    spec = importlib.util.spec_from_file_location("spec_draws_source", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_source_the_core_compiles_draws_what_cpython_does() -> None:
    """The pure-Python core keeps random.Random; the module's own code (what Cython compiles)
    is checked here as Python, on a few keys (slow uncompiled)."""
    module = source_module()
    assert not module.COMPILED
    rng = random.Random(5)
    rates = array("d", (0.9, 0.8, 0.95))
    for seed in (0, (1 << 63) - 1):
        reqs = requests(rng, 9)
        ns = [rng.randrange(0, MAX_SPEC_TOKENS + 1) for _ in reqs]
        out: list[int] = []
        module.accepted_batch(seed, reqs, ns, rates, None, MAX_SPEC_TOKENS, {}, out)
        assert out == [reference(seed, r, n, tuple(rates), None) for r, n in zip(reqs, ns, strict=True)]


def test_draws_made_ahead_equal_each_verifications_own_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request's next verifications are drawn ahead and kept in a table shared by the
    models of the same draws: over a run of steps with changing batches (requests joining,
    leaving, skipping verifications, going back), every answer is still CPython's draw for that
    verification; models of another seed, or with per-request rates, never read another's
    draws, and a table emptied at its bound draws again."""
    monkeypatch.setattr(speculative, "DRAW_TABLE_MAX", 100)
    rng = random.Random(23)
    rates = (0.8, 0.75, 0.72)
    flat = [float("nan") if rng.random() < 0.5 else rng.random() for _ in range(200)]
    models = [
        (AcceptanceModel(rates, 9), None),
        (AcceptanceModel(rates, 9, flat), flat),
        (AcceptanceModel(rates, 10), None),
        (AcceptanceModel(rates, 9), None),  # shares the first one's table
    ]
    reqs = [Request(i, str(i), 0.0, 10, rng.choice([1, 2, 5, 40, 400])) for i in range(150)]
    asked = 0
    for _step in range(400):
        batch = rng.sample(reqs, rng.randrange(1, 40))
        for r in batch:
            move = rng.random()
            if move < 0.8:
                r.spec_verifications += 1  # the usual: the next verification
            elif move < 0.9:
                r.spec_verifications += rng.randrange(2, 60)  # past what was drawn ahead
            else:
                r.spec_verifications = rng.randrange(0, r.spec_verifications + 1)  # back
            r.num_output = rng.randrange(0, r.max_tokens)
        ns = [rng.randrange(0, 4) for _ in batch]
        model, per_request = models[rng.randrange(len(models))]
        got = model.accepted_many(batch, ns)
        want = [reference(model.seed, r, n, rates, per_request) for r, n in zip(batch, ns, strict=True)]
        assert got == want
        asked += len(batch)
    assert asked > 4000
    assert models[0][0]._table is models[3][0]._table
    assert len({id(m._table) for m, _ in models}) == 3
