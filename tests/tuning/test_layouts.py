"""Aggregated vs disaggregated layouts at equal GPUs (servesim.tuning.layouts): the space, the
Pareto front, the break-even bisection, and `servesim tune --layouts` (JSON and human output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.errors import InputError
from servesim.traces.schema import Trace
from servesim.tuning.layouts import (
    Layout,
    LayoutPoint,
    LayoutRunner,
    break_even_bandwidth,
    compare_layouts,
    layout_space,
    pareto_front,
)

runner = CliRunner()


def test_every_layout_spends_exactly_the_budget() -> None:
    space = layout_space(4, ("agg", "disagg"), tps=(1, 2, 4))
    assert all(lay.gpus == 4 for lay in space)
    labels = {lay.label for lay in space}
    assert {"agg 4xTP1", "agg 2xTP2", "agg 1xTP4", "1P3D TP1/TP1", "2P2D TP1/TP1", "3P1D TP1/TP1"} <= labels
    assert "1P1D TP2/TP2" in labels and "2P1D TP1/TP2" in labels
    flagged = layout_space(
        2, ("disagg",), tps=(1,), prefill_batched_tokens=(None, 8192), decode_max_seqs=(None,)
    )
    assert [lay.prefill_config for lay in flagged] == [{}, {"max_num_batched_tokens": 8192}]
    with pytest.raises(InputError, match="layouts"):
        layout_space(2, ("both",))
    with pytest.raises(InputError, match="no disagg layout fits 1 GPUs"):
        layout_space(1, ("disagg",))


def _pt(label: str, g: float, ttft: float, tpot: float) -> LayoutPoint:
    lay = Layout(kind="agg", replicas=1)
    return LayoutPoint(
        label=label, layout=lay, gpus=1, good_requests=1, num_requests=1, goodput_rps=g,
        goodput_per_gpu=g, ttft_p99_ms=ttft, tpot_p99_ms=tpot, e2e_p99_ms=1.0, meets_p99=True,
    )  # fmt: skip


def test_pareto_front_drops_dominated_points() -> None:
    pts = [_pt("a", 2.0, 100, 10), _pt("b", 1.0, 50, 10), _pt("c", 1.0, 120, 12), _pt("d", 2.0, 100, 9)]
    assert pareto_front(pts) == [1, 3]  # a is beaten by d on TPOT, c by everyone


def _trace(n: int = 120, rate: float = 12.0) -> Trace:
    return Trace.from_records(
        [
            {"req_id": f"r{i}", "arrival_time_s": i / rate, "prompt_len": 3000 if i % 3 == 0 else 200,
             "output_len": 60}
            for i in range(n)
        ],
        source="t",
    )  # fmt: skip


def test_break_even_bisects_to_where_disaggregation_stops_paying() -> None:
    """The bisection brackets the bandwidth: probes above the answer beat the target, the
    highest probe below it does not. From 1 Gbit/s, not the CLI's 0.1: the bracket is what is
    checked, and the run on a 0.1 Gbit/s link took 37 of the test's 46 s (the starved decode
    replica scans its waiting queue every step); at 1 Gbit/s, 3 s."""
    r = LayoutRunner(_trace(), model="llama-3.1-8b", gpu=None, ttft_ms=400, tpot_ms=20)
    dis = Layout(kind="disagg", prefill_replicas=1, decode_replicas=1)
    top = r.point(dis).goodput_per_gpu
    be = break_even_bandwidth(r, dis, 0.97 * top, "target", lo_gbps=1.0, iterations=5)
    assert be.gbps is not None and 1.0 < be.gbps < 400
    for gbps, g in be.probes:
        if gbps >= be.gbps - 1e-9:
            assert g > 0.97 * top
    below = [g for gbps, g in be.probes if gbps < be.gbps - 1e-9]
    assert below and all(g <= 0.97 * top for g in below)  # bisection keeps only losers below the answer
    never = break_even_bandwidth(r, dis, 10 * top, "target")
    assert never.gbps is None and "does not beat" in never.note and len(never.probes) == 1


def test_compare_layouts_recommends_a_front_point_and_explains_it() -> None:
    r = LayoutRunner(_trace(), model="llama-3.1-8b", gpu=None, ttft_ms=400, tpot_ms=20)
    ans = compare_layouts(r, 2, tps=(1, 2), break_even=False)
    labels = [p.label for p in ans.points]
    assert labels == ["agg 2xTP1", "agg 1xTP2", "1P1D TP1/TP1"]
    front = [p.label for p in ans.points if p.pareto]
    best = max(ans.points, key=lambda p: p.goodput_per_gpu)
    assert ans.choice is not None and ans.choice.lead in front and ans.choice.lead == best.label
    # Issue 46.3: every layout serves all 120 requests within the SLO, so the lead (agg 1xTP2,
    # formerly the answer) is only equivalent to the simpler agg 2xTP1, which is recommended.
    assert all(p.good_requests == p.num_requests and p.meets_p99 for p in ans.points)
    assert ans.recommended == "agg 2xTP1" and ans.choice.recommended == ans.recommended
    assert ans.reasons[0].startswith(ans.recommended)
    assert any("disaggregation buys" in x or "aggregated wins" in x for x in ans.reasons)
    assert any("equivalent, so the simpler agg 2xTP1" in x for x in ans.reasons)
    assert ans.fewest_gpus is not None and ans.fewest_gpus.gpus == 1  # the budget was 2
    assert ans.fewest_gpus.note in ans.reasons and ans.break_even_note is None  # not asked: no line


BASE = [
    "tune",
    "poisson_20_rps",
    "-n",
    "150",
    "--step-time-ms",
    "10",
    "--layouts",
    "agg,disagg",
    "--gpus",
    "2",
]


def test_cli_json_document() -> None:
    res = runner.invoke(app, [*BASE, "--slo", "ttft_p99_ms=200,tpot_p99_ms=20", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)["layouts"]
    assert doc["gpus"] == 2 and doc["slo"] == {"ttft_ms": 200.0, "tpot_ms": 20.0}
    assert {p["label"] for p in doc["points"]} == {"agg 2xTP1", "1P1D TP1/TP1"}  # a fixed step time: TP 1
    assert doc["recommended"] in {p["label"] for p in doc["points"] if p["pareto"]}
    assert doc["break_even"]["against"] == doc["best_agg"]
    assert doc["break_even"]["probes"][0][0] == 400.0


def test_cli_human_output() -> None:
    res = runner.invoke(app, [*BASE, "--no-break-even", "--link", "tcp-25g"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())  # the console wraps long lines
    assert "poisson_20_rps: 150 requests, 2 GPUs" in out
    assert "per-request SLO for goodput: none (every request counts); disaggregated over tcp-25g" in out
    assert "agg 2xTP1" in out and "1P1D TP1/TP1" in out and "goodput/GPU" in out
    assert "recommended: " in out and "break-even" not in out


def test_cli_bad_input_names_the_flag() -> None:
    res = runner.invoke(app, ["tune", "poisson_20_rps", "-n", "20", "--layouts", "agg,disagg"])
    assert res.exit_code != 0 and "--gpus" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, [*BASE, "--decode-max-seqs", "x"])
    assert res.exit_code != 0 and "--decode-max-seqs" in res.output
    res = runner.invoke(app, [*BASE, "--link", "carrier-pigeon"])
    assert res.exit_code != 0 and "unknown link" in res.output


class _Scripted(LayoutRunner):
    """A runner whose goodput per GPU (and share of requests served within the SLO) is given per
    layout kind: the decision logic alone."""

    def __init__(self, per_gpu: dict[str, float], served: dict[str, float] | None = None) -> None:
        super().__init__(_trace(4), model="llama-3.1-8b", gpu=None, step_time_ms=10)
        self.per_gpu = per_gpu
        self.served = served or {}

    def point(self, lay: Layout, bandwidth_gbps: float | None = None) -> LayoutPoint:
        g = self.per_gpu[lay.kind]
        good = round(100 * self.served.get(lay.kind, 1.0))
        update = {"layout": lay, "gpus": lay.gpus, "good_requests": good, "num_requests": 100}
        return _pt(lay.label, g, 100.0, 10.0).model_copy(update=update)


def test_a_lead_that_does_not_hold_on_fresh_seeds_is_not_recommended() -> None:
    """Disaggregated leads on the search trace (1.1 vs 1.0 per GPU) but trails on both fresh
    seeds (0.9): the aggregated layout is recommended, and the reasons say why."""
    ans = compare_layouts(
        _Scripted({"agg": 1.0, "disagg": 1.1}),
        2,
        tps=(1,),
        break_even=False,
        fresh=lambda seed: _Scripted({"agg": 1.0, "disagg": 0.9}),
        verify_seeds=[1000, 1001],
    )
    v = ans.verification
    assert v is not None and v.recommended == "1P1D TP1/TP1" and v.against == "agg 2xTP1"
    assert not v.holds and v.wins == 0 and [c.seed for c in v.checks] == [1000, 1001]
    assert ans.recommended == "agg 2xTP1"
    assert any("led on the search trace but not on 2 fresh seeds" in r for r in ans.reasons)
    # Issue 46.3: a lead that holds by 5 % (inside the model's 13 % error) is only equivalent: the
    # simpler, aggregated layout is recommended (it was the disaggregated lead before).
    close = compare_layouts(
        _Scripted({"agg": 1.0, "disagg": 1.1}),
        2,
        tps=(1,),
        break_even=False,
        fresh=lambda seed: _Scripted({"agg": 1.0, "disagg": 1.05}),
        verify_seeds=[1000],
    )
    assert close.verification is not None and close.verification.holds
    assert close.recommended == "agg 2xTP1" and close.choice is not None
    assert (
        close.choice.comparisons[0].outcome == "agg 2xTP1" and close.choice.comparisons[0].verdict.equivalent
    )
    # Beyond the noise (and the aggregated layout serving only 60 % within the SLO) the lead stays.
    kept = compare_layouts(
        _Scripted({"agg": 0.6, "disagg": 1.1}, {"agg": 0.6}),
        2,
        tps=(1,),
        break_even=False,
        fresh=lambda seed: _Scripted({"agg": 0.6 + seed % 2 / 100, "disagg": 1.0}, {"agg": 0.6}),
        verify_seeds=[1000, 1001],
    )
    assert kept.recommended == "1P1D TP1/TP1" and kept.verification is not None and kept.verification.holds
    assert kept.choice is not None and kept.choice.comparisons[0].verdict.winner == "b"


def test_cli_document_is_stamped_verified_and_reported(tmp_path: Path) -> None:
    out = tmp_path / "layouts.json"
    res = runner.invoke(app, [*BASE, "--no-break-even", "--verify-seeds", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    human = " ".join(res.stdout.split())
    assert "fresh seeds (" in human and "1000: " in human and "1001: " in human
    doc = json.loads(out.read_text())
    assert doc["kind"] == "layouts" and doc["schema_version"] == 1
    v = doc["layouts"]["verification"]
    assert [c["seed"] for c in v["checks"]] == [1000, 1001]
    assert v["note"] in doc["layouts"]["reasons"]
    rep = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "rep")])
    assert rep.exit_code == 0, rep.output
    md = (tmp_path / "rep" / "report.md").read_text()
    assert f"aggregated or disaggregated? 2 GPUs: {doc['layouts']['recommended']}" in md
    assert "fresh seeds: " in md and "| 1000 |" in md
    assert (tmp_path / "rep" / "report.html").exists()


def test_a_layout_s_good_requests_are_the_engine_s_good_mask() -> None:
    """Layouts count good requests by ``engine.results.good_mask``, the test of every run: the
    same thresholds, and also each request's own SLA in the trace (here: ten requests with a 1 ms
    TTFT SLA no layout can meet), in either kind of layout."""
    plain = _trace(60)
    tight = Trace.from_records(
        [
            {**r.model_dump(exclude_none=True), **({"sla_ttft_ms": 1.0} if i < 10 else {})}
            for i, r in enumerate(plain.records())
        ],
        source="t",
    )
    for lay in (Layout(kind="agg", replicas=2), Layout(kind="disagg", prefill_replicas=1, decode_replicas=1)):
        a = LayoutRunner(plain, model="llama-3.1-8b", gpu=None, ttft_ms=1e6).point(lay)
        b = LayoutRunner(tight, model="llama-3.1-8b", gpu=None, ttft_ms=1e6).point(lay)
        assert a.good_requests == 60 and b.good_requests == 50, lay.label
        assert b.goodput_rps == pytest.approx(a.goodput_rps * 50 / 60)
