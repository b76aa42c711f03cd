"""The workbench's answer time for a finished run: GET /api/runs/{id} of a 100k-request simulation.

The issue's target: under 1 s (histograms binned and series down-sampled on the server, stored
as views, so the answer does not grow with the trace). Prints the figures; asserts nothing.

    .venv/bin/python benchmarks/web_summary.py [--requests 100000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from servesim.web.app import create_app
from servesim.web.settings import WebSettings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    app = create_app(
        WebSettings(data_dir=Path(tempfile.mkdtemp(prefix="servesim-bench-")), job_timeout_s=3600)
    )
    with TestClient(app) as c:
        t0 = time.perf_counter()
        tid = c.post(
            "/api/traces/generate", json={"preset": "default", "num_requests": args.requests}
        ).json()["id"]
        t_gen = time.perf_counter() - t0
        t0 = time.perf_counter()
        summary = c.get(f"/api/traces/{tid}/summary")
        t_trace = time.perf_counter() - t0
        t0 = time.perf_counter()
        jid = c.post(
            "/api/simulate", json={"trace_id": tid, "slo": {"ttft_ms": 1000, "tpot_ms": 100}}
        ).json()["id"]
        while c.get(f"/api/jobs/{jid}").json()["status"] not in ("done", "failed", "cancelled"):
            time.sleep(0.2)
        t_job = time.perf_counter() - t0
        times, size = [], 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = c.get(f"/api/runs/{jid}")
            times.append(time.perf_counter() - t0)
            size = len(r.content)
        print(
            f"{args.requests:,} requests: generate+store {t_gen:.2f} s; "
            f"trace summary {t_trace * 1000:.0f} ms "
            f"({len(summary.content) / 1e3:.0f} kB); simulation job {t_job:.1f} s"
        )
        print(
            f"GET /api/runs/{{id}}: median {statistics.median(times) * 1000:.0f} ms over {args.repeat} "
            f"(max {max(times) * 1000:.0f} ms), {size / 1e3:.0f} kB"
        )


if __name__ == "__main__":
    main()
