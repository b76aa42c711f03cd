"""The prefix-cache hit rate tile and its series per time bin (views.simulation)."""

from __future__ import annotations

import numpy as np
import pytest

import servesim
from servesim.views.simulation import prefix_cache_kpi, prefix_hit_bins, prefix_hit_series


def _run(**cfg: object) -> servesim.SimulationResult:
    trace = servesim.open_trace("prefix_heavy", num_requests=300, seed=3)
    return servesim.simulate(trace, servesim.EngineConfig(**cfg))  # type: ignore[arg-type]


def test_the_bins_add_up_to_the_summary_s_hit_rate() -> None:
    result = _run(max_num_seqs=16, num_gpu_blocks=4000)
    rate = result.summary.prefix_cache_hit_rate
    assert rate is not None and 0.2 < rate < 1.0  # shared prefixes hit, first sights miss
    _, hits, queries = prefix_hit_bins(result, 50)
    assert float(hits.sum()) / float(queries.sum()) == pytest.approx(rate, rel=1e-12)
    s = prefix_hit_series(result, max_points=200)
    assert s is not None
    some = queries > 0
    assert len(s.x) == len(s.y) == int(some.sum())
    assert np.allclose(s.y, hits[some] / queries[some] * 100.0, rtol=1e-5)
    # weighted by each bin's queries, the bars give the run's rate back
    weighted = np.dot(np.asarray(s.y) / 100.0, queries[some]) / queries[some].sum()
    assert weighted == pytest.approx(rate, rel=1e-5)
    assert s.reference == pytest.approx(rate * 100.0) and s.reference_label == "whole run"
    assert s.title.startswith("prefix-cache hit rate per time bin") and f"{rate:.1%}" in s.title
    assert (s.x_label, s.x_unit, s.y_label, s.y_unit) == ("time (first admission)", "s", "hit rate", "%")
    tile = prefix_cache_kpi(result.summary)
    assert tile is not None and (tile.value, tile.unit) == (rate, "%")
    assert tile.label == "prefix cache hit rate"


def test_no_prefix_caching_no_tile_no_series() -> None:
    result = _run(enable_prefix_caching=False)
    assert result.summary.prefix_cache_hit_rate is None
    assert prefix_cache_kpi(result.summary) is None and prefix_hit_series(result) is None
    assert prefix_hit_series(servesim.simulate(servesim.Trace.empty())) is None
