"""guidellm benchmarks reports as calibration input: the shipped samples (guidellm 0.8.1 run against
``servesim emulate``) read back to what the file says, each strategy's arrivals re-created as
guidellm ran them, the CLI's human and JSON output, and bad files as one-line errors."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.perf.bench_io import bench_requests
from servesim.perf.errors import BenchResultError, CalibrationError
from servesim.perf.guidellm_io import guidellm_summary, json_kind, parse_guidellm_report, read_guidellm_report

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ROOT / "examples" / "guidellm-sweep.json"
CONCURRENT = ROOT / "tests" / "fixtures" / "guidellm-concurrent.json"
HW = ("--model", "llama-3.1-8b", "--gpu", "h100")
runner = CliRunner()


def _raw(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _cli(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, ["calibrate", *args])
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.parametrize("path", [SWEEP, CONCURRENT], ids=["sweep", "concurrent"])
def test_each_benchmark_reads_back_to_what_the_file_says(path: Path) -> None:
    raw = _raw(path)
    report = parse_guidellm_report(raw, str(path))
    assert len(report.benchmarks) == len(raw["benchmarks"])
    for b, rb in zip(report.benchmarks, raw["benchmarks"], strict=True):
        s = guidellm_summary(b)
        ok = rb["requests"]["successful"]
        m = rb["metrics"]
        assert s.completed == m["request_totals"]["successful"] == len(ok)
        assert s.failed == m["request_totals"]["errored"]
        assert s.input_lens == [r["prompt_tokens"] for r in ok]
        assert s.output_lens == [r["output_tokens"] for r in ok]
        extra = s.model_extra or {}
        # Independently of guidellm's latency fields, from each request's raw timestamps
        # (info.timings, seconds): TTFT and E2E from request_start, the ITL mean is the pooled gap
        # (vllm bench's mean ITL), the per-request mean of the gaps is TPOT.
        times = [r["info"]["timings"] for r in ok]
        ttft = [(t["first_token_iteration"] - t["request_start"]) * 1e3 for t in times]
        e2e = [(t["request_end"] - t["request_start"]) * 1e3 for t in times]
        gaps = [
            ((t["last_token_iteration"] - t["first_token_iteration"]) * 1e3, r["output_tokens"] - 1)
            for t, r in zip(times, ok, strict=True)
        ]
        assert extra["mean_ttft_ms"] == pytest.approx(np.mean(ttft), rel=1e-6)
        assert extra["mean_e2el_ms"] == pytest.approx(np.mean(e2e), rel=1e-6)
        pooled = math.fsum(g for g, _ in gaps) / sum(k for _, k in gaps)
        assert extra["mean_itl_ms"] == pytest.approx(pooled, rel=1e-6)
        assert extra["mean_tpot_ms"] == pytest.approx(np.mean([g / k for g, k in gaps]), rel=1e-6)


def test_each_strategy_becomes_its_arrival_process() -> None:
    cases = read_guidellm_report(SWEEP, model="llama-3.1-8b", gpu="h100", max_num_seqs=1024)
    cases += read_guidellm_report(CONCURRENT, model="llama-3.1-8b", gpu="h100", max_num_seqs=1024)
    by = {c.name.split("-", 3)[-1]: c.requests for c in cases}
    assert set(by) == {"synchronous", "throughput", "constant@26.05", "concurrent@4"}
    assert by["synchronous"].max_concurrency == 1 and not by["synchronous"].scheduled.any()
    assert by["concurrent@4"].max_concurrency == 4 and not by["concurrent@4"].scheduled.any()
    assert by["throughput"].max_concurrency == 512 and not by["throughput"].scheduled.any()
    rate = _raw(SWEEP)["benchmarks"][2]["config"]["strategy"]["rate"]
    gaps = np.diff(by["constant@26.05"].scheduled)
    assert gaps == pytest.approx(np.full(len(gaps), 1 / rate), rel=0.01)  # evenly spaced from t=0


def test_poisson_draws_exponential_gaps_at_the_rate() -> None:
    raw = copy.deepcopy(_raw(SWEEP))
    b = raw["benchmarks"][2]
    b["config"]["strategy"] = {"type_": "poisson", "rate": 4.0, "max_concurrency": 512}
    s = guidellm_summary(parse_guidellm_report(raw, "x").benchmarks[2])
    assert s.rate == 4.0 and s.burstiness == 1.0 and s.max_concurrency == 512
    gaps = np.diff(bench_requests(s, "x", seed=3, rescale_arrivals=False).scheduled)
    assert 0.4 < gaps.std() / gaps.mean() < 1.6  # exponential gaps: CV 1 (constant's is 0)


def test_kind_is_told_by_content(tmp_path: Path) -> None:
    vllm = tmp_path / "v.json"
    vllm.write_text(json.dumps({"completed": 3, "mean_ttft_ms": 5.0}))
    assert json_kind(SWEEP) == "guidellm" and json_kind(vllm) == "vllm"
    other = tmp_path / "o.json"
    other.write_text(json.dumps({"rows": []}))
    with pytest.raises(CalibrationError, match=r"o\.json: neither a guidellm benchmarks report"):
        json_kind(other)


def test_calibrate_cli_fits_each_benchmark() -> None:
    code, out, err = _cli(str(SWEEP), *HW, "--json")
    assert code == 0, err
    report = json.loads(out)  # stdout is the one JSON document
    assert set(report["per_group"]) == {
        "guidellm-sweep-0-synchronous",
        "guidellm-sweep-1-throughput",
        "guidellm-sweep-2-constant@26.05",
    }
    assert report["after"]["n"] == 12  # 3 benchmarks x (TTFT, TPOT, ITL, E2E)
    assert report["after"]["mape"] < report["before"]["mape"]
    code, out, err = _cli(str(SWEEP), *HW)
    assert code == 0 and "guidellm-sweep-0-synchronous" in out and "determined" in out
    assert "calibration (workloads): converged in" in out and "termination" not in out  # not SciPy's words


def _bad(tmp_path: Path, edit: Any) -> tuple[int, str]:
    raw = copy.deepcopy(_raw(CONCURRENT))
    edit(raw)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(raw))
    code, _, err = _cli(str(f), *HW)
    return code, err


def _no_success(raw: dict[str, Any]) -> None:
    raw["benchmarks"][0]["metrics"]["request_totals"]["successful"] = 0


def _no_ttft(raw: dict[str, Any]) -> None:
    del raw["benchmarks"][0]["metrics"]["time_to_first_token_ms"]


def _trace(raw: dict[str, Any]) -> None:
    raw["benchmarks"][0]["config"]["strategy"]["type_"] = "trace"


def _not_a_report(raw: dict[str, Any]) -> None:
    raw.clear()
    raw["rows"] = [1, 2]


@pytest.mark.parametrize(
    ("edit", "shown"),
    [
        (
            _no_success,
            "benchmarks.0.metrics.request_totals.successful: benchmark 0 (concurrent@4) has no successful",
        ),
        (_no_ttft, "benchmarks.0.metrics.time_to_first_token_ms: Field required"),
        (_trace, "benchmarks.0.config.strategy.type_: Input should be 'synchronous'"),
        (_not_a_report, "neither a guidellm benchmarks report"),
    ],
    ids=["no-successful-request", "field-missing", "unsupported-strategy", "not-a-report"],
)
def test_bad_reports_are_one_line_naming_file_and_field(tmp_path: Path, edit: Any, shown: str) -> None:
    code, err = _bad(tmp_path, edit)
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "bad.json" in lines[0] and shown in lines[0], err


def test_parser_names_the_field_in_its_error_list() -> None:
    raw = copy.deepcopy(_raw(CONCURRENT))
    _no_ttft(raw)
    with pytest.raises(BenchResultError) as e:
        parse_guidellm_report(raw, "r.json")
    assert e.value.errors[0]["field"] == "benchmarks.0.metrics.time_to_first_token_ms"


def test_a_fit_that_bends_a_gpu_coefficient_is_said_and_not_written(tmp_path: Path) -> None:
    """The sweep ran against servesim's emulator on a loaded 2-core host: its TTFT holds the
    front end's queueing, and the fit absorbs it with a GEMM efficiency no GPU has (0.08)."""
    code, out, err = _cli(str(SWEEP), *HW, "--json")
    assert code == 0, err
    report = json.loads(out)
    low = {p["name"] for p in report["parameters"] if "efficiency" in p["name"] and p["value"] < 0.25}
    assert low == {"gemm_compute_efficiency"}
    assert any(n.startswith("gemm_compute_efficiency fitted at 0.08") for n in report["notes"])
    profile = tmp_path / "fitted.json"
    code, _, err = _cli(str(SWEEP), *HW, "--out", str(profile))
    assert code == 2 and "not written" in err and "gemm_compute_efficiency" in err
    assert not profile.exists()
