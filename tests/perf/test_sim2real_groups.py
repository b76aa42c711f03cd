"""sim2real errors per model, TP degree, workload and MoE/dense: the groups partition the runs and
each group's figure is the median of its members' errors (worked by hand on the eight fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servesim.perf.sim2real import load_experiments
from servesim.perf.sim2real_groups import GROUP_KINDS, experiment_groups, group_medians


def test_groups_partition_the_runs_and_take_medians(sim2real_dir: Path) -> None:
    exps = load_experiments(sim2real_dir)
    # a made-up error per run: its index, so every median is checkable by hand
    apes = {e.id: {"e2e_mean": float(k), "ttft_mean": 10.0 * k} for k, e in enumerate(exps)}
    groups = group_medians(apes, exps)
    assert list(groups) == list(GROUP_KINDS)
    for kind in GROUP_KINDS:
        assert sum(row["n"] for row in groups[kind].values()) == len(exps)
    by_id = {e.id: experiment_groups(e) for e in exps}
    assert {g["tp"] for g in by_id.values()} == {"TP1", "TP2", "TP4"}
    assert [i for i, g in by_id.items() if g["architecture"] == "moe"] == ["17", "21", "48"]
    # ids sort as 17, 20260217-155451, 21, 48, 61, 62, 65, 66 -> errors 0..7
    assert groups["architecture"]["moe"] == {"n": 3.0, "e2e_mean": 2.0, "ttft_mean": 20.0}  # 0, 2, 3
    assert groups["tp"]["TP1"]["e2e_mean"] == pytest.approx((1 + 7) / 2)  # Llama-2-7B, Qwen2.5-7B
    assert groups["tp"]["TP4"] == {"n": 1.0, "e2e_mean": 4.0, "ttft_mean": 40.0}
    assert groups["workload"]["general"]["e2e_mean"] == 5.0  # 17, 62, 65 -> 0, 5, 6
    assert "itl_mean" not in groups["tp"]["TP2"]  # no run had it: no figure, not a zero
    # a run missing from the errors is left out of every group
    fewer = group_medians({k: v for k, v in apes.items() if k != "61"}, exps)
    assert "TP4" not in fewer["tp"]


def test_leave_one_out_reports_the_all_data_fit_beside_each_fold(sim2real_dir: Path, tmp_path: Path) -> None:
    """``sim2real --calibrate loo``: each run predicted by the fit without it, and its in-sample
    error (the all-data fit) beside it, per run and per group. Three short two-stage runs (a fold
    keeps two: 8 targets for 5 coefficients), one iteration a fit:
    the figures are not the point, which profile predicted what is."""
    import json

    from servesim.perf.sim2real import ape_table, calibrate_experiments, predict_experiments
    from servesim.services.calibration import Sim2RealRequest, sim2real

    d = tmp_path / "runs"
    d.mkdir()
    for name in ("20260217-155451.json", "62.json", "65.json"):
        data = json.loads((sim2real_dir / name).read_text())
        for st in data["workload"]["spec"]["inference_perf"]["stages"]:
            st["duration"] = 15
        (d / name).write_text(json.dumps(data))
    answer = sim2real(Sim2RealRequest(directory=d, calibrate="loo", max_iter=1), tmp_path / "pred.json")
    assert answer.in_sample_ape is not None and set(answer.in_sample_ape) == {"20260217-155451", "62", "65"}
    assert answer.groups is not None and answer.in_sample_groups is not None
    assert set(answer.in_sample_groups["tp"]) == {"TP1", "TP2"}
    # the same fits, made directly: the folds predict the table, the all-data fit the in-sample one
    exps = load_experiments(d)
    cal = calibrate_experiments(exps, settings=answer.settings, max_iter=1)
    folds, _ = predict_experiments(exps, cal.fold_profiles(), answer.settings)
    full, _ = predict_experiments(exps, cal.full.profile, answer.settings)
    assert answer.ape == ape_table(folds, exps)
    assert answer.in_sample_ape == ape_table(full, exps)
    assert answer.ape != answer.in_sample_ape  # a fold's profile is not the all-data one
    doc = answer.document(tmp_path / "pred.json", "loo")
    assert doc["in_sample_mape"]["itl_mean"]["n"] == 3.0 and "in_sample_groups" in doc
