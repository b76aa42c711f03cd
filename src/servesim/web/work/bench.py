"""Measured-vs-simulated jobs: a stored ``vllm bench serve`` result, re-run through servesim.

The workload is the benchmark's own (its lengths, rate, burstiness and client concurrency, the
send times seeded as vllm bench draws them), replayed as its client saw it under the deployment
the user chose (``servesim.services.measured.replay_bench``); or, when the user picks a finished
simulation run, that run's requests. The comparison itself is
``servesim.views.measured.overlay_view``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from servesim.errors import InputError
from servesim.services.measured import BenchServeResult, bench_samples, parse_bench_result
from servesim.views.measured import Sample, overlay_view, records_samples, replay_samples
from servesim.web.schemas import BenchSimulateBody
from servesim.web.work import Env, Report


def bench_file(env: Env, bench_id: str) -> Path:
    from servesim.web.storage import check_id

    return Path(env["data_dir"]) / "web" / "bench" / f"{check_id(bench_id)}.json"


def load_bench(path: Path, name: str) -> BenchServeResult:
    return parse_bench_result(json.loads(path.read_text(encoding="utf-8")), name)


def overlay_job(params: dict[str, Any], env: Env, report: Report) -> dict[str, Any]:
    from servesim.services.measured import is_experiment

    body = BenchSimulateBody.model_validate(params)
    data = json.loads(bench_file(env, body.bench_id).read_text(encoding="utf-8"))
    if is_experiment(data) and body.run_id is None:
        return _experiment_job(data, report)
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
    from servesim.services.measured import replay_bench
    from servesim.web.defaults import setup_notes

    run = replay_bench(bench, body.deployment, body.seed)
    rs, out = run.requests, run.outcome
    sim, throughput = replay_samples(out)
    conc = f", at most {rs.max_concurrency} in flight" if rs.max_concurrency else ""
    text = [
        f"simulated: the benchmark's {len(rs):,} requests at {bench.request_rate} req/s "
        f"(burstiness {bench.burstiness or 1.0}{conc}), send times seeded {body.seed}; "
        f"replayed as the client saw it ({out.rounds} round{'s' if out.rounds != 1 else ''})"
    ]
    if not bench.detailed:
        text.append("the file has no per-request lists (--save-detailed): lengths are the mean lengths")
    return sim, throughput, setup_notes(run.setup), run.setup.config.model_dump(mode="json"), text


def _stored_run(env: Env, run_id: str) -> tuple[dict[str, Sample], dict[str, float | None], list[str]]:
    from servesim.web.storage import check_id

    path = Path(env["data_dir"]) / "web" / "runs" / f"{check_id(run_id)}.parquet"
    if not path.exists():
        raise InputError(f"run {run_id}: no per-request records (choose a finished simulation run)")
    sim, throughput = records_samples(pd.read_parquet(path))
    return sim, throughput, ["ITL is not compared: a stored run keeps no per-step record"]


def _experiment_job(data: dict[str, Any], report: Report) -> dict[str, Any]:
    """A sim2real experiment (a measured inference-perf run): re-run exactly as ``servesim sim2real``
    does (its model, GPU, TP, limits and workload; the same default profile), overlaid with its
    whole-run measurements."""
    from servesim.services.measured import replay_experiment

    report(0, 1)
    run = replay_experiment(data)
    exp, pred, info = run.experiment, run.prediction, run.info
    sim, throughput = replay_samples(run.outcome)
    itl_label = "ITL mean (inference-perf: (E2E - TTFT) / (outputs - 1))"
    view = overlay_view(
        run.measured,
        {},
        sim,
        simulated_throughput=throughput,
        extra_rows={itl_label: (exp.actual.get("-1", {}).get("itl_mean"), pred["-1"].get("itl_mean"))},
        text=[
            f"sim2real experiment {exp.id}: {exp.model} on {exp.tp} x {exp.hardware}, max_num_seqs "
            f"{exp.max_num_seqs}, max_num_batched_tokens {exp.max_num_batched_tokens}; its inference-perf "
            f"workload re-created as servesim sim2real does ({info['num_requests']:,} requests, "
            f"{info['rounds']} rounds); the Run tab's settings are not used",
            "measured: the whole run (stage -1) as the experiment file reports it (means, p90, p99)",
        ],
    )
    report(1, 1)
    return {
        "config": None,
        "bench": {"experiment": exp.id, "model_id": exp.model, "detailed": False},
        "sections": [view.model_dump(mode="json")],
        "notes": [
            f"KV blocks: {info['num_gpu_blocks']:,} (memory model); the run logged {exp.total_kv_blocks:,}"
        ],
    }
