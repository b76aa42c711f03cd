"""The workbench against the CLI on the same run: a simulation job's wall time (POST to done)
next to ``servesim simulate`` on the same stored trace with the same flags, and the answer time of
GET /api/runs/{id}.

Targets (issue 30): the web run within 1.2x of the CLI's wall time; the finished run's answer
under 1 s. Prints the figures and the load average; asserts nothing.

The web job is timed on a server that has finished starting (its first worker is up, as it is
long before a person has uploaded a trace and pressed Run); the CLI is timed from its process
start. Each side runs ``--rounds`` times, alternating, and the medians are compared (the host is
shared: one run of either can be off by seconds).

    .venv/bin/python benchmarks/web_summary.py [--requests 100000] [--requests 1000000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from servesim.web.app import create_app
from servesim.web.defaults import engine_defaults
from servesim.web.settings import WebSettings

SERVESIM = Path(sys.executable).with_name("servesim")


def web_run(c: TestClient, tid: str, flags: dict[str, object]) -> tuple[float, str, list[float]]:
    t0 = time.perf_counter()
    job = c.post("/api/simulate", json={"trace_id": tid, "deployment": {"gpu": "h100", "engine": flags}})
    jid = job.json()["id"]
    etas = []
    while (st := c.get(f"/api/jobs/{jid}").json())["status"] not in ("done", "failed", "cancelled"):
        if st.get("eta_s") is not None:
            etas.append(st["eta_s"])
        time.sleep(0.2)
    t_web = time.perf_counter() - t0
    if st["status"] != "done":
        raise SystemExit(f"the web job {st['status']}: {st.get('error')}")
    return t_web, jid, etas


def cli_run(trace: Path, flags: dict[str, object]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(SERVESIM), "simulate", str(trace), "--gpu", "h100", "--out", f"{tmp}/run.json"]
        cmd += ["--max-num-seqs", str(flags["max_num_seqs"])]
        cmd += ["--max-num-batched-tokens", str(flags["max_num_batched_tokens"])]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        return time.perf_counter() - t0


def one(c: TestClient, data_dir: Path, n: int, repeat: int, rounds: int) -> None:
    t0 = time.perf_counter()
    tid = c.post("/api/traces/generate", json={"preset": "default", "num_requests": n}).json()["id"]
    t_gen = time.perf_counter() - t0
    flags = engine_defaults("h100")  # the same flags on both sides, whatever either's defaults are
    trace = data_dir / "web" / "traces" / f"{tid}.parquet"
    webs, clis, etas, jid = [], [], [], ""
    for _ in range(rounds):
        t, jid, e = web_run(c, tid, flags)
        webs.append(t)
        etas = etas or e
        clis.append(cli_run(trace, flags))
    t_web, t_cli = statistics.median(webs), statistics.median(clis)
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = c.get(f"/api/runs/{jid}")
        times.append(time.perf_counter() - t0)
        size = len(r.content)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"{n:,} requests: generate+store {t_gen:.1f} s; web job {t_web:.1f} s, "
        f"CLI `servesim simulate` {t_cli:.1f} s -> web/CLI {t_web / t_cli:.2f}x "
        f"(medians of {rounds}; web {', '.join(f'{x:.1f}' for x in webs)}, "
        f"CLI {', '.join(f'{x:.1f}' for x in clis)}); load average {load}; "
        f"ETA shown {len(etas)} times (first {etas[0] if etas else '-'} s)"
    )
    print(
        f"  GET /api/runs/{{id}}: median {statistics.median(times) * 1000:.0f} ms over {repeat} "
        f"(max {max(times) * 1000:.0f} ms), {size / 1e3:.0f} kB"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, action="append", help="repeatable; default 100000")
    ap.add_argument("--repeat", type=int, default=3, help="GETs of the finished run")
    ap.add_argument("--rounds", type=int, default=3, help="web and CLI runs of each size")
    args = ap.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="servesim-bench-"))
    app = create_app(WebSettings(data_dir=data_dir, job_timeout_s=7200, max_requests_per_trace=2_000_000))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        started = time.perf_counter()
        while not app.state.workbench.jobs.warm():  # the server's start-up, not the job's
            if time.perf_counter() - started > 120:
                raise SystemExit("the server's first worker did not start in 120 s")
            time.sleep(0.1)
        print(f"server ready (first worker up) in {time.perf_counter() - started:.1f} s")
        for n in args.requests or [100_000]:
            one(c, data_dir, n, args.repeat, args.rounds)


if __name__ == "__main__":
    main()
