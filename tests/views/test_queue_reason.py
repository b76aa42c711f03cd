"""Queue length by reason: the waiting queue split by the limit holding it back (derived rule)."""

from __future__ import annotations

import numpy as np

import servesim
from servesim.views.model import Series
from servesim.views.shape import time_binned
from servesim.views.simulation import QUEUE_REASONS, queue_by_reason


def _run(**cfg: object) -> servesim.SimulationResult:
    trace = servesim.open_trace("bursty", num_requests=300, seed=5)
    return servesim.simulate(trace, servesim.EngineConfig(**cfg))  # type: ignore[arg-type]


def _share(series: list[Series]) -> dict[str, float]:
    totals = {s.key.split(".", 1)[1]: float(np.sum(s.y)) for s in series}
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in totals.items()}


def test_the_reasons_add_up_to_the_waiting_queue() -> None:
    result = _run(max_num_seqs=8, num_gpu_blocks=2000)
    parts = queue_by_reason(result, max_points=200)
    assert [s.key for s in parts] == [f"queue_by_reason.{k}" for k, _ in QUEUE_REASONS]
    st = result.steps
    t = st["start_s"].to_numpy()
    end = float(t[-1] + st["duration_s"].to_numpy()[-1])
    bins = len(parts[0].x)
    _, whole = time_binned(t, st["num_waiting"].to_numpy(), float(t[0]), end, bins, how="mean")
    total = np.sum([s.y for s in parts], axis=0)
    assert np.allclose(total, whole, rtol=1e-5, atol=1e-6)


def test_a_full_batch_is_max_num_seqs_and_a_tiny_cache_is_kv() -> None:
    seqs = _share(queue_by_reason(_run(max_num_seqs=2, num_gpu_blocks=20000)))
    assert seqs["max_num_seqs"] > 0.9
    kv = _share(queue_by_reason(_run(max_num_seqs=256, num_gpu_blocks=300)))
    assert kv["kv_cache"] > 0.5 and kv["kv_cache"] > kv["max_num_seqs"]


def test_no_steps_no_series() -> None:
    empty = servesim.simulate(servesim.Trace.empty())
    assert queue_by_reason(empty) == []
