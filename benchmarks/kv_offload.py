"""What a CPU KV-offload tier buys on multi-turn traffic, next to one more GPU; the seam's cost off.

1. **The seam's cost when off** (target <= 2 %): the engine with no connector, this checkout vs
   a checkout from before the seam (``--baseline-python``: that checkout's interpreter, e.g. a
   worktree of the seam's parent commit after ``make sync``). Each run is a fresh process timing
   one ``simulate`` (CPU time, steadier than wall time on a shared host); the two interpreters
   alternate, ``--repeats`` times each, and the medians are compared. Two workloads: the
   ``engine_speed.py`` one (no prefix caching) and a Mooncake-format prefix trace
   (``prefix_trace.py``: prefix caching on, the admission path the seam sits in).
2. **The Mooncake conversation trace** (FAST'25 release; not shipped with servesim, 12,031
   requests): fetch it and pass its path (``--mooncake PATH`` or ``SERVESIM_MOONCAKE_TRACE``)::

       curl -LO https://raw.githubusercontent.com/kvcache-ai/Mooncake/main/FAST25-release/traces/conversation_trace.jsonl

   It is read by servesim's Mooncake reader (``hash_ids`` of 512-token blocks -> prefix blocks).
   The first ``--window-s`` seconds are replayed with arrivals stretched ``--stretch`` times (the
   trace's own rate, ~37k prompt tokens/s, is several H100s' worth of prefill) through
   Llama-3.1-8B on one H100 sized as vLLM sizes it, with CPU tiers of ``--sizes`` GiB, next to
   two replicas (prefix-aware router) and TP 2.
3. **A generated multi-turn trace** (60 conversations x 5 turns 20 s apart, 2-4.4k-token histories) on a
   deliberately small KV cache (1,200 blocks: the GPU cannot keep the conversations between
   turns), the same columns.

    .venv/bin/python benchmarks/kv_offload.py --mooncake conversation_trace.jsonl \\
        --baseline-python /tmp/pre-seam/.venv/bin/python

Timings are printed, never asserted. Hit rates as vLLM reports them (first admissions): GPU =
prefix-cache hits / prompt tokens; CPU = tokens the tier supplied / tokens asked of it beyond the
GPU hit (the connector's prefix-cache stats). "sim CPU" is the simulation's own CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


# --- 1. the seam's cost when off ----------------------------------------------------------------


def _probe(workload: str, path: str, n: int) -> None:
    """One timed ``simulate`` with no connector (run in a child process; prints JSON)."""
    from servesim.engine import EngineConfig, LinearStepTime, simulate
    from servesim.traces import GeneratorSpec, PoissonArrivals, generate_trace, load_trace

    if workload == "no-prefix":
        trace = generate_trace(GeneratorSpec(num_requests=n, seed=0, arrival=PoissonArrivals(rate=17.5)))
        cfg = EngineConfig(num_gpu_blocks=30_000, max_num_seqs=256, max_num_batched_tokens=8192)
    else:
        trace = load_trace(path)
        cfg = EngineConfig(
            num_gpu_blocks=20_000,
            max_num_seqs=256,
            max_num_batched_tokens=8192,
            max_model_len=trace.default_max_model_len(),
        )
    c0 = time.process_time()
    res = simulate(trace, cfg, LinearStepTime())
    cpu = time.process_time() - c0
    print(json.dumps({"cpu_s": cpu, "steps": res.summary.num_steps, "e2e_p50": res.summary.e2e_ms.p50}))


def _child(python: str, workload: str, path: str, n: int) -> dict[str, Any]:
    argv = [python, str(Path(__file__).resolve()), "--probe", workload, "--probe-path", path]
    out = subprocess.run(
        [*argv, "--probe-n", str(n)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),  # import the interpreter's own servesim, not a checkout's src
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def seam_cost(
    baseline: str | None, repeats: int, n: int, workloads: list[str], python: str | None = None
) -> None:
    sys.path.insert(0, str(HERE))
    from prefix_trace import write_prefix_trace

    prefix_path = Path(tempfile.gettempdir()) / "servesim-kv-offload-prefix.jsonl"
    write_prefix_trace(prefix_path, n // 5)
    this = python or sys.executable
    print("## The seam's cost when off (no connector): CPU s of one simulate(), median (min)\n")
    print(f"this checkout: {this}; before the seam: {baseline or '(none)'}; load average {_load()}\n")
    print("| workload | steps | this checkout | before the seam | cost: median (min; paired median) |")
    print("|---|---|---|---|---|")
    for workload in workloads:
        now: list[float] = []
        before: list[float] = []
        for _ in range(repeats):
            a = _child(this, workload, str(prefix_path), n)
            now.append(a["cpu_s"])
            if baseline:
                b = _child(baseline, workload, str(prefix_path), n)
                before.append(b["cpu_s"])
                if (b["steps"], b["e2e_p50"]) != (a["steps"], a["e2e_p50"]):
                    print(f"WARNING: {workload}: the two checkouts differ ({a} vs {b})")
        m_now = statistics.median(now)
        label = {
            "no-prefix": f"{n:,} requests, no prefix caching",
            "prefix": f"{n // 5:,} requests (Mooncake format), prefix caching",
        }
        if before:
            m_before = statistics.median(before)
            paired = statistics.median(x / y for x, y in zip(now, before, strict=True))  # run i vs run i
            cost = (
                f"{100 * (m_now / m_before - 1):+.1f} % ({100 * (min(now) / min(before) - 1):+.1f} %; "
                f"paired {100 * (paired - 1):+.1f} %)"
            )
            print(
                f"| {label[workload]} | {a['steps']:,} | {m_now:.3f} ({min(now):.3f}) s | "
                f"{m_before:.3f} ({min(before):.3f}) s | {cost} |"
            )
        else:
            print(f"| {label[workload]} | {a['steps']:,} | {m_now:.3f} s | (no --baseline-python) | - |")
        spread = f"this checkout {min(now):.3f}-{max(now):.3f} s"
        if before:
            spread += f", before {min(before):.3f}-{max(before):.3f} s"
        print(f"|  | ({repeats} runs each, alternating: {spread}; load average {_load()}) | | | |")


#: The compiled core's step loop (Engine.run_until's C body): what ``--instructions`` counts.
STEP_LOOP = "__pyx_f_8servesim_6engine_6engine_6Engine_run_until"


def seam_instructions(pythons: list[str], n: int) -> None:
    """Instructions executed in the compiled step loop (valgrind's callgrind, collection on only
    inside ``STEP_LOOP``) for one no-prefix ``simulate`` of ``n`` requests per interpreter: a count
    that does not move with the host's load, where CPU seconds on a shared host do."""
    print(f"## Instructions in the step loop (callgrind), {n:,} requests, no prefix caching\n")
    print("| checkout | steps | instructions | per step | vs the first |")
    print("|---|---|---|---|---|")
    first = None
    for python in pythons:
        argv = ["valgrind", "--tool=callgrind", "--cache-sim=no", "--collect-atstart=no"]
        argv += [f"--toggle-collect={STEP_LOOP}", "--callgrind-out-file=/dev/null"]
        argv += [python, str(Path(__file__).resolve()), "--probe", "no-prefix", "--probe-path", "-"]
        out = subprocess.run(
            [*argv, "--probe-n", str(n)],
            check=True,
            capture_output=True,
            text=True,
            cwd=tempfile.gettempdir(),
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        ir = int(out.stderr.split("Collected : ")[1].split()[0])
        steps = json.loads(out.stdout.strip().splitlines()[-1])["steps"]
        first = first or ir
        print(f"| {python} | {steps:,} | {ir:,} | {ir / steps:,.0f} | {100 * (ir / first - 1):+.2f} % |")


# --- 2./3. offload size vs one more GPU ---------------------------------------------------------


def _row(label: str, trace: Any, spec: Any, replicas: int = 1) -> str:
    from servesim.cluster import simulate_cluster
    from servesim.cluster.config import RouterSpec
    from servesim.cluster.simulate import Replica
    from servesim.engine import simulate
    from servesim.spec.deployment import resolve

    r = resolve(spec, max_model_len=trace.default_max_model_len())
    c0 = time.process_time()
    if replicas == 1:
        res = simulate(trace, r.config, r.step_time, kv_connector=r.kv_connector())
        s, off = res.summary, res.offload
    else:
        reps = [Replica(f"r{i}", r.config, r.step_time, r.kv_connector) for i in range(replicas)]
        cres = simulate_cluster(trace, reps, RouterSpec(policy="prefix_aware"))
        s = cres.summary.cluster
        off = s.offload
    cpu_s = time.process_time() - c0
    cpu = f"{off.cpu_hit_rate:.3f}" if off is not None and off.cpu_hit_rate is not None else "-"
    loaded = f"{off.loaded_tokens:,}" if off is not None else "-"
    return (
        f"| {label} | {s.ttft_ms.p50:,.0f} | {s.ttft_ms.p99:,.0f} | {s.prefix_cache_hit_rate or 0:.3f} | "
        f"{cpu} | {loaded} | {cpu_s:.0f} s |"
    )


HEADER = (
    "| setup | TTFT p50 ms | TTFT p99 ms | GPU hit | CPU hit | tokens loaded | sim CPU |\n"
    "|---|---|---|---|---|---|---|"
)


def mooncake_table(path: str, window_s: float, stretch: float, sizes: list[float]) -> None:
    from servesim.spec.deployment import DeploymentSpec
    from servesim.traces import load_trace
    from servesim.traces.schema import Trace

    full = load_trace(path)
    df = full.df[full.df["arrival_time_s"] < window_s].reset_index(drop=True)
    df["arrival_time_s"] = df["arrival_time_s"] * stretch
    trace = Trace(df, full.provenance)
    prompt = int(df["prompt_len"].sum())
    print(
        f"\n## Mooncake conversation trace: first {window_s:g} s ({len(df):,} requests, "
        f"{prompt:,} prompt tokens), arrivals x{stretch:g} ({len(df) / (window_s * stretch):.2f} req/s); "
        "llama-3.1-8b on h100\n"
    )
    print(HEADER)
    base = {"model": "llama-3.1-8b", "gpu": "h100"}
    print(_row("1 GPU, no offload", trace, DeploymentSpec(**base)))
    for gib in sizes:
        spec = DeploymentSpec(**base, engine={"kv_offloading_size": gib})
        print(_row(f"1 GPU + {gib:g} GiB CPU tier", trace, spec), flush=True)
    print(_row("2 GPUs: 2 replicas, prefix-aware router", trace, DeploymentSpec(**base), replicas=2))
    print(_row("2 GPUs: TP 2", trace, DeploymentSpec(**base, tp=2)), flush=True)


def multi_turn(n_conv: int = 60, turns: int = 5, gap_s: float = 0.3, turn_s: float = 20.0) -> Any:
    from servesim.traces.schema import Trace

    rows = []
    for c in range(n_conv):
        for t in range(turns):
            hist = 2000 + 600 * t
            rows.append(
                {
                    "req_id": f"c{c}t{t}",
                    "arrival_time_s": t * turn_s + c * gap_s,
                    "prompt_len": hist + 100,
                    "output_len": 120,
                    "prefix_group": f"conv{c}",
                    "prefix_len": hist,
                }
            )
    rows.sort(key=lambda r: r["arrival_time_s"])
    return Trace.from_records(rows, source="multi-turn")


def multi_turn_table(sizes: list[float]) -> None:
    from servesim.spec.deployment import DeploymentSpec

    trace = multi_turn()
    print(
        "\n## Generated multi-turn trace: 60 conversations 0.3 s apart x 5 turns 20 s apart (300 "
        "requests, 3 req/s, histories 2,000-4,400 tokens); llama-3.1-8b on h100 with 1,200 KV "
        "blocks per GPU\n"
    )
    print(HEADER)
    base: dict[str, Any] = {"model": "llama-3.1-8b", "gpu": "h100"}
    blocks = {"num_gpu_blocks": 1200}
    print(_row("1 GPU, no offload", trace, DeploymentSpec(**base, engine=blocks)))
    for gib in sizes:
        spec = DeploymentSpec(**base, engine={**blocks, "kv_offloading_size": gib})
        print(_row(f"1 GPU + {gib:g} GiB CPU tier", trace, spec), flush=True)
    two = DeploymentSpec(**base, engine=blocks)
    print(_row("2 GPUs: 2 replicas, prefix-aware router", trace, two, replicas=2))
    tp2 = DeploymentSpec(**base, tp=2, engine={"num_gpu_blocks": 2400})
    print(_row("2 GPUs: TP 2 (2,400 blocks)", trace, tp2), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mooncake", default=os.environ.get("SERVESIM_MOONCAKE_TRACE"))
    ap.add_argument("--window-s", type=float, default=600.0, help="seconds of the trace replayed")
    ap.add_argument("--stretch", type=float, default=4.0, help="arrival times multiplied by this")
    ap.add_argument("--sizes", default="64,128,256", help="CPU tier sizes, GiB (Mooncake)")
    ap.add_argument("--multi-turn-sizes", default="4,16,64", help="CPU tier sizes, GiB (generated)")
    ap.add_argument("--baseline-python", help="interpreter of a checkout from before the seam")
    ap.add_argument("--python", help="interpreter of the checkout to measure (default: this one's)")
    ap.add_argument(
        "--instructions",
        type=int,
        metavar="N",
        help="also count the step loop's instructions (callgrind) on N requests, each interpreter",
    )
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seam-workloads", default="no-prefix,prefix", help="no-prefix, prefix")
    ap.add_argument("--seam-requests", type=int, default=200_000, help="requests of the no-prefix run")
    ap.add_argument("--skip", default="", help="comma-separated: seam, mooncake, multi-turn")
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    ap.add_argument("--probe-path", help=argparse.SUPPRESS)
    ap.add_argument("--probe-n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        _probe(args.probe, args.probe_path, args.probe_n)
        return
    skip = set(args.skip.split(","))
    if "seam" not in skip:
        seam_cost(
            args.baseline_python,
            args.repeats,
            args.seam_requests,
            args.seam_workloads.split(","),
            args.python,
        )
        if args.instructions:
            pythons = [args.baseline_python] if args.baseline_python else []
            seam_instructions([*pythons, args.python or sys.executable], args.instructions)
    if "mooncake" not in skip:
        if args.mooncake:
            sizes = [float(s) for s in args.sizes.split(",")]
            mooncake_table(args.mooncake, args.window_s, args.stretch, sizes)
        else:
            print("\n(Mooncake table skipped: --mooncake PATH or SERVESIM_MOONCAKE_TRACE; see the docstring)")
    if "multi-turn" not in skip:
        multi_turn_table([float(s) for s in args.multi_turn_sizes.split(",")])


if __name__ == "__main__":
    main()
