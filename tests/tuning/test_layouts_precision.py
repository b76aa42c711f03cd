"""``tune --layouts`` with the checkpoint's format (issue 51): ``--quantization`` and
``--kv-cache-dtype`` are the deployment's, not knobs a layout tunes, so every layout runs with
them — the memory fit that decides which TP fits, every pool, every DP rank — and the
``vllm serve`` lines the answer prints carry them. Every other engine flag is still refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.services.inputs import TraceInput
from servesim.services.run import SimulateRequest, prepare
from servesim.spec import DeploymentSpec
from servesim.traces.schema import Trace
from servesim.tuning.layouts import Layout, LayoutRunner

runner = CliRunner()
FP8 = {"quantization": "fp8", "kv_cache_dtype": "fp8"}


def _rows(n: int = 30, rate: float = 10.0) -> list[dict[str, object]]:
    return [
        {
            "req_id": f"r{i}",
            "arrival_time_s": i / rate,
            "prompt_len": 1200 if i % 3 == 0 else 300,
            "output_len": 40,
        }
        for i in range(n)
    ]


def _trace_file(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    return path


def _layouts(tmp_path: Path, *flags: str) -> dict[str, Any]:
    args = ["tune", str(_trace_file(tmp_path)), "--layouts", "agg", "--no-break-even", "--verify-seeds", "1"]
    res = runner.invoke(app, [*args, *flags, "--json"])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)["layouts"]
    return out


def test_fp8_weights_fit_tp1_where_bf16_does_not(tmp_path: Path) -> None:
    """Llama-3.1-70B on H200, by hand: vLLM may use 0.9 x 140.4 GiB = 126.4 GiB of a GPU. In
    BF16 its 70.6e9 parameters are 2 bytes each, 131.4 GiB: no TP1 replica fits, whatever the
    start-up reserve. In FP8 the linear layers are 1 byte each; with the 2 x 1.05e9 embedding and
    LM-head parameters still 16-bit that is at most 70.6e9 + 2.1e9 bytes = 67.7 GiB, which leaves
    over 50 GiB for the reserve and the KV cache: two TP1 replicas are a layout of 2 GPUs."""
    bf16 = _layouts(tmp_path, "--model", "llama-3.1-70b", "--gpu", "h200", "--gpus", "2")
    assert [p["label"] for p in bf16["points"]] == ["agg 1xTP2"]
    assert any(
        r.startswith("agg 2xTP1 skipped: llama-3.1-70b does not fit h200 at TP=1") for r in bf16["reasons"]
    )
    fp8 = _layouts(
        tmp_path, "--model", "llama-3.1-70b", "--gpu", "h200", "--gpus", "2", "--quantization", "fp8"
    )
    assert sorted(p["label"] for p in fp8["points"]) == ["agg 1xTP2", "agg 2xTP1"]
    assert fp8["engine"] == {"quantization": "fp8"} and bf16["engine"] == {}


def test_a_layout_is_the_single_simulation_of_its_deployment() -> None:
    """A TP1 replica of the FP8 layout search runs exactly ``simulate --quantization fp8
    --kv-cache-dtype fp8 --tp 1``: the same TTFT of every request; without the keys it differs
    (they are not ignored)."""
    trace = Trace.from_records(_rows(), source="t")
    lay = Layout(kind="agg", replicas=1, tp=1)
    fp8, _ = LayoutRunner(trace, model="llama-3.1-8b", gpu="h100", engine=FP8).latencies(lay)
    bf16, _ = LayoutRunner(trace, model="llama-3.1-8b", gpu="h100").latencies(lay)
    spec = DeploymentSpec(model="llama-3.1-8b", gpu="h100", tp=1, engine=FP8)
    single = prepare(SimulateRequest(trace=TraceInput(source="t"), deployment=spec), trace=trace).run()
    assert fp8["ttft_ms"].tolist() == single.result.requests["ttft_ms"].tolist()
    assert fp8["tpot_ms"].tolist() == pytest.approx(single.result.requests["tpot_ms"].tolist(), nan_ok=True)
    assert fp8["ttft_ms"].tolist() != bf16["ttft_ms"].tolist()


def test_disaggregated_pools_carry_the_kv_dtype() -> None:
    """Both pools run the keys, so an FP8 KV transfer moves half the bytes per token of BF16's."""
    trace = Trace.from_records(_rows(), source="t")
    lay = Layout(kind="disagg", prefill_replicas=1, prefill_tp=1, decode_replicas=1, decode_tp=1)
    r8 = LayoutRunner(trace, model="llama-3.1-8b", gpu="h100", engine=FP8)
    r16 = LayoutRunner(trace, model="llama-3.1-8b", gpu="h100")
    per_token = [r._spec(lay).context().kv_bytes_per_token_per_rank for r in (r8, r16)]
    # llama-3.1-8b: 32 layers x 8 KV heads x 128 dims x (K and V) = 65,536 values per token
    assert per_token == [65_536, 131_072]
    lines = r8.commands(lay)
    assert len(lines) == 2 and all("--quantization fp8" in x and "--kv-cache-dtype fp8" in x for x in lines)


def test_cli_says_the_format_and_prints_serve_lines(tmp_path: Path) -> None:
    flags = ["--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", *("--quantization", "fp8")]
    flags += ["--kv-cache-dtype", "fp8"]
    doc = _layouts(tmp_path, *flags)
    assert doc["engine"] == FP8
    rec = next(p for p in doc["points"] if p["label"] == doc["recommended"])
    (line,) = doc["commands"]
    assert f"--tensor-parallel-size {rec['layout']['tp']} " in line
    assert "--quantization fp8" in line and "--kv-cache-dtype fp8" in line
    args = ["tune", str(_trace_file(tmp_path)), "--layouts", "agg", "--no-break-even", "--verify-seeds", "1"]
    human = runner.invoke(app, [*args, *flags], terminal_width=400)
    assert human.exit_code == 0, human.output
    assert "every layout runs quantization fp8, kv_cache_dtype fp8" in human.stdout
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size" in human.stdout


@pytest.mark.parametrize(
    ("flags", "dropped"),
    [
        (["--max-num-seqs", "64", "--quantization", "fp8"], "drop --max-num-seqs"),
        (["--tp", "2", "--kv-cache-dtype", "fp8"], "drop --tp"),
    ],
)
def test_other_engine_flags_are_still_refused(tmp_path: Path, flags: list[str], dropped: str) -> None:
    args = ["tune", str(_trace_file(tmp_path)), "--layouts", "agg", "--gpus", "2", *flags]
    res = runner.invoke(app, args)
    assert res.exit_code != 0
    assert "--quantization and --kv-cache-dtype, the checkpoint's, are kept" in res.output
    assert dropped in res.output and "--quantization" not in res.output.split("drop ")[-1]
