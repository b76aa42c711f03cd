"""``--kv-cache-dtype`` (vLLM's ``CacheConfig.cache_dtype``) in simulate, tune, the cluster and the
web: an fp8 KV cache stores each element in one byte, so the same memory holds twice the tokens
(closed form below), the timed-as line says so, and vLLM's own refusals are refused here too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from parity import cli_json, upload, web_client, web_document, without, write_trace
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.perf import kv_capacity, load_catalog

runner = CliRunner()
MODEL = ["--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "4"]


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    rows = [
        {"req_id": f"r{i}", "arrival_time_s": i * 0.05, "prompt_len": 800 + 40 * i, "output_len": 30}
        for i in range(12)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _simulate(tmp_path: Path, *extra: str) -> dict[str, object]:
    res = runner.invoke(app, ["simulate", str(_trace(tmp_path)), *MODEL, *extra, "--json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, object] = json.loads(res.stdout)
    return doc


def test_fp8_kv_holds_twice_the_tokens_in_the_same_memory(tmp_path: Path) -> None:
    """vLLM sizes the cache as (memory left after weights and activations) // bytes per block;
    the bytes per block halve from bf16 to fp8, so the usable blocks double (± the floor)."""
    auto, fp8 = (_simulate(tmp_path, "--kv-cache-dtype", d)["config"] for d in ("auto", "fp8"))
    assert isinstance(auto, dict) and isinstance(fp8, dict)
    blocks = (auto["num_gpu_blocks"], fp8["num_gpu_blocks"])  # floor(memory / bytes per block) each
    assert blocks[1] in (2 * blocks[0], 2 * blocks[0] + 1), blocks
    assert fp8["kv_cache_dtype"] == "fp8" and auto["kv_cache_dtype"] == "auto"
    cap = kv_capacity("llama-3.1-70b", "h100", 4, kv_dtype="fp8")
    assert cap.kv_bytes_per_token * 2 == kv_capacity("llama-3.1-70b", "h100", 4).kv_bytes_per_token


def test_the_human_output_names_the_kv_dtype(tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", str(_trace(tmp_path)), *MODEL, "--kv-cache-dtype", "fp8"])
    assert res.exit_code == 0, res.output
    assert "timed as: llama-3.1-70b on 4 x h100, fp8 KV cache," in res.output
    plain = runner.invoke(app, ["simulate", str(_trace(tmp_path)), *MODEL])
    assert "KV cache," not in plain.output.split("\n")[0] + plain.output.split("\n")[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kv-cache-dtype", "float16"], "an explicit 16-bit KV cache must be the model's dtype (bfloat16)"),
        (
            ["--gpu", "mi300x", "--kv-cache-dtype", "fp8_e5m2"],
            "vLLM on ROCm stores an fp8 KV cache as fp8_e4m3",
        ),
        (["--kv-cache-dtype", "fp4"], "'fp4' is not one of"),
    ],
)
def test_what_vllm_refuses_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    res = runner.invoke(app, ["simulate", str(_trace(tmp_path)), *args])
    assert res.exit_code != 0
    assert message in res.output and "Traceback" not in res.output


def test_tune_keeps_the_dtype_in_every_trial_and_in_the_command(tmp_path: Path) -> None:
    """A study-wide key, like the scheduling policy: every trial runs with it, it is not counted
    as a change to make, and the recommended ``vllm serve`` command carries it."""
    args = [
        "tune", str(_trace(tmp_path)), "--kv-cache-dtype", "fp8", "--trials", "2", "--trial-seeds", "1",
        "--verify-seeds", "1", "--space", "replicas=1", "--space", "tensor_parallel_size=1",
        "--space", "max_num_seqs=64,128", "--slo", "ttft_p99_ms=5000", "--storage", "memory",
        "--executor", "local", "--json",
    ]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)["recommendation"]
    assert "--kv-cache-dtype fp8" in rec["vllm_serve_command"]
    assert rec["deployment"]["kv_cache_dtype"] == "fp8"
    assert all(c["flag"] != "kv_cache_dtype" for c in rec["changes"]), rec["changes"]


def test_kv_moves_between_replicas_as_it_is_stored() -> None:
    """Migration and P/D transfer costs read the KV bytes of the replicas' dtype; pools or
    replicas that store it differently are refused (the KV cannot move between them as is)."""
    from servesim.services.cluster import ClusterSpec

    base = {"trace": "t.jsonl", "deployment": {"model": "llama-3.1-8b", "engine": {"kv_cache_dtype": "fp8"}}}
    link = ClusterSpec.model_validate(base).link_spec()
    ctx, plain = link.context(), link.model_copy(update={"kv_dtype": "auto"}).context()
    assert ctx.kv_bytes_per_token_per_rank * 2 == plain.kv_bytes_per_token_per_rank
    mixed = {**base, "replicas": [{"name": "a"}, {"name": "b", "engine": {"kv_cache_dtype": "auto"}}]}
    with pytest.raises(Exception, match="replicas differ in kv_cache_dtype"):
        ClusterSpec.model_validate(mixed).link_spec()
    pools = {
        "trace": "t.jsonl",
        "disaggregated": {"prefill": {"engine": {"kv_cache_dtype": "fp8"}}, "decode": {}},
    }
    with pytest.raises(Exception, match="the KV moves between the pools as it is stored"):
        ClusterSpec.model_validate(pools)
    assert load_catalog().gpu("mi300x").vendor == "AMD"  # the ROCm rule above keys on it


def test_the_web_offers_the_dtype_and_gives_the_cli_s_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Run tab's engine fields come from ``EngineConfig``: the dtype is a choice there, and a
    simulation asked with it is the CLI's document (one question, one answer)."""
    write_trace(tmp_path, "trace.csv")
    cli = cli_json(["simulate", "trace.csv", "--kv-cache-dtype", "fp8", "--json"], tmp_path, monkeypatch)
    assert cli["config"]["kv_cache_dtype"] == "fp8"
    with web_client(tmp_path / "web") as client:
        flags = {f["name"]: f for f in client.get("/api/catalog").json()["engine_flags"]}
        assert "fp8" in str(flags["kv_cache_dtype"]), flags["kv_cache_dtype"]
        body = {
            "trace_id": upload(client, tmp_path / "trace.csv"),
            "deployment": {"engine": {"kv_cache_dtype": "fp8"}},
        }
        web = web_document(client, "/api/simulate", body)
    assert without(web, "requests") == without(cli, "requests")
