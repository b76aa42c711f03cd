"""inference-perf stage reports as calibration input: the shipped sample (inference-perf 0.7.0's
``stage_0_lifecycle_metrics.json`` against ``servesim emulate``) read back to what the file says,
per-token times dropped when the client's tokenizer disagreed with the server, the CLI's output,
and bad files as one-line errors naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.perf.guidellm_io import json_kind
from servesim.perf.inference_perf_io import parse_stage, read_stage_report, stage_summary

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inference-perf-stage_0.json"
HW = ("--model", "llama-3.1-8b", "--gpu", "h100")
runner = CliRunner()


def _raw() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SAMPLE.read_text(encoding="utf-8"))
    return data


def test_the_stage_reads_back_to_what_the_file_says() -> None:
    raw = _raw()
    assert json_kind(SAMPLE) == "inference-perf"
    s = stage_summary(parse_stage(raw, "x"))
    ok, lat = raw["successes"], raw["successes"]["latency"]
    assert s.num_prompts == raw["load_summary"]["count"] == 30 and s.completed == ok["count"] == 30
    assert s.failed == raw["failures"]["count"] == 0 and s.rate == raw["load_summary"]["requested_rate"]
    assert s.total_input_tokens == ok["prompt_tokens"]["total"]
    assert s.total_output_tokens == ok["output_tokens"]["total"]  # the server's count, not output_len
    extra = s.model_extra or {}
    assert extra["mean_ttft_ms"] == pytest.approx(lat["time_to_first_token"]["mean"] * 1e3)
    assert extra["mean_e2el_ms"] == pytest.approx(lat["request_latency"]["mean"] * 1e3)
    # The sample's client tokenizer was not the model's: its per-token times are per client token.
    assert ok["token_count_mismatches"] == 30 and "mean_itl_ms" not in extra and "mean_tpot_ms" not in extra
    raw["successes"]["token_count_mismatches"] = 0
    extra = stage_summary(parse_stage(raw, "x")).model_extra or {}
    assert extra["mean_itl_ms"] == pytest.approx(lat["inter_token_latency"]["mean"] * 1e3)
    assert extra["mean_tpot_ms"] == pytest.approx(lat["time_per_output_token"]["mean"] * 1e3)


def test_arrivals_span_the_stage_at_its_rate() -> None:
    case = read_stage_report(SAMPLE, model="llama-3.1-8b", gpu="h100", max_num_seqs=1024)
    t = case.requests.scheduled
    assert len(t) == 30 and t[-1] == pytest.approx(30 / 6.0)  # inference-perf: count / rate seconds
    assert set(case.targets) == {"ttft_mean", "e2e_mean"}


def test_calibrate_cli_on_the_stage() -> None:
    res = runner.invoke(app, ["calibrate", str(SAMPLE), *HW, "--json"])
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    assert list(report["per_group"]) == ["inference-perf-stage_0"] and report["after"]["n"] == 2
    res = runner.invoke(app, ["calibrate", str(SAMPLE), *HW])
    assert res.exit_code == 0 and "inference-perf-stage_0" in res.stdout


def _no_rate(raw: dict[str, Any]) -> None:  # inference-perf's summary_lifecycle_metrics.json
    del raw["load_summary"]["requested_rate"]


def _none_ok(raw: dict[str, Any]) -> None:
    raw["successes"]["count"] = 0


def _no_ttft(raw: dict[str, Any]) -> None:
    del raw["successes"]["latency"]["time_to_first_token"]


@pytest.mark.parametrize(
    ("edit", "shown"),
    [
        (_no_rate, "load_summary.requested_rate: Field required"),
        (_none_ok, "successes.count: Input should be greater than or equal to 1"),
        (_no_ttft, "successes.latency.time_to_first_token: Field required"),
    ],
    ids=["no-rate", "no-successful-request", "field-missing"],
)
def test_bad_stage_reports_are_one_line(tmp_path: Path, edit: Any, shown: str) -> None:
    raw = copy.deepcopy(_raw())
    edit(raw)
    f = tmp_path / "stage.json"
    f.write_text(json.dumps(raw))
    res = runner.invoke(app, ["calibrate", str(f), *HW])
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and "stage.json" in lines[0] and shown in lines[0], (
        res.stderr
    )


def test_a_fit_the_stage_cannot_determine_is_not_written(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    fit = "gemm_bandwidth_efficiency,gemm_compute_efficiency,frontend_latency_s,step_overhead_s"
    res = runner.invoke(app, ["calibrate", str(SAMPLE), *HW, "--fit", fit, "--out", str(out)])
    assert res.exit_code == 2 and "2 measured metrics cannot determine 4 coefficients" in res.stderr
    assert not out.exists()
