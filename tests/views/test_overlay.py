"""Runs overlaid (issue 30): each run's latency histogram and CDF on shared bins with the SLO as
a vertical line, its queue, throughput and KV usage over time, every line named after its run;
sweeps compared by their curves and saturation points, studies by best config and front."""

from __future__ import annotations

import numpy as np
import pytest

import servesim
from servesim.tuning import SaturationReport, TuneResult
from servesim.views.compare import OVERLAID_LATENCIES, overlay_view
from servesim.views.compare_studies import study_compare_view, sweep_compare_view
from servesim.views.simulation import simulation_view


def _view(max_num_seqs: int) -> servesim.SimulationResult:
    trace = servesim.open_trace("bursty", num_requests=300, seed=3)
    cfg = servesim.EngineConfig(max_num_seqs=max_num_seqs, num_gpu_blocks=1500)
    return servesim.simulate(trace, cfg, slo=servesim.SLO(ttft_ms=400, tpot_ms=40))


@pytest.fixture(scope="module")
def two() -> tuple[servesim.SimulationResult, servesim.SimulationResult]:
    return _view(32), _view(4)


def test_histograms_and_cdfs_share_bins_keep_every_request_and_mark_the_slo(two) -> None:
    a, b = two
    view = overlay_view([("A: big batch", simulation_view(a)), ("B: small batch", simulation_view(b))])
    for key in OVERLAID_LATENCIES:
        hist = view.chart(f"{key}_overlay")
        assert hist.name == "A: big batch" and [ln.label for ln in hist.lines] == ["B: small batch"]
        (other,) = hist.lines
        assert other.x == hist.x  # shared bins
        assert sum(hist.y[:-1]) == pytest.approx(1.0) and sum(other.y[:-1]) == pytest.approx(1.0)
        cdf = view.chart(f"{key}_cdf_overlay")
        assert (
            cdf.y[0] == 0.0 and cdf.y[-1] == pytest.approx(1.0) and cdf.lines[0].y[-1] == pytest.approx(1.0)
        )
        assert all(np.diff(cdf.y) >= 0)
        assert hist.x_unit == "ms" and hist.x_label
        if key == "itl_ms":  # pooled token gaps, weighted as the run's ITL histogram counts them
            assert hist.y_label == "share of token gaps" and cdf.y_label == "share of token gaps at or below"
            continue
        # the CDF at a run's own edges is exact: the share of its requests at or below the edge
        vals = a.requests[key].dropna().to_numpy()
        mid = len(cdf.x) // 2
        assert cdf.y[mid] == pytest.approx(np.mean(vals <= cdf.x[mid]), abs=1.0 / len(vals) + 1e-9)
        assert hist.y_label == "share of requests"
    assert [m.x for m in view.chart("ttft_ms_overlay").marks] == [400.0]
    assert view.chart("ttft_ms_overlay").marks[0].label == "SLO 400 ms"
    assert view.chart("e2e_ms_overlay").marks == []  # no E2E SLO: no line


def test_time_series_overlay_each_run_on_its_own_time(two) -> None:
    a, b = two
    va, vb = simulation_view(a), simulation_view(b)
    view = overlay_view([("A", va), ("B", vb)])
    for key in ("num_waiting", "output_tokens_per_s", "kv_usage"):
        s = view.chart(f"{key}_overlay")
        assert s.x == va.chart(key).x and s.y == va.chart(key).y
        assert s.lines[0].x == vb.chart(key).x and s.lines[0].y == vb.chart(key).y
        assert s.x_unit == "s" and s.name == "A" and s.lines[0].label == "B"
    assert max(view.chart("num_waiting_overlay").lines[0].y) > max(view.chart("num_waiting_overlay").y)


def test_a_basket_overlays_every_run_and_nothing_to_overlay_says_so(two) -> None:
    a, b = two
    va, vb = simulation_view(a), simulation_view(b)
    view = overlay_view([("base", va), ("1", vb), ("2", va)])
    assert [ln.label for ln in view.chart("ttft_ms_cdf_overlay").lines] == ["1", "2"]
    empty = overlay_view([("A", va.model_copy(update={"histograms": [], "series": []})), ("B", vb)])
    assert empty.series == [] and "no latency distribution" in empty.text[0]


def _sweep(scale: float) -> SaturationReport:
    from pathlib import Path

    data = __import__("json").loads(
        (Path(__file__).resolve().parents[2] / "examples" / "demo" / "saturate.json").read_text()
    )
    rep = SaturationReport.model_validate(data)
    return rep.model_copy(
        update={"saturation_rps": None if rep.saturation_rps is None else rep.saturation_rps * scale}
    )


def test_two_sweeps_overlay_their_curves_and_compare_saturation_points() -> None:
    a, b = _sweep(1.0), _sweep(2.0)
    view = sweep_compare_view([("A", a), ("B", b)])
    t = view.table("saturation_points")
    row = next(r for r in t.rows if str(r[0]).startswith("unstable"))
    assert row[1] == a.saturation_rps and row[2] == b.saturation_rps and row[3] == pytest.approx(2.0)
    curve = view.chart("ttft_p99_sweeps")
    assert curve.x == [p.offered_rps.mean for p in a.points] and curve.lines[0].label == "B"
    assert curve.log_y and curve.x_unit == "req/s" and curve.y_unit == "ms"
    assert any(m.label.startswith("B: unstable") for m in curve.marks)
    assert "B saturates at 2.00x the rate of A" in view.text


def test_two_studies_compare_best_config_and_fronts() -> None:
    from pathlib import Path

    data = __import__("json").loads(
        (Path(__file__).resolve().parents[2] / "examples" / "demo" / "tune.json").read_text()
    )
    study = TuneResult.model_validate(data["study"])
    assert study.best is not None
    other = study.model_copy(
        update={"best": study.best.model_copy(update={"params": {**study.best.params, "max_num_seqs": 7}})}
    )
    view = study_compare_view([("A", study), ("B", other)])
    rows = {r[0]: r for r in view.table("best_configs").rows}
    assert rows["max_num_seqs"][2] == "7" and rows["max_num_seqs"][3] == "differs"
    assert all(r[3] == "same" for k, r in rows.items() if k != "max_num_seqs")
    figs = {r[0]: r for r in view.table("best_figures").rows}
    assert figs["goodput per GPU, req/s"][3] == pytest.approx(1.0)  # the same trial: ratio 1
    front = view.chart("fronts")
    assert front.x == sorted(front.x) and front.lines[0].label == "B" and front.x_unit == "ms"
