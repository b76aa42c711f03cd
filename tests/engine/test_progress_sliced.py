"""``simulate(progress=...)`` runs in time slices from the engine's counter (no per-step events)
and must give exactly the result of one uninterrupted run."""

from __future__ import annotations

from servesim.engine import EngineConfig, simulate
from servesim.traces import generate_trace, preset_spec


def test_a_progress_callback_changes_no_figure() -> None:
    trace = generate_trace(preset_spec("default").model_copy(update={"num_requests": 3000, "seed": 3}))
    cfg = EngineConfig(num_gpu_blocks=600, max_num_seqs=64)
    plain = simulate(trace, cfg)
    calls: list[tuple[int, int]] = []
    sliced = simulate(trace, cfg, progress=lambda done, total: calls.append((done, total)))
    assert sliced.summary.model_dump_json() == plain.summary.model_dump_json()
    assert sliced.requests.equals(plain.requests) and sliced.steps.equals(plain.steps)
    assert calls[-1] == (3000, 3000) and len(calls) > 3
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
