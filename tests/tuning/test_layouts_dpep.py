"""``tune --layouts agg,dpep``: a MoE model's data-parallel + expert-parallel layouts beside
replicas of TP, each run as ``simulate --data-parallel-size`` runs it, and ranked together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.errors import InputError
from servesim.services.inputs import TraceInput
from servesim.services.run import SimulateRequest, prepare
from servesim.spec import DeploymentSpec
from servesim.traces.schema import Trace
from servesim.tuning.layout_choice import simplicity
from servesim.tuning.layouts import Layout, LayoutRunner, layout_space

runner = CliRunner()


def _rows(n: int = 40, rate: float = 20.0) -> list[dict[str, object]]:
    return [
        {
            "req_id": f"r{i}",
            "arrival_time_s": i / rate,
            "prompt_len": 1500 if i % 4 == 0 else 300,
            "output_len": 30,
        }
        for i in range(n)
    ]


def test_space_holds_every_dp_x_tp_split() -> None:
    """8 GPUs: DP 8 x TP 1, DP 4 x TP 2, DP 2 x TP 4 (one rank is no data parallelism)."""
    space = layout_space(8, ("agg", "dpep"))
    labels = [lay.label for lay in space]
    assert labels == [
        "agg 8xTP1", "agg 4xTP2", "agg 2xTP4", "agg 1xTP8", "DP8xTP1+EP8", "DP4xTP2+EP8", "DP2xTP4+EP8",
    ]  # fmt: skip
    assert all(lay.gpus == 8 for lay in space)
    assert "dp" not in Layout(kind="agg", replicas=2, tp=4).model_dump()  # agg documents as before
    with pytest.raises(InputError, match="use agg, disagg, dpep"):
        layout_space(8, ("dp",))


def test_simpler_is_replicas_then_data_parallel() -> None:
    """At equal GPUs a data-parallel server counts as TP over all of them, after replicas."""
    agg = Layout(kind="agg", replicas=2, tp=4)
    dpep = Layout(kind="dpep", dp=2, tp=4)
    dp8 = Layout(kind="dpep", dp=8, tp=1)
    tp8 = Layout(kind="agg", replicas=1, tp=8)
    assert sorted([dp8, dpep, tp8, agg], key=simplicity) == [agg, tp8, dpep, dp8]


def test_dpep_point_is_the_simulate_run() -> None:
    """The layout's requests are those of ``simulate --data-parallel-size 2 --enable-expert-parallel``."""
    trace = Trace.from_records(_rows(), source="t")
    lay = Layout(kind="dpep", dp=2, tp=1)
    frame, _ = LayoutRunner(trace, model="qwen3-30b-a3b", gpu="h100").latencies(lay)
    spec = DeploymentSpec(
        model="qwen3-30b-a3b", gpu="h100", tp=1, data_parallel_size=2, enable_expert_parallel=True
    )
    req = SimulateRequest(trace=TraceInput(source="t"), deployment=spec)
    answer = prepare(req, trace=trace).run()
    assert frame["ttft_ms"].tolist() == answer.result.requests["ttft_ms"].tolist()
    with pytest.raises(InputError, match=r"llama-3\.1-8b is a dense model"):
        LayoutRunner(trace, model="llama-3.1-8b", gpu="h100").latencies(lay)


def test_tune_layouts_agg_dpep_cli(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    args = [
        "tune",
        str(path),
        "--model",
        "qwen3-30b-a3b",
        "--gpu",
        "h100",
        "--gpus",
        "2",
        "--layouts",
        "agg,dpep",
    ]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    points = {p["label"]: p for p in doc["layouts"]["points"]}
    assert set(points) == {"agg 2xTP1", "agg 1xTP2", "DP2xTP1+EP2"}
    assert points["DP2xTP1+EP2"]["layout"] == {
        **points["DP2xTP1+EP2"]["layout"],
        "kind": "dpep",
        "dp": 2,
        "tp": 1,
    }
    assert all(p["num_requests"] == 40 for p in points.values())
    human = runner.invoke(app, args)
    assert human.exit_code == 0, human.output
    assert "DP2xTP1+EP2" in human.stdout and "recommended:" in human.stdout


def test_the_views_name_the_data_parallel_kind() -> None:
    """The layouts table and the front chart say ``data-parallel + EP``, not disaggregated."""
    from servesim.tuning.layouts import compare_layouts
    from servesim.views.layouts import layouts_view

    trace = Trace.from_records(_rows(24), source="t")
    ans = compare_layouts(
        LayoutRunner(trace, model="qwen3-30b-a3b", gpu="h100"),
        2,
        ("agg", "dpep"),
        break_even=False,
        fewest_search=False,
    )
    section = layouts_view(ans)
    table = next(t for t in section.tables if t.key == "layouts")
    kinds = {row[0]: row[1] for row in table.rows}
    assert kinds == {
        "agg 2xTP1": "aggregated",
        "agg 1xTP2": "aggregated",
        "DP2xTP1+EP2": "data-parallel + EP",
    }
    front = next(s for s in section.series if s.key == "front")
    assert front.name == "aggregated" and [line.label for line in front.lines] == ["data-parallel + EP"]
    assert any(r.startswith("vs DP2xTP1+EP2:") or "DP2xTP1+EP2" in r for r in ans.reasons)


def test_three_kinds_verify_against_the_best_other_kind() -> None:
    """With agg, disagg and dpep the lead is re-run against the best layout of any other kind
    (the contender the choice ran), whichever kind that is."""
    from servesim.tuning.layouts import compare_layouts

    trace = Trace.from_records(_rows(24), source="t")
    run = LayoutRunner(trace, model="qwen3-30b-a3b", gpu="h100")
    ans = compare_layouts(
        run, 2, ("agg", "disagg", "dpep"), break_even=False, fewest_search=False,
        fresh=lambda s: run, verify_seeds=[1000],
    )  # fmt: skip
    assert ans.verification is not None
    lead = next(p for p in ans.points if p.label == ans.verification.recommended)
    others = [p for p in ans.points if p.layout.kind != lead.layout.kind]
    best = min(others, key=lambda p: (-p.goodput_per_gpu, p.ttft_p99_ms))
    assert ans.verification.against == best.label
    assert {p.layout.kind for p in ans.points} == {"agg", "disagg", "dpep"}
