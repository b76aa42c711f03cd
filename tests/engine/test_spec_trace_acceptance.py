"""Acceptance from the trace: the optional ``spec_accept_rate`` column, read, checked and used.

A request with a rate is drawn at that rate at every draft position; one without keeps the
method's per-position model. A trace without the column gives exactly the figures it gave before
the column existed (same draws, same steps).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.engine.request import Request
from servesim.engine.speculative import AcceptanceModel
from servesim.traces import load_trace, write_trace
from servesim.traces.schema import Trace

SPEC = {"method": "eagle3", "num_speculative_tokens": 3, "draft_step_fraction": 0.0}


def _records(n: int = 10, out: int = 60, rate: float | None = None) -> list[dict[str, object]]:
    recs: list[dict[str, object]] = []
    for i in range(n):
        rec: dict[str, object] = {
            "req_id": f"r{i}",
            "arrival_time_s": 0.02 * i,
            "prompt_len": 40 + 5 * i,
            "output_len": out,
        }
        if rate is not None:
            rec["spec_accept_rate"] = rate
        recs.append(rec)
    return recs


def _run(trace: Trace, spec: dict[str, object] = SPEC):  # type: ignore[no-untyped-def]
    cfg = EngineConfig(max_num_seqs=16, max_num_batched_tokens=512, speculative_config=spec)
    return simulate(trace, cfg, ConstantStepTime(step_time_s=0.01), fast=False)


def test_column_round_trips_through_csv_jsonl_json_and_parquet(tmp_path: Path) -> None:
    recs = _records(4)
    recs[1]["spec_accept_rate"] = 0.25
    recs[3]["spec_accept_rate"] = 1.0
    t = Trace.from_records(recs, source="t")
    for ext in ("csv", "jsonl", "json", "parquet"):
        back = load_trace(write_trace(t, tmp_path / f"t.{ext}"))
        got = back.df["spec_accept_rate"].to_numpy()
        assert np.isnan(got[0]) and np.isnan(got[2]), ext
        assert list(got[[1, 3]]) == [0.25, 1.0], ext


def test_a_trace_without_the_column_writes_the_same_files(tmp_path: Path) -> None:
    t = Trace.from_records(_records(3), source="t")
    write_trace(t, tmp_path / "t.csv")
    header = (tmp_path / "t.csv").read_text().splitlines()[0]
    assert "spec_accept_rate" not in header
    write_trace(t, tmp_path / "t.jsonl")
    assert all(
        "spec_accept_rate" not in json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()
    )


@pytest.mark.parametrize(
    ("cell", "reason"), [("1.5", "above 1"), ("-0.1", "negative"), ("abc", "not a number")]
)
def test_a_bad_rate_names_the_file_row_and_field(tmp_path: Path, cell: str, reason: str) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("arrival_time_s,prompt_len,output_len,spec_accept_rate\n0,10,5,0.5\n0.1,10,5," + cell + "\n")
    t = load_trace(p)  # bad rows are dropped and reported, as for every other field
    assert len(t) == 1
    (d,) = t.provenance.dropped
    assert d.row == 2 and d.field == "spec_accept_rate" and reason in d.reason
    with pytest.raises(ValueError, match="spec_accept_rate"):  # pydantic names the field
        Trace.from_records([{**_records(1)[0], "spec_accept_rate": 2.0}])


def test_without_the_column_every_figure_is_unchanged() -> None:
    """A NaN column is the same run as the method's model alone (draws and all)."""
    plain = _run(Trace.from_records(_records(), source="t"))
    model = AcceptanceModel((0.8, 0.75, 0.72), seed=0)
    with_none = AcceptanceModel((0.8, 0.75, 0.72), seed=0, per_request=[float("nan")] * 10)
    r = Request(3, "r3", 0.0, 10, 10)
    for v in range(50):
        r.spec_verifications = v
        assert model.accepted(r, 3) == with_none.accepted(r, 3)
    assert plain.summary.speculative is not None
    again = _run(Trace.from_records(_records(), source="t"))
    assert plain.summary.model_dump() == again.summary.model_dump()


def test_the_trace_rate_overrides_the_model_per_request() -> None:
    recs = _records()
    for i, rec in enumerate(recs):
        rec["spec_accept_rate"] = 1.0 if i % 2 == 0 else 0.0
    res = _run(Trace.from_records(recs, source="t"), {**SPEC, "acceptance_rates": [0.5]})
    rq = res.requests.set_index("req_id")
    sp = res.summary.speculative
    assert sp is not None
    # rate 1: every verification emits k + 1 = 4 tokens; rate 0: one token a step (drafts all rejected)
    full = [f"r{i}" for i in range(0, 10, 2)]
    none = [f"r{i}" for i in range(1, 10, 2)]
    tpot_full = float(rq.loc[full, "tpot_ms"].mean())
    tpot_none = float(rq.loc[none, "tpot_ms"].mean())
    assert tpot_none == pytest.approx(10.0)  # one token per 10 ms step
    assert tpot_full < 0.3 * tpot_none  # 4 tokens a step (the last verification may be trimmed)
    # the accepted count is exactly the full-rate requests' drafts that were verified
    assert sp.accepted_tokens > 0 and sp.accepted_tokens < sp.draft_tokens


@settings(max_examples=12, deadline=None)
@given(
    lo=st.floats(0.0, 1.0),
    hi=st.floats(0.0, 1.0),
    k=st.integers(1, 4),
)
def test_more_acceptance_means_fewer_steps_per_output_token_bounded_by_k_plus_1(
    lo: float, hi: float, k: int
) -> None:
    """Property: steps per output token falls (weakly) as the trace's rate rises, never below
    1 / (k + 1), and is 1 at rate 0."""
    lo, hi = min(lo, hi), max(lo, hi)
    spec = {**SPEC, "num_speculative_tokens": k}

    def steps_per_token(rate: float) -> float:
        res = _run(Trace.from_records(_records(n=4, out=80, rate=rate), source="t"), spec)
        sp = res.summary.speculative
        assert sp is not None
        tokens_after_first = 4 * 79
        return sp.verifications / (sp.verifications + sp.accepted_tokens) if tokens_after_first else 1.0

    a, b = steps_per_token(lo), steps_per_token(hi)
    assert b <= a + 0.05  # seeded draws: the same uniforms, a higher rate accepts at least as many
    for v in (a, b):
        assert 1 / (k + 1) - 1e-9 <= v <= 1.0
    assert steps_per_token(0.0) == 1.0
