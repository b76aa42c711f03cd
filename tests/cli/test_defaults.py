"""One default deployment and one SLO syntax for every command.

The same input must not be timed by a linear stand-in in one command and by Llama-3.1-8B on an
H100 in another: every command goes through ``servesim.replica_setup`` and says, on the first
line of its human output, what timed it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import servesim
from servesim.cli.main import app

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _trace(tmp_path: Path) -> str:
    path = tmp_path / "t.csv"
    rows = [f"r{i},{i * 0.05},{200 + 10 * i},{8 + i % 5}" for i in range(20)]
    path.write_text("req_id,arrival_time_s,prompt_len,output_len\n" + "\n".join(rows) + "\n")
    return str(path)


def _ok(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return res.stdout


def test_simulate_defaults_to_the_calibrated_8b_on_one_h100(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    report = json.loads(_ok(["simulate", trace, "--json"]))
    model = report["step_time_model"]
    assert (model["kind"], model["model"], model["gpu"], model["tp"]) == (
        "roofline",
        "llama-3.1-8b",
        "h100",
        1,
    )
    lib = servesim.replica_setup(max_model_len=servesim.load_trace(trace).default_max_model_len())
    assert report["config"]["num_gpu_blocks"] == lib.config.num_gpu_blocks  # the one library function
    first = _ok(["simulate", trace]).splitlines()[0]
    assert first.startswith("timed as: llama-3.1-8b on 1 x h100") and "default deployment" in first


def test_gpu_without_model_keeps_the_default_model_and_says_so(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    report = json.loads(_ok(["simulate", trace, "--gpu", "h200", "--json"]))
    assert (report["step_time_model"]["model"], report["step_time_model"]["gpu"]) == ("llama-3.1-8b", "h200")
    first = _ok(["simulate", trace, "--gpu", "h200"]).splitlines()[0]
    assert "llama-3.1-8b on 1 x h200" in first and "no model given: the default model" in first


def test_linear_and_constant_step_times_only_when_asked(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    lin = json.loads(_ok(["simulate", trace, "--linear-step-time", "--json"]))
    assert lin["step_time_model"]["kind"] == "linear"
    const = _ok(["simulate", trace, "--step-time-ms", "5"])
    assert const.splitlines()[0].startswith("timed as: every engine step 5 ms")
    both = runner.invoke(app, ["simulate", trace, "--step-time-ms", "5", "--gpu", "h100"])
    assert both.exit_code == 2 and "not both" in both.stderr


def test_cluster_and_advise_use_the_same_default(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    out = _ok(["cluster", trace, "--replicas", "2", "--recovery", "restart"])
    assert out.splitlines()[0].startswith("timed as: llama-3.1-8b on 1 x h100")
    adv = _ok(["advise", trace, "--advisor", "rules", "--optimize", "0"])
    assert adv.splitlines()[0].startswith("timed as: llama-3.1-8b on 1 x h100")


@pytest.mark.parametrize(
    "args",
    [
        ["reschedule", str(EXAMPLES / "interrupted.json")],
        ["recover", str(EXAMPLES / "failure.json"), "--no-manifests"],
        ["scenario", str(EXAMPLES / "inputs" / "s001_stable.input.json")],
    ],
)
def test_planning_commands_say_what_timed_them_first(args: list[str]) -> None:
    assert _ok(args).splitlines()[0].startswith("timed as: llama-3.1-8b on 1 x h100")


@pytest.mark.parametrize(
    "command",
    [["simulate", "{t}"], ["cluster", "{t}"], ["advise", "{t}", "--advisor", "rules"], ["saturate", "{t}"]],
)
def test_a_bare_slo_name_is_refused_with_the_right_spelling(tmp_path: Path, command: list[str]) -> None:
    trace = _trace(tmp_path)
    res = runner.invoke(app, [c.replace("{t}", trace) for c in command] + ["--slo", "ttft_ms=500"])
    assert res.exit_code == 2 and "ttft_p99_ms" in res.stderr, res.output


def test_the_p99_syntax_is_the_goodput_threshold_in_simulate(tmp_path: Path) -> None:
    report = json.loads(
        _ok(["simulate", _trace(tmp_path), "--slo", "ttft_p99_ms=100,tpot_p99_ms=50", "--json"])
    )
    assert report["summary"]["slo"] == {"ttft_ms": 100.0, "tpot_ms": 50.0, "e2e_ms": None}


# ------------------------------------------------------------------ one set of engine defaults
def _limits(config: dict[str, object]) -> tuple[object, object]:
    return config["max_num_seqs"], config["max_num_batched_tokens"]


@pytest.mark.parametrize(
    ("gpu", "want"), [("h100", (1024, 8192)), ("l4", (256, 2048)), ("a100-80gb", (256, 2048))]
)
def test_every_command_starts_from_what_vllm_serve_runs_on_the_gpu(
    tmp_path: Path, gpu: str, want: tuple[int, int]
) -> None:
    """simulate, dashboard, cluster, saturate and tune's baseline: vLLM 0.33's batch defaults for the
    GPU (1024/8192 on a >= 70 GiB non-A100, 256/2048 otherwise), and the results say so."""
    trace = _trace(tmp_path)
    g = ["--gpu", gpu]
    sim = json.loads(_ok(["simulate", trace, *g, "--json"]))
    assert _limits(sim["config"]) == want
    assert sim["setup"]["defaults_applied"] == {"max_num_seqs": want[0], "max_num_batched_tokens": want[1]}
    dash = json.loads(_ok(["dashboard", trace, *g, "--headless", "--json"]))
    assert _limits(dash["config"]) == want
    line = (
        f"defaults: max_num_seqs {want[0]:,}, max_num_batched_tokens {want[1]:,} "
        f"(what vllm serve runs on {gpu})"
    )
    clus = _ok(["cluster", trace, *g, "--replicas", "2", "--recovery", "restart"]).splitlines()
    assert clus[1] == line
    sat = json.loads(
        _ok(["saturate", trace, *g, "--min-rate", "10", "--max-rate", "20", "--seeds", "1", "--json"])
    )
    dep = sat["deployment"]
    assert (dep["max_num_seqs"], dep["max_num_batched_tokens"]) == want
    assert _ok(["simulate", trace, *g]).splitlines()[1] == line


def test_a_flag_given_is_kept_and_only_the_other_limit_is_defaulted(tmp_path: Path) -> None:
    sim = json.loads(_ok(["simulate", _trace(tmp_path), "--max-num-seqs", "64", "--json"]))
    assert _limits(sim["config"]) == (64, 8192)
    assert sim["setup"]["defaults_applied"] == {"max_num_batched_tokens": 8192}


@pytest.mark.parametrize("gpu", ["h100", "l40s"])
def test_perf_memory_sizes_the_kv_cache_simulate_runs_on(tmp_path: Path, gpu: str) -> None:
    """`perf memory` without batch flags answers for what `simulate` runs: vllm serve's limits on
    the GPU (it once sized the cache for 128 / 2048: 28,196 KV blocks on an H100 against
    simulate's 25,490, since the activation peak grows with the token budget)."""
    sim = json.loads(_ok(["simulate", _trace(tmp_path), "--gpu", gpu, "--json"]))
    mem = json.loads(_ok(["perf", "memory", "--model", "llama-3.1-8b", "--gpu", gpu, "--json"]))
    assert mem["num_gpu_blocks"] == sim["config"]["num_gpu_blocks"]
