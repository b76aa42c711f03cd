"""The roofline's step time runs in the engine's compiled core (``step_plan.roofline_step_time``):
it must give the float the roofline's own Python formula gives, to the bit, for any batch, on
a model with MLA's cached-token term (``a_ctx``) and one without, and on both cores."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType

import pytest

from servesim.engine import step_plan
from servesim.engine.step_time import BatchComposition
from servesim.perf.roofline import RooflineStepTime, build_step_time_model


def written_out(m: RooflineStepTime, batch: BatchComposition) -> float:
    """The roofline's step time as perf/roofline.py wrote it in Python before it moved."""
    nd = batch.num_decodes
    t = n_seq = nd
    attn = 0.0
    for c, cached in batch.prefill_chunks:
        t += c
        ac = c * (cached + 0.5 * (c + 1)) * m._a_cmp
        if m._a_ctx:
            ac += cached * m._a_ctx
        am = (cached + c) * m._a_mem
        attn += ac if ac > am else am
    n_seq += len(batch.prefill_chunks)
    if nd:
        dc = batch.decode_ctx_sum * m._d_cmp
        dm = batch.decode_ctx_sum * m._a_mem
        attn += dc if dc > dm else dm
    head, tail, seq = m._terms_of(t, n_seq, bool(batch.prefill_chunks))
    return head + attn + tail + seq


def batches(rng: random.Random, count: int) -> list[BatchComposition]:
    out = []
    for _ in range(count):
        nd = rng.choice([0, 0, 1, rng.randrange(1, 300)])
        chunks = [
            (rng.choice([2, 4, rng.randrange(2, 9000)]), rng.choice([0, rng.randrange(0, 130_000)]))
            for _ in range(rng.choice([0, 1, rng.randrange(0, 40)]))
        ]
        if nd == 0 and not chunks:
            chunks = [(4, 100)]
        ctx = sum(rng.randrange(1, 40_000) for _ in range(nd))
        out.append(BatchComposition(nd, ctx, chunks))
    return out


@pytest.mark.parametrize(("model", "tp"), [("llama-3.1-8b", 1), ("deepseek-v3", 8)])
def test_the_core_times_a_step_as_the_written_out_formula(model: str, tp: int) -> None:
    m = build_step_time_model(model, "h200", tp)
    if model == "deepseek-v3":
        assert m._a_ctx > 0  # the MLA term is exercised
    source = _source_step_plan()
    rng = random.Random(31)
    for batch in batches(rng, 400):
        want = written_out(m, batch)
        assert m.step_time(batch) == want
        got_py = source.roofline_step_time(batch, m._a_cmp, m._a_ctx, m._a_mem, m._d_cmp, m._terms_of)
        assert got_py == want


def _source_step_plan() -> ModuleType:
    """step_plan.py run as Python whichever core is installed: the source the core compiles."""
    path = Path(step_plan.__file__).with_name("step_plan.py")
    spec = importlib.util.spec_from_file_location("step_plan_source", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
