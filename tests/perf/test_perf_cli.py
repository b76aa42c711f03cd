"""The CLI: servesim perf models|gpus|memory|step|profiles, servesim calibrate, servesim sim2real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from calibration_helpers import synthetic_steps, write_step_csv
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.perf import HardwareProfile, load_catalog

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_models_and_gpus_json() -> None:
    code, out, _ = run("perf", "models", "--json")
    assert code == 0
    models = json.loads(out)
    assert "llama-3.1-70b" in models and models["llama-3.1-70b"]["num_kv_heads"] == 8
    code, out, _ = run("perf", "gpus", "--json")
    gpus = json.loads(out)
    assert code == 0 and gpus["h100"]["sources"]["bf16_flops"]
    code, out, _ = run("perf", "gpus")
    assert code == 0 and "mi300x" in out


def test_memory_json_and_table() -> None:
    code, out, _ = run("perf", "memory", "--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "1", "--json")
    assert code == 0
    cap = json.loads(out)
    assert cap["kv_bytes_per_token"] == 131072 and cap["num_gpu_blocks"] > 20000
    code, out, _ = run("perf", "memory", "--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "4")
    assert code == 0 and "KV cache" in out


def test_memory_caveats_reach_stderr_and_the_json() -> None:
    args = [
        "perf",
        "memory",
        "--model",
        "mixtral-8x7b",
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--max-model-len",
        "8192",
    ]
    code, out, err = run(*args, "--json")
    assert code == 0
    cap = json.loads(out)  # stdout stays one JSON document
    assert len(cap["caveats"]) == 1 and f"warning: {cap['caveats'][0]}" in err
    code, out, err = run(*args)
    assert code == 0 and "KV cache" in out and "not validated" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["perf", "memory", "--model", "llama-9", "--gpu", "h100"], "known models"),
        (["perf", "memory", "--model", "llama-3.1-8b", "--gpu", "tpu"], "known GPUs"),
        (["perf", "memory", "--model", "llama-3.1-70b", "--gpu", "h100"], "does not fit"),
        (["perf", "memory", "--model", "llama-3.1-8b", "--gpu", "l4"], "max_model_len"),
        (["perf", "step", "--model", "llama-3.1-8b", "--gpu", "h100"], "a step needs"),
        (["perf", "step", "--model", "llama-3.1-8b", "--gpu", "h100", "--prefill", "x"], "--prefill"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    code, out, err = run(*args)
    assert code == 2
    assert out == ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


def test_step_breakdown() -> None:
    code, out, _ = run(
        "perf", "step", "--model", "mixtral-8x7b", "--gpu", "h100", "--tp", "2",
        "--decodes", "16", "--decode-ctx", "2000", "--prefill", "512:128", "--json",
    )  # fmt: skip
    assert code == 0
    d = json.loads(out)
    assert d["step_time_s"] > 0 and d["breakdown_s"]["experts_touched"] > 2
    code, out, err = run("perf", "step", "--model", "llama-3.1-8b", "--gpu", "l4", "--decodes", "4")
    assert code == 0 and "step time" in out and "warning:" in err  # no calibrated L4 profile


def test_profiles_listing_and_show(tmp_path: Path) -> None:
    code, out, _ = run("perf", "profiles", "--json")
    assert code == 0 and "h100" in json.loads(out)
    p = HardwareProfile(name="mine", step_overhead_s=0.002).save(tmp_path / "p.json")
    code, out, _ = run("perf", "profiles", str(p), "--json")
    assert code == 0 and json.loads(out)["step_overhead_s"] == 0.002


def test_calibrate_steps_cli(tmp_path: Path) -> None:
    cat = load_catalog()
    truth = HardwareProfile(gemm_compute_efficiency=0.6, step_overhead_s=0.0015)
    groups = [
        synthetic_steps(cat.model("llama-3.1-8b"), cat.gpu("h100"), 1, truth, n=60, seed=1),
        synthetic_steps(cat.model("qwen2.5-32b"), cat.gpu("h100"), 2, truth, n=60, seed=2),
    ]
    csv = write_step_csv(groups, tmp_path / "steps.csv")
    out_profile = tmp_path / "fitted.json"
    code, out, _ = run("calibrate", str(csv), "--base", "priors", "--out", str(out_profile), "--json")
    assert code != 0  # 'priors' is not a shipped profile name nor a file
    code, out, _ = run("calibrate", str(csv), "--out", str(out_profile), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["after"]["max_ape"] < 0.5
    fitted = HardwareProfile.load(out_profile)
    assert fitted.gemm_compute_efficiency == pytest.approx(0.6, rel=0.02)
    assert fitted.fitted_range is not None and fitted.fitted_range.gpu == "h100"
    code, out, _ = run("calibrate", str(csv))
    assert code == 0 and "after" in out


def test_calibrate_cli_bad_input(tmp_path: Path) -> None:
    f = tmp_path / "x.bin"
    f.write_text("nothing")
    code, _, err = run("calibrate", str(f))
    assert code == 2 and "give step-level .csv files, vllm bench .json files (or guidellm reports)" in err
    scrape = tmp_path / "x.txt"  # a .txt is a scrape: it needs its window, then must be one
    scrape.write_text("nothing")
    code, _, err = run("calibrate", str(scrape), "--model", "llama-3.1-8b", "--gpu", "h100")
    assert code == 2 and "needs --window-s" in err
    code, _, err = run(
        "calibrate", str(scrape), "--window-s", "60", "--model", "llama-3.1-8b", "--gpu", "h100"
    )
    assert code == 2 and "x.txt: not a Prometheus text exposition" in err
    j = tmp_path / "b.json"
    j.write_text("{}")
    code, _, err = run("calibrate", str(j))
    assert code == 2 and "--model and --gpu" in err


def test_sim2real_cli_smoke(sim2real_dir: Path, tmp_path: Path) -> None:
    data = json.loads((sim2real_dir / "62.json").read_text())
    for st in data["workload"]["spec"]["inference_perf"]["stages"]:
        st["duration"] = 10
    d = tmp_path / "data"
    d.mkdir()
    (d / "62.json").write_text(json.dumps(data))
    pred = tmp_path / "pred.json"
    code, out, _ = run("sim2real", str(d), "--out", str(pred), "--kv-blocks", "measured", "--json")
    assert code == 0, out
    res = json.loads(out)
    assert res["settings"]["kv_blocks"] == "measured"
    p = json.loads(pred.read_text())
    assert set(p["62"]) == {"-1", "0", "1"} and p["62"]["-1"]["itl_mean"] > 0
    code, _, err = run("sim2real", str(d), "--out", str(pred), "--profile", "h100", "--calibrate", "all")
    assert code == 2 and "exclude each other" in err


def _bench_json(tmp_path: Path) -> Path:
    f = tmp_path / "bench.json"
    f.write_text(
        json.dumps(
            {
                "num_prompts": 20,
                "completed": 20,
                "request_rate": 4.0,
                "burstiness": 1.0,
                "total_input_tokens": 20 * 300,
                "total_output_tokens": 20 * 30,
                "mean_ttft_ms": 40.0,
                "mean_tpot_ms": 8.0,
            }
        )
    )
    return f


def test_calibrate_bench_starts_from_vllm_serves_defaults(tmp_path: Path) -> None:
    """Like every other command, a bench run's server is vllm serve's defaults row for the GPU
    (1024 / 8192 on an H100; issue 46: it was 128 / 2048), and the output says so."""
    from servesim.perf.serve_defaults import vllm_serve_defaults

    seqs, budget = vllm_serve_defaults("h100")
    f = _bench_json(tmp_path)
    args = ("calibrate", str(f), "--model", "llama-3.1-8b", "--gpu", "h100", "--fit", "frontend_latency_s")
    code, out, err = run(*args, "--json")
    assert code == 0, err
    said = f"vllm serve's defaults on h100: max_num_seqs {seqs}, max_num_batched_tokens {budget}"
    assert (seqs, budget) == (1024, 8192) and any(said in n for n in json.loads(out)["notes"])
    code, _, err = run(*args)
    assert code == 0 and said in " ".join(err.split()), err
    code, out, _ = run(*args, "--max-num-seqs", "128", "--max-num-batched-tokens", "2048", "--json")
    assert code == 0 and not any("defaults" in n for n in json.loads(out)["notes"])


def test_sim2real_cli_groups_timeout_and_open_loop(sim2real_dir: Path, tmp_path: Path) -> None:
    """--json carries the per-group medians (one run: each group's median is that run's APE); the
    client timeout and the session rule reach the settings; a negative timeout is one line."""
    data = json.loads((sim2real_dir / "62.json").read_text())
    for st in data["workload"]["spec"]["inference_perf"]["stages"]:
        st["duration"] = 10
    d = tmp_path / "data"
    d.mkdir()
    (d / "62.json").write_text(json.dumps(data))
    pred = tmp_path / "pred.json"
    args = ("sim2real", str(d), "--out", str(pred), "--json")
    code, out, _ = run(*args, "--request-timeout", "120", "--open-loop")
    assert code == 0, out
    res = json.loads(out)
    assert res["settings"]["request_timeout_s"] == 120.0 and res["settings"]["one_in_flight"] is False
    ape = res["ape"]["62"]
    groups = res["groups"]
    assert set(groups) == {"model", "tp", "workload", "architecture"}
    assert groups["tp"] == {"TP2": {"n": 1.0, **{m: ape[m] for m in ("e2e_mean", "ttft_mean", "itl_mean")}}}
    assert list(groups["architecture"]) == ["dense"] and list(groups["workload"]) == ["general"]
    assert "in_sample_ape" not in res  # only leave-one-out has an all-data fit beside it
    code, out, _ = run(*args, "--request-timeout", "0")
    assert code == 0 and json.loads(out)["settings"]["request_timeout_s"] is None
    code, _, err = run(*args, "--request-timeout", "-1")
    assert code == 2 and "--request-timeout" in err and "Traceback" not in err
