"""vLLM's /metrics, scraped from servesim's own emulator before and after a batch of requests,
read back by ``servesim calibrate`` as exactly that batch (issue 52: the Prometheus import is
tested on a scrape of the project's own emulator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from emulate_helpers import MODEL

from servesim.perf.prometheus_io import read_scrape, scrape_summary
from servesim.services.calibration import CalibrateRequest, calibrate


def _send(url: str, n: int, words: int, max_tokens: int) -> None:
    with httpx.Client(timeout=60) as c:
        for _ in range(n):
            body = {"model": MODEL, "prompt": "Hello " * words, "max_tokens": max_tokens}
            assert c.post(url + "/v1/completions", json=body).status_code == 200


def test_two_scrapes_of_the_emulator_are_the_requests_sent_between_them(
    make_server: Any, tmp_path: Path
) -> None:
    srv = make_server(n_replicas=2, time_scale=10.0)
    _send(srv.url, 3, 100, 8)  # before the window: 150 prompt tokens each (4 characters a token)
    before = tmp_path / "before.prom"
    before.write_text(httpx.get(srv.url + "/metrics", timeout=5).text, encoding="utf-8")
    _send(srv.url, 5, 200, 12)
    after = tmp_path / "after.prom"
    after.write_text(httpx.get(srv.url + "/metrics", timeout=5).text, encoding="utf-8")
    s = scrape_summary(read_scrape(after), read_scrape(before), window_s=2.0)
    assert (s.num_prompts, s.total_input_tokens, s.total_output_tokens) == (5, 5 * 300, 5 * 12)
    extra = s.model_extra or {}
    assert 0 < extra["mean_ttft_ms"] < extra["mean_e2el_ms"]
    report = calibrate(
        CalibrateRequest(
            files=[after],
            before=before,
            window_s=2.0,
            model="llama-3.1-8b",
            gpu="h100",
            max_num_seqs=256,
            max_num_batched_tokens=8192,
            fit=["gemm_bandwidth_efficiency"],
        )
    )
    assert report.after.n == 3  # TTFT, ITL and E2E means re-simulated
