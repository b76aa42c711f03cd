"""A Prometheus scrape of vLLM's /metrics as a calibration input: the requests that finished in the
window become the ``vllm bench serve`` summary they were, re-simulated and fitted; bad scrapes are
refused naming the metric. ``emulator-40req.prom`` is a scrape of servesim's own emulator (one
replica, the calibrated Llama-3.1-8B on H100) after 40 requests of 300 prompt and 20 output tokens
sent as Poisson arrivals at 8 req/s over 5.79 s (tests/emulate/test_scrape_calibration.py takes
such scrapes live)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.perf.errors import BenchResultError, PerfError
from servesim.perf.prometheus_io import parse_scrape, read_scrape, scrape_summary
from servesim.services.calibration import CalibrateRequest, calibrate

SCRAPE = Path(__file__).resolve().parents[1] / "fixtures" / "prometheus" / "emulator-40req.prom"
SERVER = [
    "--model",
    "llama-3.1-8b",
    "--gpu",
    "h100",
    "--max-num-seqs",
    "256",
    "--max-num-batched-tokens",
    "8192",
]


def test_a_scrape_is_the_benchmark_summary_of_the_requests_it_counted() -> None:
    s = scrape_summary(read_scrape(SCRAPE), None, window_s=5.79)
    assert (s.num_prompts, s.total_input_tokens, s.total_output_tokens) == (40, 40 * 300, 40 * 20)
    assert s.rate == pytest.approx(40 / 5.79)
    extra = s.model_extra or {}
    # the histograms' sums over their counts, in ms: 0.5702 s over 40 first tokens
    assert extra["mean_ttft_ms"] == pytest.approx(570.2232792568185 / 40)
    assert extra["mean_itl_ms"] == pytest.approx(5237.358285944431 / 760)
    assert extra["mean_ttft_ms"] < extra["mean_e2el_ms"]


def test_two_scrapes_give_the_window_between_them_and_every_label_set_is_summed() -> None:
    text = SCRAPE.read_text(encoding="utf-8")
    other = text.replace('engine="replica-0"', 'engine="replica-1"')  # a second engine, same counts
    both = parse_scrape(text + "\n".join(x for x in other.splitlines() if not x.startswith("#")), "both")
    before = parse_scrape(text, "before")
    s = scrape_summary(both, before, window_s=10.0)
    assert (s.num_prompts, s.total_input_tokens) == (40, 12000)  # what replica-1 added
    with pytest.raises(BenchResultError, match="fell from 80 to 40"):
        scrape_summary(before, both, window_s=10.0)  # wrong order: a counter went down
    with pytest.raises(BenchResultError, match="no request finished"):
        scrape_summary(before, before, window_s=10.0)
    with pytest.raises(BenchResultError, match="positive number of seconds"):
        scrape_summary(before, None, window_s=float("nan"))


def test_a_file_that_is_not_a_scrape_of_vllm_is_refused_by_name(tmp_path: Path) -> None:
    junk = tmp_path / "junk.prom"
    junk.write_text("up 1\nprocess_cpu_seconds_total 3\n", encoding="utf-8")
    with pytest.raises(BenchResultError, match=r"junk\.prom: no vllm: metric"):
        read_scrape(junk)
    cut = tmp_path / "cut.prom"
    cut.write_text("\n".join(x for x in SCRAPE.read_text().splitlines() if "prompt_tokens" not in x))
    with pytest.raises(BenchResultError, match="no vllm:prompt_tokens"):
        scrape_summary(read_scrape(cut), None, window_s=5.0)


def test_calibrating_on_the_emulators_scrape_leaves_the_front_end_out() -> None:
    """The emulator's /metrics (as vLLM's) leave out the front end a client sees, so the fit
    neither adds nor frees it. The scrape has no send times: the re-created Poisson arrivals are
    another draw than the ones sent, and the base profile (the emulator's own) misses TTFT by
    40 % (20.0 ms against 14.3; ITL +3 %, E2E +7 %); the fit explains the three means within 20 %
    and is never worse than its start."""
    req = CalibrateRequest(
        files=[SCRAPE],
        model="llama-3.1-8b",
        gpu="h100",
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        window_s=5.79,
    )
    report = calibrate(req)
    assert "frontend_latency_s" not in [p.name for p in report.parameters]
    assert report.after.mape <= report.before.mape + 1e-9
    assert report.after.max_ape < 20.0
    got = report.predictions["emulator-40req"]
    assert set(got) == {"ttft_mean", "itl_pooled_mean", "e2e_mean"}


def test_the_cli_reads_a_scrape_and_needs_its_window(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["calibrate", str(SCRAPE), *SERVER])
    assert res.exit_code == 2 and "needs --window-s" in res.output
    for flag, value in (("--window-s", "-5"), ("--window-s", "nan"), ("--burstiness", "0")):
        res = runner.invoke(app, ["calibrate", str(SCRAPE), "--window-s", "5.79", *SERVER, flag, value])
        assert res.exit_code == 2 and f"{flag} {value}: Input should be" in res.output, res.output
        assert "window_s" not in res.output and "Traceback" not in res.output  # the flag, not the field
    res = runner.invoke(app, ["calibrate", str(SCRAPE), "--window-s", "5.79", *SERVER, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["kind"] == "workloads" and doc["after"]["n"] == 3
    human = runner.invoke(
        app, ["calibrate", str(SCRAPE), "--window-s", "5.79", *SERVER], env={"COLUMNS": "100"}
    )
    assert human.exit_code == 0, human.output
    assert (
        "gemm_bandwidth_efficiency" in human.stdout and "before" in human.stdout and "after" in human.stdout
    )


def test_a_fit_the_data_cannot_determine_is_not_written(tmp_path: Path) -> None:
    """A scrape's latencies exclude the front end, so its latency cannot be fitted from them: the
    report says so, and the profile is not written where a later run would pick it up."""
    req = CalibrateRequest(
        files=[SCRAPE], model="llama-3.1-8b", gpu="h100", window_s=5.79, fit=["frontend_latency_s"]
    )
    out = tmp_path / "fitted.json"
    with pytest.raises(PerfError, match=r"not written.*determine none of frontend_latency_s"):
        calibrate(req, out)
    assert not out.exists()
    assert [p.determined for p in calibrate(req).parameters] == [False]
