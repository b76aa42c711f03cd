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
