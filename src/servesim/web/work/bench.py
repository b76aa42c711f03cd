"""Measured-vs-simulated jobs: a stored ``vllm bench serve`` result, re-run through servesim.

The workload is the benchmark's own (``servesim.perf.bench_io``: its lengths, rate, burstiness and
client concurrency, the send times seeded as vllm bench draws them), replayed as its client saw it
(``servesim.perf.replay``: closed loop, async-scheduling lag, front-end latency) under the
deployment the user chose; or, when the user picks a finished simulation run, that run's requests.
The comparison itself is ``servesim.views.measured.overlay_view``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from servesim.perf.bench_io import BenchServeResult, bench_requests, bench_samples, parse_bench_result
from servesim.views.measured import Sample, overlay_view, records_samples, replay_samples
from servesim.web.schemas import BenchSimulateBody
from servesim.web.work import Env, Report


def bench_file(env: Env, bench_id: str) -> Path:
    from servesim.web.storage import check_id

    return Path(env["data_dir"]) / "web" / "bench" / f"{check_id(bench_id)}.json"


def load_bench(path: Path, name: str) -> BenchServeResult:
    return parse_bench_result(json.loads(path.read_text(encoding="utf-8")), name)


def overlay_job(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    body = BenchSimulateBody.model_validate(params)
    bench = load_bench(bench_file(env, body.bench_id), "the benchmark")
    report(0, 1)
    if body.run_id is not None:
        simulated, throughput, notes = _stored_run(env, body.run_id)
        text = [f"simulated: the stored run {body.run_id[:8]} (its own trace and settings)"]
        config: dict[str, Any] | None = None
    else:
        simulated, throughput, notes, config, text = _replayed(bench, body)
    view = overlay_view(
        bench.stats(),
        bench_samples(bench),
        simulated,
        measured_throughput={
            "request_throughput": bench.request_throughput,
            "output_throughput": bench.output_throughput,
        },
        simulated_throughput=throughput,
        text=text,
    )
    report(1, 1)
    return {
        "config": config,
        "bench": {
            "model_id": bench.model_id,
            "num_prompts": bench.num_prompts,
            "completed": bench.completed,
            "request_rate": bench.request_rate,
            "max_concurrency": bench.max_concurrency,
            "detailed": bench.detailed,
        },
        "sections": [view.model_dump(mode="json")],
        "notes": notes,
    }


def _replayed(
    bench: BenchServeResult, body: BenchSimulateBody
) -> tuple[dict[str, Sample], dict[str, float | None], list[str], dict[str, Any], list[str]]:
    from servesim.perf.profile import HardwareProfile
    from servesim.perf.replay import replay
    from servesim.web.work.runs import deployment

    rs = bench_requests(bench, "the benchmark", seed=body.seed)
    longest = int((rs.prompt_len + rs.output_len).max()) + 1
    config, step, notes = deployment(body.engine, body.hardware, longest)
    profile = getattr(step, "profile", None)
    out = replay(rs, config, step, profile if isinstance(profile, HardwareProfile) else HardwareProfile())
    sim, throughput = replay_samples(out)
    conc = f", at most {rs.max_concurrency} in flight" if rs.max_concurrency else ""
    text = [
        f"simulated: the benchmark's {len(rs):,} requests at {bench.request_rate} req/s "
        f"(burstiness {bench.burstiness or 1.0}{conc}), send times seeded {body.seed}; "
        f"replayed as the client saw it ({out.rounds} round{'s' if out.rounds != 1 else ''})"
    ]
    if not bench.detailed:
        text.append("the file has no per-request lists (--save-detailed): lengths are the mean lengths")
    return sim, throughput, notes, config.model_dump(mode="json"), text


def _stored_run(env: Env, run_id: str) -> tuple[dict[str, Sample], dict[str, float | None], list[str]]:
    from servesim.web.storage import check_id

    path = Path(env["data_dir"]) / "web" / "runs" / f"{check_id(run_id)}.parquet"
    if not path.exists():
        raise ValueError(f"run {run_id}: no per-request records (choose a finished simulation run)")
    sim, throughput = records_samples(pd.read_parquet(path))
    return sim, throughput, ["ITL is not compared: a stored run keeps no per-step record"]
