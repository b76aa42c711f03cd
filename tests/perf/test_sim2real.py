"""sim2real: workload re-creation, the client-side replay, predictions in score.py's format."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from servesim.engine import EngineConfig
from servesim.perf import HardwareProfile, build_step_time_model
from servesim.perf.replay import ReplayOutcome, RequestSet, async_lag, replay, summarize_latencies
from servesim.perf.sim2real import (
    METRICS,
    RunSettings,
    ape_table,
    experiment_case,
    load_experiments,
    mape_summary,
    predict_experiments,
    run_experiment,
    sim2real_base_profile,
)
from servesim.perf.workload import SharedPrefixWorkload, shared_prefix_requests, stage_send_times


def test_fixture_experiments_load(sim2real_dir: Path) -> None:
    exps = load_experiments(sim2real_dir)
    assert len(exps) == 8
    assert {e.tp for e in exps} == {1, 2, 4}
    assert all(e.hardware == "H100" and e.max_num_seqs == 128 for e in exps)
    assert len({e.model_spec().name for e in exps}) == 6


def test_workload_rule(sim2real_dir: Path) -> None:
    exp = next(e for e in load_experiments(sim2real_dir) if e.id == "20260217-155451")
    wl = exp.spec
    rs = shared_prefix_requests(wl, seed=42)
    assert wl.stage_counts == [3000, 6000] and len(rs) == 9000
    assert rs.stage is not None and np.bincount(rs.stage).tolist() == [3000, 6000]
    assert np.all(np.diff(rs.scheduled) >= 0)
    # sends within each stage window; the last one exactly at the stage's end
    s0, s1 = rs.scheduled[rs.stage == 0], rs.scheduled[rs.stage == 1]
    assert s0.min() > 0 and s0.max() == pytest.approx(600.0) and s1.max() == pytest.approx(1200.0)
    assert s1.min() > 600.0
    assert set(rs.prompt_len.tolist()) == {566} and set(rs.output_len.tolist()) == {247}
    # inference-perf pre-generates one prompt per session: every round repeats it whole
    assert set(rs.prefix_len.tolist()) == {566}
    # 44 sessions: request i waits for request i - 44
    assert rs.predecessor is not None
    assert (
        rs.predecessor[:44].tolist() == [-1] * 44
        and rs.predecessor[44] == 0
        and rs.predecessor[-1] == 9000 - 45
    )
    groups = rs.prefix_group
    assert len(set(groups)) == 44
    assert all(groups[i] == groups[i + 44] for i in range(200))  # a session repeats its prompt
    # fresh questions: only the system prompt is shared, by the 4 users of each of 11 groups
    fresh = shared_prefix_requests(wl, seed=42, questions="fresh")
    assert set(fresh.prefix_len.tolist()) == {100} and len(set(fresh.prefix_group)) == 11
    assert all(fresh.prefix_group[i] == fresh.prefix_group[i + 44] for i in range(200))
    assert sorted(np.unique(fresh.prefix_group[:44], return_counts=True)[1].tolist()) == [4] * 11
    assert np.array_equal(fresh.scheduled, rs.scheduled)
    # seeded: same seed, same workload; another seed, another
    again = shared_prefix_requests(wl, seed=42)
    assert np.array_equal(again.scheduled, rs.scheduled) and again.prefix_group == rs.prefix_group
    assert not np.array_equal(shared_prefix_requests(wl, seed=7).scheduled, rs.scheduled)


def test_poisson_load_type() -> None:
    rng = np.random.default_rng(0)
    t = stage_send_times(5.0, 200.0, 100.0, rng, "poisson")
    assert t.min() >= 100 and t.max() <= 300 and abs(len(t) - 1000) < 120
    with pytest.raises(ValueError, match="load type"):
        stage_send_times(5.0, 10.0, 0.0, rng, "bursty")


def test_itl_mean_is_inference_perfs_definition() -> None:
    out = ReplayOutcome(
        send=np.zeros(3),
        ttft=np.array([0.1, 0.2, 0.3]),
        e2e=np.array([1.1, 2.2, 0.3]),
        num_output=np.array([11, 21, 1]),
        finished=np.ones(3, dtype=bool),
        rounds=1,
        converged=True,
        mean_shift_s=0.0,
        num_steps=0,
    )
    s = summarize_latencies(out)
    mean_e2e, mean_ttft, mean_out = 1200.0, 200.0, 11.0
    assert s["itl_mean"] == pytest.approx((mean_e2e - mean_ttft) / (mean_out - 1))
    assert s["tpot_mean"] == pytest.approx(100.0)  # per request 100 ms, one-token request left out
    assert s["e2e_p90"] == pytest.approx(np.percentile([1100, 2200, 300], 90))
    # the client counted fewer tokens than were generated (inference-perf re-tokenizes the text):
    # its itl_mean divides the same latencies by its own count; everything else is unchanged
    c = summarize_latencies(out, counted_output_tokens=9.0)
    assert c["itl_mean"] == pytest.approx((mean_e2e - mean_ttft) / (9.0 - 1))
    assert c["mean_output_tokens"] == mean_out and c["tpot_mean"] == s["tpot_mean"]


def test_async_lag() -> None:
    starts = np.array([0.0, 0.01, 0.03])
    durs = np.array([0.01, 0.02, 0.01])
    arrival = np.array([0.005, 0.015, 0.05, 0.02])
    first_sched = np.array([0.01, 0.03, 0.05, 0.02])  # the third found the engine idle, the fourth too
    assert async_lag(arrival, first_sched, starts, durs).tolist() == pytest.approx([0.01, 0.02, 0.0, 0.0])


def test_closed_loop_holds_one_request_per_session() -> None:
    wl = SharedPrefixWorkload.model_validate(
        {
            "shared_prefix": {
                "num_unique_system_prompts": 2,
                "num_users_per_system_prompt": 2,
                "system_prompt_len": 64,
                "question_len": 400,
                "output_len": 300,
            },
            "stages": [{"rate": 4.0, "duration": 15.0}],
        }
    )
    rs = shared_prefix_requests(wl, seed=1)
    st = build_step_time_model("llama-3.1-70b", "h100", 4, HardwareProfile(), max_num_batched_tokens=2048)
    cfg = EngineConfig(num_gpu_blocks=20000)
    prof = HardwareProfile(frontend_latency_s=0.005)
    out = replay(rs, cfg, st, prof)
    assert out.converged and out.rounds > 1
    assert rs.predecessor is not None
    has = rs.predecessor >= 0
    ready = out.send[rs.predecessor[has]] + out.e2e[rs.predecessor[has]]
    # every round waits for its session's previous one (up to the fixed point's tolerance)
    assert np.all(out.send[has] >= np.minimum(ready, out.send[has]) - 1e-9)
    assert np.mean(np.maximum(ready - out.send[has], 0)) < 0.05
    assert np.any(out.send > rs.scheduled + 1.0)  # ~20 s per request at 1 s per round: rounds are held back
    open_loop = replay(RequestSet(**{**rs.__dict__, "predecessor": None}), cfg, st, prof)
    assert open_loop.rounds == 1 and np.nanmean(open_loop.e2e) > np.nanmean(out.e2e)


def _short_copy(src: Path, dst: Path, duration: float = 20.0) -> Path:
    data = json.loads(src.read_text())
    for st in data["workload"]["spec"]["inference_perf"]["stages"]:
        st["duration"] = duration
    dst.mkdir(parents=True, exist_ok=True)
    out = dst / src.name
    out.write_text(json.dumps(data))
    return out


def test_smoke_predictions_validate_against_score_py(sim2real_dir: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    for name in ("62.json", "66.json"):
        _short_copy(sim2real_dir / name, data_dir)
    exps = load_experiments(data_dir)
    preds, infos = predict_experiments(exps, sim2real_base_profile(), RunSettings())
    for e in exps:
        assert set(preds[e.id]) == set(e.stage_keys)
        for stage in e.stage_keys:
            row = preds[e.id][stage]
            assert set(row) == set(METRICS)
            assert all(math.isfinite(v) and v > 0 for v in row.values())
        assert infos[e.id]["num_finished"] == infos[e.id]["num_requests"]
    pred_file = tmp_path / "pred.json"
    pred_file.write_text(json.dumps(preds))
    proc = subprocess.run(
        [
            sys.executable,
            str(sim2real_dir / "score.py"),
            str(pred_file),
            str(data_dir),
            "--json",
            str(tmp_path / "s.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "not a finite number" not in proc.stderr and "no usable prediction" not in proc.stderr
    scored = json.loads((tmp_path / "s.json").read_text())
    ours = scored["prediction"]["summary"]
    assert ours["e2e_mean"]["n"] == 2 and ours["itl_mean"]["median"] is not None
    # our own scorer agrees with score.py
    mine = mape_summary(ape_table(preds, exps))
    assert mine["ttft_mean"]["median"] == pytest.approx(ours["ttft_mean"]["median"])


def test_kv_blocks_setting_and_experiment_case(sim2real_dir: Path, tmp_path: Path) -> None:
    f = _short_copy(sim2real_dir / "62.json", tmp_path, duration=10.0)
    (exp,) = load_experiments(f)
    _, _, model_info = run_experiment(exp, sim2real_base_profile(), RunSettings(kv_blocks="model"))
    _, _, meas_info = run_experiment(exp, sim2real_base_profile(), RunSettings(kv_blocks="measured"))
    assert meas_info["num_gpu_blocks"] == exp.total_kv_blocks
    assert model_info["num_gpu_blocks"] != exp.total_kv_blocks
    assert abs(model_info["num_gpu_blocks"] / exp.total_kv_blocks - 1) < 0.05
    case = experiment_case(exp)
    assert set(case.targets) == {"0:ttft_mean", "0:itl_mean", "1:ttft_mean", "1:itl_mean"}


def test_generated_and_counted_output_tokens(sim2real_dir: Path, tmp_path: Path) -> None:
    """Llama-2-7B: every request generates max_tokens (inference-perf sends ignore_eos), but the
    client counted ~195 tokens per request; the scored itl_mean divides by that count."""
    f = _short_copy(sim2real_dir / "20260217-155451.json", tmp_path, duration=10.0)
    (exp,) = load_experiments(f)
    counted = exp.counted_output_tokens()
    assert set(counted) == {"-1", "0", "1"} and 190 < counted["-1"] < 200
    prof = sim2real_base_profile()
    pred, out, _ = run_experiment(exp, prof, RunSettings())
    assert set(out.num_output[out.finished].tolist()) == {247}
    gen, _, _ = run_experiment(exp, prof, RunSettings(itl_tokens="generated"))
    for stage in exp.stage_keys:
        assert pred[stage]["e2e_mean"] == gen[stage]["e2e_mean"]
        assert pred[stage]["itl_mean"] == pytest.approx(gen[stage]["itl_mean"] * 246 / (counted[stage] - 1))
    _, short, _ = run_experiment(exp, prof, RunSettings(output_tokens="implied"))
    assert set(short.num_output[short.finished].tolist()) == {round(counted["-1"])}
    case = experiment_case(exp)
    assert case.counted_output_tokens == counted
    assert experiment_case(exp, RunSettings(itl_tokens="generated")).counted_output_tokens == {}


def test_bad_experiment_files(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(ValueError, match="not a sim2real experiment"):
        load_experiments(tmp_path)
    (tmp_path / "x.json").write_text("[")
    with pytest.raises(ValueError, match="cannot read"):
        load_experiments(tmp_path)
    with pytest.raises(ValueError, match="no such"):
        load_experiments(tmp_path / "nope")
