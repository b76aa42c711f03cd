"""``servesim simulate --data-parallel-size D --enable-expert-parallel`` from a user's shell: the
layout said in ``timed as``, the ranks' line, the JSON document, the refusals, the ``vllm serve``
command, and DP 1 leaving every result as it was."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
MOE = ["--model", "qwen3-30b-a3b", "--gpu", "h100"]


def _trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    rows = [
        {"req_id": f"r{i}", "arrival_time_s": 0.05 * i, "prompt_len": 200 + 37 * i, "output_len": 8 + i}
        for i in range(12)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dp_1_is_byte_identical(tmp_path: Path) -> None:
    """``--data-parallel-size 1`` (vLLM's default) is today's run, byte for byte, and its spec
    carries no new key."""
    trace = str(_trace_file(tmp_path))
    plain = runner.invoke(app, ["simulate", trace, *MOE, "--json"])
    dp1 = runner.invoke(app, ["simulate", trace, *MOE, "--json", "--data-parallel-size", "1"])
    assert plain.exit_code == 0, plain.output
    assert dp1.stdout_bytes == plain.stdout_bytes
    assert "data_parallel" not in plain.stdout


def test_dp_ep_human_output(tmp_path: Path) -> None:
    res = runner.invoke(
        app,
        [
            "simulate",
            str(_trace_file(tmp_path)),
            *MOE,
            "--data-parallel-size",
            "2",
            "--enable-expert-parallel",
        ],
    )
    assert res.exit_code == 0, res.output
    timed = next(line for line in res.stdout.splitlines() if line.startswith("timed as:"))
    assert "DP 2 x TP 1, experts EP 2 (64 of 128 per GPU): 2 engines (2 GPUs), in lockstep" in timed
    assert "12 requests" in res.stdout
    ranks = next(line for line in res.stdout.splitlines() if line.startswith("data parallel:"))
    assert ranks.startswith("data parallel: 2 ranks in lockstep, ")
    assert (
        "requests per rank 6, 6 (the totals' engine steps and busy time are summed over the ranks)" in ranks
    )


def test_dp_ep_json(tmp_path: Path) -> None:
    args = [
        "simulate",
        str(_trace_file(tmp_path)),
        *MOE,
        "--data-parallel-size",
        "2",
        "--enable-expert-parallel",
    ]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    spec = doc["setup"]["spec"]
    assert (spec["data_parallel_size"], spec["enable_expert_parallel"]) == (2, True)
    step = doc["step_time_model"]
    assert (step["kind"], step["moe_ep_size"], step["moe_tp_size"]) == ("roofline-dp", 2, 1)
    stats = step["data_parallel"]
    assert stats["lockstep"] and sum(stats["routed"]) == 12
    assert stats["group_steps"] > 0 and stats["dummy_rank_steps"] > 0
    assert doc["summary"]["num_finished"] == 12
    again = runner.invoke(app, [*args, "--json"])
    assert again.stdout_bytes == res.stdout_bytes  # deterministic


def test_dense_dp_ranks_are_independent(tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", str(_trace_file(tmp_path)), "--data-parallel-size", "3", "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)["step_time_model"]["data_parallel"]
    assert (stats["lockstep"], stats["routed"]) == (False, [4, 4, 4])


def test_refusals_name_the_flag(tmp_path: Path) -> None:
    trace = str(_trace_file(tmp_path))
    res = runner.invoke(app, ["simulate", trace, "--enable-expert-parallel", "--data-parallel-size", "2"])
    assert res.exit_code == 2
    assert "--enable-expert-parallel with llama-3.1-8b: a dense model has no experts" in res.output
    res = runner.invoke(app, ["simulate", trace, "--data-parallel-size", "2", "--step-time-ms", "5"])
    assert res.exit_code == 2 and "need a model on a GPU" in res.output
    res = runner.invoke(app, ["simulate", trace, "--data-parallel-size", "0"])
    assert res.exit_code == 2 and "--data-parallel-size" in res.output


def test_vllm_serve_command_carries_the_flags(tmp_path: Path) -> None:
    from servesim.report.build import serve_command
    from servesim.services.run import EngineConfig

    out = tmp_path / "dp.json"
    args = [
        "simulate",
        str(_trace_file(tmp_path)),
        *MOE,
        "--data-parallel-size",
        "2",
        "--enable-expert-parallel",
    ]
    assert runner.invoke(app, [*args, "--out", str(out)]).exit_code == 0
    doc = json.loads(out.read_text())
    cmd = serve_command(EngineConfig(**doc["config"]), 4096, doc["step_time_model"], None)
    assert "--tensor-parallel-size 1 --data-parallel-size 2 --enable-expert-parallel " in cmd


def test_cluster_and_speculation_refuse_dp(tmp_path: Path) -> None:
    """What is not modelled is refused, naming the flag: DP groups behind a router, a drafter
    inside a lockstep step."""
    from servesim.errors import ConfigError
    from servesim.spec import ClusterSpec, DeploymentSpec, resolve_cluster
    from servesim.traces.schema import Trace

    trace = Trace.from_records([{"req_id": "a", "arrival_time_s": 0.0, "prompt_len": 10, "output_len": 2}])
    spec = ClusterSpec(trace="t", deployment=DeploymentSpec(replicas=2, data_parallel_size=2))
    try:
        resolve_cluster(spec, trace)
        raise AssertionError("a DP cluster was resolved")
    except ConfigError as e:
        assert "deployment.data_parallel_size" in str(e)
    res = runner.invoke(
        app,
        [
            "simulate", str(_trace_file(tmp_path)), *MOE, "--data-parallel-size", "2",
            "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2}',
        ],
    )  # fmt: skip
    assert res.exit_code == 2 and "--speculative-config with --data-parallel-size" in res.output


def test_the_serve_command_passes_vllms_flag_table() -> None:
    """The emitted flags are vLLM 0.33's own (its committed flag table: names, types, bounds)."""
    import importlib
    import shlex
    import sys

    from servesim.services.tune import Deployment

    tools = str(Path(__file__).resolve().parents[2] / "tools")
    sys.path.insert(0, tools)
    try:
        check = importlib.import_module("check_vllm_commands")
        commands = importlib.import_module("vllm_commands")
    finally:
        sys.path.remove(tools)
    dep = Deployment(
        max_model_len=4096, tensor_parallel_size=2, data_parallel_size=4, enable_expert_parallel=True
    )
    assert dep.gpus == 8
    argv = shlex.split(dep.vllm_serve_command("qwen3-30b-a3b"))[2:]
    assert argv[1:7] == [
        "--tensor-parallel-size",
        "2",
        "--data-parallel-size",
        "4",
        "--enable-expert-parallel",
        "--max-model-len",
    ]
    assert check.table_problems(commands.Command("dp", argv), check.load_table()) == []
    plain = Deployment(max_model_len=4096)
    assert (
        "data_parallel_size" not in plain.model_dump() and "enable_expert_parallel" not in plain.model_dump()
    )


def test_cluster_runs_one_dp_deployment_as_its_ranks(tmp_path: Path) -> None:
    """``servesim cluster --replicas 1 --data-parallel-size 2``: the ranks are the nodes (dp0,
    dp1), the run the same as ``simulate``'s; more replicas, pools or failures are refused."""
    trace = str(_trace_file(tmp_path))
    flags = [*MOE, "--data-parallel-size", "2", "--enable-expert-parallel"]
    res = runner.invoke(app, ["cluster", trace, *flags, "--replicas", "1", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    sim = json.loads(runner.invoke(app, ["simulate", trace, *flags, "--json"]).stdout)
    text = json.dumps(doc)
    assert '"dp0"' in text and '"dp1"' in text
    assert doc["router"]["policy"] == "vllm_dp"
    assert doc["run"]["deployment"]["data_parallel_size"] == 2
    [row] = doc["strategies"]
    assert row["num_finished"] == sim["summary"]["num_finished"] == 12
    assert row["ttft_p99_ms"] == sim["summary"]["ttft_ms"]["p99"]
    human = runner.invoke(app, ["cluster", trace, *flags, "--replicas", "1"])
    assert human.exit_code == 0 and "experts EP 2" in human.stdout
    two = runner.invoke(app, ["cluster", trace, *flags])  # the default: 2 replicas
    assert two.exit_code == 2 and "give --replicas 1" in two.output
    fail = runner.invoke(app, ["cluster", trace, *flags, "--replicas", "1", "--fail", "dp0@0.1"])
    assert fail.exit_code == 2 and "not modelled" in fail.output
    pools = runner.invoke(
        app, ["cluster", trace, *flags, "--prefill-replicas", "1", "--decode-replicas", "1"]
    )
    assert pools.exit_code == 2 and "prefill/decode pools of data-parallel" in pools.output


def test_ep_over_tp_alone_changes_only_the_layout(tmp_path: Path) -> None:
    """``--enable-expert-parallel`` at DP 1: the experts split whole over the TP group (vLLM's
    ``ep_size = tp``); 128 experts over 2 GPUs weigh what slices of them do, so the run is TP 2's."""
    trace = str(_trace_file(tmp_path))
    tp2 = json.loads(runner.invoke(app, ["simulate", trace, *MOE, "--tp", "2", "--json"]).stdout)
    ep = json.loads(
        runner.invoke(
            app, ["simulate", trace, *MOE, "--tp", "2", "--enable-expert-parallel", "--json"]
        ).stdout
    )
    assert ep["setup"]["timed_as"] == tp2["setup"]["timed_as"] + "; TP 2, experts EP 2 (64 of 128 per GPU)"
    assert ep["summary"] == tp2["summary"] and ep["config"] == tp2["config"]


def test_perf_memory_sizes_one_ranks_gpu() -> None:
    """``perf memory --data-parallel-size 8 --enable-expert-parallel``: one rank's GPU with an
    eighth of the experts (the memory model's figure), DP 1 unchanged byte for byte."""
    from servesim.perf.expert_parallel import expert_shards
    from servesim.perf.memory import kv_capacity
    from servesim.services.perf import catalog

    base = [
        "perf",
        "memory",
        "--model",
        "qwen3-235b-a22b",
        "--gpu",
        "h200",
        "--tp",
        "1",
        "--max-model-len",
        "8192",
    ]
    res = runner.invoke(app, [*base, "--data-parallel-size", "8", "--enable-expert-parallel", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    m = catalog(None).model("qwen3-235b-a22b")
    want = kv_capacity(
        m, "h200", 1, max_model_len=8192, max_num_batched_tokens=8192, max_num_seqs=1024,
        expert_shards=expert_shards(m, 1, 8, True),
    )  # fmt: skip
    assert (doc["num_gpu_blocks"], doc["weight_bytes"]) == (want.num_gpu_blocks, want.weight_bytes)
    human = runner.invoke(app, [*base, "--data-parallel-size", "8", "--enable-expert-parallel"])
    assert "DP 8 x TP 1, EP" in human.stdout and "17,633" in human.stdout
    tp8 = ["perf", "memory", "--model", "qwen3-235b-a22b", "--gpu", "h200", "--tp", "8", "--json"]
    plain, dp1 = runner.invoke(app, tp8), runner.invoke(app, [*tp8, "--data-parallel-size", "1"])
    assert plain.exit_code == 0 and plain.stdout_bytes == dp1.stdout_bytes
    refused = runner.invoke(app, ["perf", "memory", "--enable-expert-parallel"])
    assert refused.exit_code == 2 and "a dense model has no experts" in refused.output
