"""Speculative decoding in the run's view: the "accepted tokens per step" tile (the dashboard's
formula on the same run), the measured acceptance rate, and the per-step series from the steps."""

from __future__ import annotations

import pytest

from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.engine.results import tokens_per_verifying_step
from servesim.live import LiveRun
from servesim.traces.schema import Trace
from servesim.views.simulation import simulation_view, summary_view

SPEC = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rates": [0.8, 0.6, 0.4]}


def _trace(n: int = 24, out: int = 60) -> Trace:
    return Trace.from_records(
        [
            {"req_id": f"r{i}", "arrival_time_s": 0.05 * i, "prompt_len": 80 + 11 * i, "output_len": out}
            for i in range(n)
        ],
        source="t",
    )


def _config(spec: dict[str, object] | None) -> EngineConfig:
    return EngineConfig(max_num_seqs=8, max_num_batched_tokens=256, speculative_config=spec)


def test_the_tile_is_the_dashboards_figure_and_the_series_sums_to_the_summary() -> None:
    trace, model = _trace(), ConstantStepTime(step_time_s=0.01)
    log: list[dict[str, object]] = []
    res = simulate(trace, _config(SPEC), model, step_log=log.append)
    live = LiveRun(trace, _config(SPEC), model)
    done = live.finish()
    totals = live.speculation_totals()  # what the dashboard's tile reads (accepted, verifications)
    assert totals is not None and totals[1] > 0
    sp = res.summary.speculative
    assert sp is not None and done.summary.speculative == sp
    view = simulation_view(res)
    tiles = {k.key: k for k in view.kpis}
    tile = tiles["accepted_tokens_per_step"]
    assert (
        tile.value
        == tokens_per_verifying_step(*totals)
        == pytest.approx(1 + sp.accepted_tokens / sp.verifications)
    )
    assert 1.0 < tile.value < 4.0 and "k = 3" in tile.label
    assert tiles["spec_acceptance_rate"].value == pytest.approx(sp.accepted_tokens / sp.draft_tokens)
    # the steps carry each step's verifications and accepted drafts: they add up to the run's
    st = res.steps
    assert int(st["spec_verifications"].sum()) == sp.verifications
    assert int(st["spec_accepted"].sum()) == sp.accepted_tokens
    accepted_logged = [sum(d["spec_accepted"].values()) for d in log]  # type: ignore[attr-defined]
    assert st["spec_accepted"].tolist() == accepted_logged
    assert st["spec_rows"].tolist() == [len(d["spec_scheduled"]) for d in log]  # type: ignore[arg-type]
    # output tokens per second counts a verifying request's 1 + accepted tokens (its step is a
    # chunk of 1 + k, not a decode): over the run, every output token but the prefills' first ones
    tput = next(s for s in view.series if s.key == "output_tokens_per_s")
    t0, t1 = float(st["start_s"].iloc[0]), float((st["start_s"] + st["duration_s"]).iloc[-1])
    emitted = sum(tput.y) * (t1 - t0) / len(tput.x)
    total, n = int(res.requests["num_output"].sum()), len(res.requests)
    assert total - n - 1e-6 <= emitted <= total + 3 * n  # + at most k past a stop, trimmed
    line = next(s for s in view.series if s.key == "accepted_tokens_per_step")
    assert line.reference == 4.0 and len(line.x) == len(line.y) > 3
    assert all(1.0 <= y <= 4.0 for y in line.y)
    assert f"run {sp.mean_acceptance_length:.2f}" in line.title
    # a saved summary (servesim report) shows the same tile
    saved = summary_view(type(res.summary).model_validate_json(res.summary.model_dump_json()))
    assert {k.key: k.value for k in saved.kpis}["accepted_tokens_per_step"] == tile.value


def test_off_has_no_tile_no_series_and_no_step_columns() -> None:
    res = simulate(_trace(), _config(None), ConstantStepTime(step_time_s=0.01))
    view = simulation_view(res)
    assert not {"accepted_tokens_per_step", "spec_acceptance_rate"} & {k.key for k in view.kpis}
    assert "accepted_tokens_per_step" not in {s.key for s in view.series}
    assert "spec_verifications" not in res.steps.columns
    assert tokens_per_verifying_step(5, 0) is None
