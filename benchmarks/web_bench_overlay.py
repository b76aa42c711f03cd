"""Measured vs simulated in the workbench: upload a generated ``vllm bench serve --save-detailed``
result of N prompts, run the overlay job, read the result. Prints the figures; asserts nothing.

    .venv/bin/python benchmarks/web_bench_overlay.py [--prompts 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from servesim.web.app import create_app
from servesim.web.settings import WebSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "web"))
from bench_sample import bench_result  # the tests' generated file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=8.0)
    args = ap.parse_args()
    body = json.dumps(bench_result(args.prompts, rate=args.rate)).encode()
    app = create_app(WebSettings(data_dir=Path(tempfile.mkdtemp(prefix="servesim-bench-"))))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        t0 = time.perf_counter()
        r = c.post("/api/bench?name=b.json", content=body, headers={"content-type": "application/json"})
        t_up = time.perf_counter() - t0
        bid = r.json()["id"]
        t0 = time.perf_counter()
        jid = c.post(f"/api/bench/{bid}/simulate", json={"bench_id": bid}).json()["id"]
        while c.get(f"/api/jobs/{jid}").json()["status"] not in ("done", "failed", "cancelled"):
            time.sleep(0.1)
        t_job = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = c.get(f"/api/runs/{jid}")
        t_get = time.perf_counter() - t0
        verdict = res.json()["result"]["sections"][0]["verdicts"][0]["text"]
    print(
        f"{args.prompts:,} prompts ({len(body) / 1e6:.1f} MB file): upload+validate {t_up * 1000:.0f} ms; "
        f"overlay job {t_job:.2f} s; GET result {t_get * 1000:.0f} ms ({len(res.content) / 1e3:.0f} kB)"
    )
    print(f"(generated data, not a measurement) {verdict}")


if __name__ == "__main__":
    main()
