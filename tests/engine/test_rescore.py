"""``results.rescore``: a run judged at another SLO from its records equals simulating with it."""

from __future__ import annotations

import pytest

from servesim.engine import SLO, EngineConfig, LinearStepTime, simulate
from servesim.engine.results import rescore
from servesim.traces import Trace


def _trace() -> Trace:
    rows = [
        {
            "req_id": f"r{i}",
            "arrival_time_s": i * 0.02,
            "prompt_len": 200 + 53 * (i % 7),
            "output_len": 10 + 9 * (i % 4),
            "priority": i % 3,
            "tenant": "a" if i % 2 else "b",
            "sla_ttft_ms": 300.0 if i % 5 == 0 else None,
        }
        for i in range(120)
    ]
    return Trace.from_records(rows)


@pytest.mark.parametrize(
    "slo",
    [SLO(ttft_ms=150.0), SLO(tpot_ms=20.0, e2e_ms=900.0), SLO(ttft_ms=1e9), None],
)
def test_rescoring_equals_simulating_with_the_slo(slo: SLO | None) -> None:
    trace = _trace()
    cfg = EngineConfig(max_num_seqs=16)
    stored = simulate(trace, cfg, LinearStepTime())
    fresh = simulate(trace, cfg, LinearStepTime(), slo=slo)
    df = trace.df
    scored = rescore(
        stored.summary,
        stored.requests,
        slo,
        df["sla_ttft_ms"].to_numpy(dtype="float64"),
        df["sla_e2e_ms"].to_numpy(dtype="float64"),
    )
    assert scored == fresh.summary
    assert len(fresh.summary.by_tenant) == 2 and len(fresh.summary.by_priority) == 3


def test_an_slo_that_binds_moves_the_goodput() -> None:
    trace = _trace()
    stored = simulate(trace, EngineConfig(max_num_seqs=16), LinearStepTime())
    df = trace.df
    sla = (df["sla_ttft_ms"].to_numpy(dtype="float64"), df["sla_e2e_ms"].to_numpy(dtype="float64"))
    tight = rescore(stored.summary, stored.requests, SLO(ttft_ms=1.0), *sla)
    assert tight.num_good < stored.summary.num_good and tight.goodput < stored.summary.goodput
    assert tight.goodput == tight.num_good / stored.summary.duration_s
    assert stored.summary.slo is None and tight.slo == SLO(ttft_ms=1.0)
