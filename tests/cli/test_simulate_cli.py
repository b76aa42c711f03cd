"""`servesim simulate` / `servesim demo` / `servesim schema` from a user's shell."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()


def _trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    rows = [
        {"req_id": "a", "arrival_time_s": 0.0, "prompt_len": 300, "output_len": 20},
        {"req_id": "b", "arrival_time_s": 0.1, "prompt_len": 900, "output_len": 5},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_simulate_json_is_the_report_alone_on_stdout(tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", str(_trace_file(tmp_path)), "--json", "--slo", "ttft_p99_ms=100"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["summary"]["num_finished"] == 2
    assert [r["req_id"] for r in report["requests"]] == ["a", "b"]
    assert report["summary"]["slo"] == {"ttft_ms": 100.0, "tpot_ms": None, "e2e_ms": None}


def test_config_file_keys_and_kebab_flags_agree_and_flags_win(tmp_path: Path) -> None:
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("max_num_seqs: 1\nmax-num-batched-tokens: 256\nenable_prefix_caching: false\n")
    args = ["simulate", str(_trace_file(tmp_path)), "--config", str(cfg), "--json", "--step-time-ms", "10"]
    report = json.loads(runner.invoke(app, args).stdout)
    assert report["config"]["max_num_seqs"] == 1 and report["config"]["max_num_batched_tokens"] == 256
    assert report["step_time_model"] == {"kind": "constant", "step_time_s": 0.01}
    b = report["requests"][1]
    assert b["queue_ms"] > 100  # one sequence slot: b waits for a's 20 steps
    report2 = json.loads(runner.invoke(app, [*args, "--max-num-seqs", "4"]).stdout)
    assert report2["config"]["max_num_seqs"] == 4
    assert report2["requests"][1]["queue_ms"] <= 10.0 + 1e-9  # at most until the next step starts


def test_step_log_and_out_files(tmp_path: Path) -> None:
    log, out = tmp_path / "steps.jsonl", tmp_path / "r" / "report.json"
    res = runner.invoke(
        app,
        [
            "simulate",
            str(_trace_file(tmp_path)),
            "--step-log",
            str(log),
            "--out",
            str(out),
            "--step-time-ms",
            "5",
        ],
    )
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert lines[0]["scheduled_tokens"] == {"a": 300}
    assert sum(d["num_tokens"] for d in lines) == 300 + 19 + 900 + 4  # last sampled tokens are never fed back
    assert json.loads(out.read_text())["summary"]["num_steps"] == len(lines)
    assert "TTFT" in res.stdout  # humans get tables


def test_presets_generate_seeded_traces() -> None:
    a = runner.invoke(app, ["simulate", "poisson_50_rps", "--num-requests", "60", "--seed", "3", "--json"])
    b = runner.invoke(app, ["simulate", "poisson_50_rps", "--num-requests", "60", "--seed", "3", "--json"])
    assert a.exit_code == 0 and a.stdout == b.stdout
    assert json.loads(a.stdout)["summary"]["num_requests"] == 60


def test_bad_input_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("req_id,arrival_time_s,prompt_len,output_len\nx,0,-5,3\n")
    res = runner.invoke(app, ["simulate", str(bad), "--json"])
    assert res.exit_code == 0  # bad rows are dropped and reported, not fatal...
    assert json.loads(res.stdout)["summary"]["num_requests"] == 0
    for args in (
        ["simulate", str(bad), "--max-num-seqs", "4096", "--max-num-batched-tokens", "2048"],
        ["simulate", "no-such-trace"],
        [
            "simulate",
            str(_trace_file(tmp_path)),
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens",
            "512",
        ],
        ["simulate", str(_trace_file(tmp_path)), "--slo", "latency=5"],
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
        assert "Traceback" not in res.output


def test_schema_exports_the_boundary_models() -> None:
    res = runner.invoke(app, ["schema"])
    schemas = json.loads(res.stdout)
    for name in ("RequestRecord", "EngineConfig", "SimulationReport", "SLO"):
        assert name in schemas
    assert "max_num_batched_tokens" in schemas["EngineConfig"]["properties"]


def test_model_and_gpu_set_step_times_and_kv_blocks() -> None:
    args = ["simulate", "poisson_10_rps", "-n", "80", "--json", "--no-requests"]
    small = json.loads(runner.invoke(app, [*args, "--model", "llama-3.1-8b", "--gpu", "h100"]).stdout)
    big = json.loads(
        runner.invoke(app, [*args, "--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "4"]).stdout
    )
    assert small["config"]["num_gpu_blocks"] > 20_000  # ~55 GiB of KV at 2 MiB per block
    assert small["step_time_model"]["kind"] != "linear"
    assert big["summary"]["tpot_ms"]["mean"] > small["summary"]["tpot_ms"]["mean"]  # 70B decodes slower
    res = runner.invoke(app, [*args, "--model", "no-such-model"])
    assert res.exit_code == 2 and "llama-3.1-8b" in res.stderr  # the known names are listed
    res = runner.invoke(app, [*args, "--model", "llama-3.1-70b", "--gpu", "l4"])
    assert res.exit_code == 2  # 70B weights do not fit one L4: the numbers and the way out
    error = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "GiB" in error[0] and "TP" in error[0]


def test_kv_offloading_size_runs_the_cpu_tier_and_a_fixed_step_time_refuses_it() -> None:
    """--kv-offloading-size builds vLLM's CPU-offload connector for the model on the GPU (it used
    to stop with 'needs a connector'); without a model to size it in, one line says why."""
    from typer.testing import CliRunner

    from servesim.cli.main import app

    res = CliRunner().invoke(app, ["simulate", "bursty", "-n", "60", "--kv-offloading-size", "8", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["config"]["kv_offloading_size"] == 8
    bad = CliRunner().invoke(
        app, ["simulate", "bursty", "-n", "20", "--kv-offloading-size", "8", "--step-time-ms", "5"]
    )
    assert bad.exit_code == 2 and "kv_offloading_size needs a model on a GPU" in bad.stderr, bad.output


def test_kv_offloading_size_beyond_host_memory_is_one_line_everywhere(tmp_path: Path) -> None:
    """Issue 31: --kv-offloading-size 100000 (100 TB) used to run; now simulate, cluster (a
    --config key), dashboard and emulate refuse it before any work, naming the field and the
    limit (256 GiB per GPU, twice that on TP 2, which runs)."""
    from typer.testing import CliRunner

    from servesim.cli.main import app

    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("kv_offloading_size: 100000\n")
    for argv in (
        ["simulate", "bursty", "-n", "20", "--kv-offloading-size", "100000"],
        ["cluster", "bursty", "-n", "20", "--replicas", "2", "-c", str(cfg)],
        ["dashboard", "bursty", "-n", "20", "--kv-offloading-size", "100000"],
        ["emulate", "--kv-offloading-size", "100000"],
    ):
        res = CliRunner().invoke(app, argv)
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1, (argv, res.output)
        assert "kv_offloading_size 100000 GiB exceeds" in lines[0] and "at most 256 GiB" in lines[0], argv
    ok = CliRunner().invoke(
        app, ["simulate", "bursty", "-n", "20", "--kv-offloading-size", "300", "--tp", "2"]
    )
    assert ok.exit_code == 0, ok.output
    over = CliRunner().invoke(
        app, ["simulate", "bursty", "-n", "20", "--kv-offloading-size", "600", "--tp", "2"]
    )
    assert over.exit_code == 2 and "at most 512 GiB" in over.stderr


def _multi_turn_trace(path: Path, convs: int = 24, turns: int = 4) -> Path:
    """Conversations whose every turn repeats the previous turns' tokens (the GPU cache, 600
    blocks, cannot hold them from one turn to the next; a CPU tier of 16 GiB can)."""
    rows = [
        {
            "req_id": f"c{c}t{t}",
            "arrival_time_s": t * 6.0 + c * 0.05,
            "prompt_len": 1600 + 500 * t,
            "output_len": 40,
            "prefix_group": f"conv{c}",
            "prefix_len": 1500 + 500 * t,
        }
        for t in range(turns)
        for c in range(convs)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_trace_replay_reports_the_cpu_tier_in_json_and_in_the_human_output(tmp_path: Path) -> None:
    """Issue 31.4: simulate's summary carries the tier's figures (GPU and CPU prefix-hit rates,
    tokens loaded, stored, recomputed) and the human output prints them in a table; without
    --kv-offloading-size neither appears and the figures are those of the plain engine."""
    trace = str(_multi_turn_trace(tmp_path / "mt.jsonl"))
    base = ["simulate", trace, "--num-gpu-blocks", "600"]
    doc = json.loads(
        runner.invoke(app, [*base, "--kv-offloading-size", "16", "--json", "--no-requests"]).stdout
    )
    off = doc["summary"]["offload"]
    assert off["loaded_tokens"] > 0 and off["stored_tokens"] > 0 and off["load_jobs"] > 0
    assert off["cpu_hit_rate"] > 0.5 and off["gpu_hit_rate"] == doc["summary"]["prefix_cache_hit_rate"]
    assert off["recomputed_tokens"] == doc["summary"]["recomputed_tokens"]
    # the views the report and the web read carry the same table
    tables = {t["key"]: t for sec in doc["sections"] if sec["key"] == "simulation" for t in sec["tables"]}
    assert dict((r[0], r[1]) for r in tables["offload"]["rows"])["tokens loaded from CPU"].startswith(
        f"{off['loaded_tokens']:,} "
    )
    plain = json.loads(runner.invoke(app, [*base, "--json", "--no-requests"]).stdout)
    assert plain["summary"]["offload"] is None
    assert plain["summary"]["ttft_ms"]["p50"] > doc["summary"]["ttft_ms"]["p50"]  # the loads pay off

    human = runner.invoke(app, [*base, "--kv-offloading-size", "16"], env={"COLUMNS": "160"})
    assert human.exit_code == 0, human.output
    assert "CPU offload tier" in human.stdout
    assert f"{off['cpu_hit_rate']:.1%}" in human.stdout and f"{off['loaded_tokens']:,}" in human.stdout
    assert f"{off['stored_tokens']:,}" in human.stdout and "tokens recomputed" in human.stdout
    assert "CPU offload tier" not in runner.invoke(app, base, env={"COLUMNS": "160"}).stdout


def test_speculative_config_flag_shows_acceptance_in_human_and_json(tmp_path: Path) -> None:
    """vLLM's --speculative-config JSON turns speculation on; the human output says the accepted
    tokens per step, --json carries the same figures; a bad value is one line naming the flag."""
    flag = ["--speculative-config", '{"method":"eagle3","num_speculative_tokens":3}']
    human = runner.invoke(app, ["simulate", str(_trace_file(tmp_path)), *flag])
    assert human.exit_code == 0, human.output
    assert "speculative decoding" in human.stdout and "eagle3, k = 3" in human.stdout
    assert "accepted tokens per step" in human.stdout
    res = runner.invoke(app, ["simulate", str(_trace_file(tmp_path)), *flag, "--json"])
    sp = json.loads(res.stdout)["summary"]["speculative"]
    assert sp["method"] == "eagle3" and sp["num_speculative_tokens"] == 3 and sp["verifications"] > 0
    assert f"{sp['mean_acceptance_length']:.2f} per request" in human.stdout
    off = runner.invoke(app, ["simulate", str(_trace_file(tmp_path)), "--json"])
    assert "speculative" not in json.loads(off.stdout)["summary"]
    bad = runner.invoke(
        app, ["simulate", str(_trace_file(tmp_path)), "--speculative-config", '{"method":"x"}']
    )
    assert (
        bad.exit_code == 2 and bad.stderr.startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1
    )
    for value, said in (  # the JSON's key is named, in the library's words (the web's 422 too)
        ('{"method":"eagle3","num_speculative_tokens":0}', "num_speculative_tokens: Input should be greater"),
        (
            '{"method":"eagle3","num_speculative_tokens":3,"acceptance_rates":[2]}',
            "acceptance_rates: at least one",
        ),
    ):
        bad = runner.invoke(app, ["simulate", str(_trace_file(tmp_path)), "--speculative-config", value])
        assert bad.exit_code == 2 and bad.stderr.startswith(f"error: --speculative-config: {said}"), (
            bad.stderr
        )


def test_a_draft_model_servesim_does_not_know_is_one_line_naming_the_key(tmp_path: Path) -> None:
    """method draft_model times the catalog model ``speculative_config.model`` names: an unknown
    one is one line naming the key and listing the choices, never a traceback."""
    value = '{"method":"draft_model","model":"nope","num_speculative_tokens":3}'
    bad = runner.invoke(app, ["simulate", str(_trace_file(tmp_path)), "--speculative-config", value])
    assert bad.exit_code == 2, bad.output
    line = bad.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in bad.output
    assert line.startswith("error: speculative_config.model 'nope' is not a model of servesim's catalog")
    assert "llama-3.2-1b" in line and "draft_step_fraction" in line
    ok = '{"method":"draft_model","model":"llama-3.2-1b","num_speculative_tokens":3}'
    res = runner.invoke(app, ["simulate", str(_trace_file(tmp_path)), "--speculative-config", ok, "--json"])
    assert res.exit_code == 0, res.output
    sp = json.loads(res.stdout)["summary"]["speculative"]
    assert sp["draft_timing"].startswith("draft model llama-3.2-1b on 1 x h100") and sp["draft_time_s"] > 0
    human = runner.invoke(app, ["simulate", str(_trace_file(tmp_path)), "--speculative-config", ok])
    assert human.exit_code == 0 and f"{sp['draft_time_s']:.2f} s of the drafter's passes" in human.stdout


def test_a_speculative_config_the_engine_cannot_use_is_one_line(tmp_path: Path) -> None:
    """Issue 47: a seed past 2**63 - 1 simulated and then failed writing JSON (a traceback);
    unknown keys, booleans for numbers and draft_model without a model are refused at the flag."""
    for value, said in (
        (
            '{"method":"ngram","num_speculative_tokens":3,"acceptance_seed":18446744073709551616}',
            "acceptance_seed: Input should be less than or equal to 9223372036854775807",
        ),
        ('{"method":"ngram","num_speculative_tokens":true}', "num_speculative_tokens: expected an integer"),
        (
            '{"method":"ngram","num_speculativ_tokens":3}',
            "num_speculativ_tokens: unknown key; did you mean 'num_speculative_tokens'?",
        ),
        (
            '{"method":"draft_model","num_speculative_tokens":3}',
            "model: method 'draft_model' needs the draft",
        ),
    ):
        bad = runner.invoke(
            app, ["simulate", str(_trace_file(tmp_path)), "--speculative-config", value, "--json"]
        )
        assert bad.exit_code == 2, bad.output
        assert bad.stderr.startswith(f"error: --speculative-config: {said}"), bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.output
