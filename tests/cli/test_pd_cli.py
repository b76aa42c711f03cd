"""`servesim cluster` disaggregated: prefill and decode pools, per-leg breakdown, bad input."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
BASE = ["cluster", "poisson_20_rps", "-n", "200", "--step-time-ms", "10"]


def test_pools_as_json_split_every_request_by_leg() -> None:
    res = runner.invoke(app, [*BASE, "--prefill-replicas", "1", "--decode-replicas", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["summary"]["num_requests"] == 200 == len(out["requests"])
    assert out["spec"]["prefill"]["replicas"] == 1 and out["spec"]["decode"]["replicas"] == 2
    assert {r["decode_replica"] for r in out["requests"]} == {"d0", "d1"}
    for r in out["requests"]:
        legs = sum(r[k] for k in ("prefill_queue_s", "prefill_s", "decode_queue_s", "transfer_s", "decode_s"))
        assert abs(legs - r["e2e_s"]) < 1e-9
        assert r["ttft_s"] >= r["prefill_s"] + r["transfer_s"]


def test_human_output_names_the_layout_and_the_legs() -> None:
    res = runner.invoke(
        app, [*BASE, "--prefill-replicas", "2", "--decode-replicas", "1", "--link", "tcp-25g"]
    )
    assert res.exit_code == 0, res.output
    assert "2P1D, link tcp-25g (25 Gbit/s per TP rank, 5 ms setup)" in res.stdout
    for leg in ("prefill_queue", "prefill", "decode_queue", "transfer", "decode", "TTFT p50/p99"):
        assert leg in res.stdout


def test_cluster_file_pools_and_short_prompt_threshold(tmp_path: Path) -> None:
    spec = tmp_path / "pd.yaml"
    spec.write_text(
        "prefill: {replicas: 1, config: {max_num_batched_tokens: 16384}}\n"
        "decode: {replicas: 1, config: {max_num_seqs: 64}}\nlink: rdma-200g\nshort_prompt_tokens: 100000\n"
    )
    res = runner.invoke(app, [*BASE, "--cluster", str(spec), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["summary"]["num_local"] == 200 and out["summary"]["transfer_gb"] == 0.0
    assert all(r["prefill_replica"] is None for r in out["requests"])


def test_bad_input_is_one_line() -> None:
    res = runner.invoke(app, [*BASE, "--prefill-replicas", "1", "--decode-replicas", "1", "--link", "pigeon"])
    assert res.exit_code == 2
    assert "unknown link 'pigeon'" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, [*BASE, "--prefill-replicas", "1"])
    assert res.exit_code == 2 and "--prefill-replicas and --decode-replicas go together" in res.output


def test_each_pool_has_its_own_gpu_and_tp(tmp_path: Path) -> None:
    spec = tmp_path / "pd.yaml"
    spec.write_text("prefill: {replicas: 1, gpu: h100, tp: 2}\ndecode: {replicas: 1, gpu: a100-80gb}\n")
    res = runner.invoke(app, ["cluster", "poisson_20_rps", "-n", "100", "--cluster", str(spec)])
    assert res.exit_code == 0, res.output
    timed = " ".join(res.stdout.split())
    assert "prefill llama-3.1-8b on 2 x h100" in timed and "decode llama-3.1-8b on 1 x a100" in timed


def test_fail_a_pool_replica_reports_what_failed_and_recovered() -> None:
    args = [
        *BASE,
        "--prefill-replicas",
        "2",
        "--decode-replicas",
        "2",
        "--fail",
        "decode:0@3",
        "--fail",
        "p1@4+2",
    ]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [(f["node"], f["pool"], f["time_s"], f["recover_after_s"]) for f in out["failures"]] == [
        ("d0", "decode", 3.0, None),
        ("p1", "prefill", 4.0, 2.0),
    ]
    s = out["summary"]
    assert s["num_requests"] == 200 and s["num_unfinished"] == 0
    assert sum(s["recoveries"].values()) == len(out["recoveries"]) > 0
    assert all(r["decode_replica"] != "d0" or r["e2e_s"] for r in out["requests"])
    human = runner.invoke(app, args)
    assert human.exit_code == 0, human.output
    text = " ".join(human.stdout.split())
    assert "d0 (decode) lost at 3 s, not back" in text
    assert "p1 (prefill) lost at 4 s, back after 2 s" in text
    assert "recovered (requests):" in text and "short-prompt threshold off" in text


def test_fail_names_a_replica_of_a_pool() -> None:
    res = runner.invoke(
        app, [*BASE, "--prefill-replicas", "1", "--decode-replicas", "1", "--fail", "decode:3@1"]
    )
    assert res.exit_code != 0 and "the decode pool has 1" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, [*BASE, "--prefill-replicas", "1", "--decode-replicas", "1", "--fail", "n0@1"])
    assert res.exit_code != 0 and "unknown replica" in res.output


def test_prompts_past_max_model_len_are_rejected_not_a_crash(tmp_path: Path) -> None:
    """A prefill replica refuses a prompt past its context (as vLLM answers 400): the request
    has that outcome, is left out of the latencies and counted; the rest run as usual."""
    trace = tmp_path / "t.csv"
    trace.write_text("req_id,arrival_time_s,prompt_len,output_len\na,0,100,5\nb,0.1,9000,5\nc,0.2,120,5\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("max_model_len: 4096\n")
    args = ["cluster", str(trace), "--step-time-ms", "10", "-c", str(cfg)]
    args += ["--prefill-replicas", "1", "--decode-replicas", "1"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["summary"]["num_rejected"] == 1 and out["summary"]["num_requests"] == 2
    assert [r["req_id"] for r in out["requests"]] == ["a", "c"]
    human = runner.invoke(app, args)
    assert human.exit_code == 0, human.output
    assert "rejected (not in the latencies): 1 of 3" in human.stdout


def test_slo_is_honoured_as_simulate_honours_it() -> None:
    args = [
        *BASE,
        "--prefill-replicas",
        "1",
        "--decode-replicas",
        "2",
        "--slo",
        "ttft_p99_ms=40,tpot_p99_ms=50",
    ]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    s = out["summary"]
    assert out["run"]["slo"] == {
        "ttft_p99_ms": 40.0,
        "tpot_p99_ms": 50.0,
        "e2e_p99_ms": None,
        "min_good_fraction": None,
    }
    assert s["slo"] == {"ttft_ms": 40.0, "tpot_ms": 50.0, "e2e_ms": None}
    # every request judged on the TTFT/TPOT it got over every leg
    good = [r["ttft_s"] * 1000 <= 40 and (r["tpot_s"] or 0.0) * 1000 <= 50 for r in out["requests"]]
    assert [r["good"] for r in out["requests"]] == good
    assert 0 < s["num_good"] == sum(good) < 200 and s["good_fraction"] == s["num_good"] / 200
    human = runner.invoke(app, args)
    assert human.exit_code == 0, human.output
    text = " ".join(human.stdout.split())
    verdict = "pass" if s["ttft_p99_ms"] <= 40 else "FAIL"
    assert f"SLO: TTFT p99 {s['ttft_p99_ms']:.1f} ms vs 40 ms {verdict}" in text
    assert f"goodput {s['goodput']:.2f} req/s ({s['num_good']} of 200 requests meet the SLO" in text


def test_without_slo_no_slo_keys_and_good_fraction_refused() -> None:
    res = runner.invoke(app, [*BASE, "--prefill-replicas", "1", "--decode-replicas", "1", "--json"])
    out = json.loads(res.stdout)
    assert not {"slo", "num_good", "goodput", "good_fraction"} & set(out["summary"])
    assert all("good" not in r for r in out["requests"])
    res = runner.invoke(
        app, [*BASE, "--prefill-replicas", "1", "--decode-replicas", "1", "--slo", "ttft_p99_ms=40,good=0.9"]
    )
    assert res.exit_code == 2 and "--slo good=FRACTION is judged by saturate and tune" in res.output
    res = runner.invoke(app, [*BASE, "--prefill-replicas", "1", "--decode-replicas", "1", "--slo", "ttft=4"])
    assert res.exit_code == 2 and "--slo 'ttft' names no percentile" in res.output


def test_out_writes_the_json_document(tmp_path: Path) -> None:
    """--out (every result command's) writes the document --json prints, after the human output."""
    out = tmp_path / "pd.json"
    args = [*BASE, "--prefill-replicas", "1", "--decode-replicas", "1"]
    res = runner.invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "per leg over" in res.stdout and res.stdout.endswith(f"result written to {out}\n")
    assert json.loads(out.read_text()) == json.loads(runner.invoke(app, [*args, "--json"]).stdout)


def test_an_aggregated_clusters_flags_are_refused_with_pools_not_dropped() -> None:
    pools = [*BASE, "--prefill-replicas", "1", "--decode-replicas", "1"]
    for extra in (["--replicas", "3"], ["--router", "round_robin"], ["--recovery", "restart"]):
        res = runner.invoke(app, [*pools, *extra])
        assert res.exit_code != 0, extra
        assert f"{extra[0]} is for an aggregated cluster" in res.output and "Traceback" not in res.output


def test_an_empty_trace_says_nothing_was_served_not_a_passing_slo(tmp_path: Path) -> None:
    trace = tmp_path / "empty.csv"
    trace.write_text("req_id,arrival_time_s,prompt_len,output_len\n")
    args = ["cluster", str(trace), "--step-time-ms", "10"]
    args += ["--prefill-replicas", "1", "--decode-replicas", "1"]
    res = runner.invoke(app, [*args, "--slo", "ttft_p99_ms=100"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert "no request was served (no requests): nothing to measure" in out
    assert "pass" not in out and "TTFT p50/p99" not in out
    doc = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert doc["summary"]["num_requests"] == 0 and doc["requests"] == []
