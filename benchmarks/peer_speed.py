"""servesim's engine next to AISimulate's replay on the same Mooncake traces, interleaved.

Both replay one vLLM replica of Llama-3.1-8B on an H100 over the same generated traces
(``prefix_trace.py``: 30 % prefix reuse through ``hash_ids`` of 512-token blocks) with the same
engine settings: max_num_seqs 256, max_num_batched_tokens 8192, block size 16, prefix caching
on, and one fixed KV block count (servesim's estimate for that deployment, given to both).

servesim's figure is the wall time of ``servesim.simulate()`` (the trace already loaded; its CPU
time alongside: on a shared host that is the steadier number). AISimulate's is its own replay
time, ``wall_time_ms`` in ``prediction.json`` of ``aisimulate predict -c cfg.yaml``. The runs
alternate (servesim, AISimulate, servesim, ...) so that both see the same host load; the ratio
is AISimulate's median over servesim's median. AISimulate reports no CPU time; its replay's is
estimated as its process's CPU time less that of the same command on the trace's first 5 requests
(start-up: imports, model and hardware tables), run after each replay; the CPU ratio (the
steadier one on a shared host) is that over servesim's ``simulate()`` CPU time. This script
installs nothing: AISimulate is used only when its executable is found (``--aisimulate PATH``
or ``$AISIMULATE``, e.g. a venv made with ``python3 -m venv VENV && VENV/bin/pip install
aisimulate==0.13.0.dev202610270000000085``); without it servesim's figures are printed alone.

    uv run python benchmarks/peer_speed.py                                  # 10k and 100k requests
    AISIMULATE=VENV/bin/aisimulate uv run python benchmarks/peer_speed.py --repeat 3
    uv run python benchmarks/peer_speed.py --sizes 10000 --json
    uv run python benchmarks/peer_speed.py --sizes none --trace conversation_trace.jsonl   # a real one

``--trace`` adds Mooncake-format traces of your own (e.g. Mooncake's public
``FAST25-release/traces/conversation_trace.jsonl``: 12,031 multi-turn requests, 512-token
``hash_ids``, prompts of ~12k tokens on average), replayed the same way.

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from prefix_trace import write_prefix_trace

from servesim.engine import EngineConfig, simulate
from servesim.errors import describe, user_errors
from servesim.perf import deployment_setup
from servesim.traces import load_trace

MODEL, GPU = "llama-3.1-8b", "h100"
PEER_MODEL, PEER_GPU = "meta-llama/Meta-Llama-3.1-8B", "h100_sxm"
SEQS, BUDGET, BLOCK = 256, 8192, 16


def peer_config(trace: Path, blocks: int) -> str:
    """AISimulate's prediction config for the same replica (YAML; JSON is valid YAML)."""
    cfg = {
        "traffic": {
            "source": {"type": "trace", "paths": [str(trace)], "format": "mooncake", "block_size": 512},
            "load": {"type": "trace_timestamps"},
        },
        "engine": {
            "model": PEER_MODEL,
            "hardware": PEER_GPU,
            "backend": "vllm",
            "workers": {
                "aggregated": {
                    "scheduler": {"max_batched_tokens": BUDGET, "max_sequences": SEQS},
                    "kv_cache": {
                        "block_size": BLOCK,
                        "prefix_caching": True,
                        "capacity": {"type": "fixed", "blocks": blocks},
                    },
                }
            },
        },
    }
    return json.dumps(cfg, indent=1)


def run_peer(exe: str, trace: Path, blocks: int, work: Path) -> dict[str, float]:
    """One ``aisimulate predict``: its replay wall time in seconds (``wall_s``, its own timer),
    and the whole process's wall and CPU time (start-up, trace reading and writing included: an
    upper bound of the replay's CPU, which the peer does not report)."""
    cfg = work / "aisimulate.yaml"
    cfg.write_text(peer_config(trace, blocks), encoding="utf-8")
    out = work / "aisimulate-out"
    before, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(
        [exe, "predict", "-c", str(cfg), "--output-dir", str(out), "--overwrite", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    wall, after = time.perf_counter() - wall, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    pred = out / "prediction.json"
    if proc.returncode != 0 or not pred.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise SystemExit(f"aisimulate predict failed (exit {proc.returncode}):\n" + "\n".join(tail))
    doc = json.loads(pred.read_text(encoding="utf-8"))
    return {
        "wall_s": float(doc["wall_time_ms"]) / 1e3,
        "process_wall_s": wall,
        "process_cpu_s": cpu,
        "prefix_hit_rate": float(doc.get("prefix_cache_reused_ratio") or 0.0),
        "completed": float(doc.get("completed_requests") or 0),
    }


def run_servesim(trace: Any, config: EngineConfig, step_time: Any) -> dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = simulate(trace, config, step_time)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    s = result.summary
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "steps": s.num_steps,
        "prefix_cache_hit_rate": s.prefix_cache_hit_rate or 0.0,
        "requests_per_s": s.num_requests / wall,
    }


def find_peer(given: str | None) -> str | None:
    exe = given or os.environ.get("AISIMULATE")
    if not exe:
        return None
    path = shutil.which(exe)
    if path is None:
        raise SystemExit(f"--aisimulate / $AISIMULATE: {exe!r} is not an executable")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sizes",
        default="10000,100000",
        help="requests per generated trace, comma-separated ('none': no generated trace)",
    )
    ap.add_argument(
        "--trace",
        type=Path,
        action="append",
        default=[],
        help="a Mooncake-format trace to replay as well (repeatable)",
    )
    ap.add_argument("--repeat", type=int, default=2, help="runs of each engine per trace (interleaved)")
    ap.add_argument("--rate", type=float, default=13.5, help="arrivals per second (near saturation)")
    ap.add_argument("--aisimulate", help="AISimulate's executable (default: $AISIMULATE; none: skip it)")
    ap.add_argument("--workdir", type=Path, help="keep the traces and peer outputs here")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = ap.parse_args()
    peer = find_peer(args.aisimulate)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="servesim-peer-"))
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    say = (lambda *a: None) if args.json else print
    if peer is None:
        say("AISimulate not given (--aisimulate or $AISIMULATE): servesim's figures only")
    jobs: list[tuple[str, Path]] = []
    for size in [] if args.sizes == "none" else args.sizes.split(","):
        try:
            n = int(size)
        except ValueError:
            raise SystemExit(f"--sizes: {size!r} is not a number of requests") from None
        path = work / f"mooncake-{n}.jsonl"
        write_prefix_trace(path, n, rate=args.rate)
        jobs.append(("generated, 30 % reuse", path))
    for path in args.trace:
        if not path.is_file():
            raise SystemExit(f"--trace: {path} is not a file")
        jobs.append((path.name, path.resolve()))
    for label, path in jobs:
        try:
            trace = load_trace(path)
        except user_errors() as exc:
            raise SystemExit(describe(exc)) from None
        n = len(trace)
        setup = deployment_setup(
            MODEL,
            GPU,
            max_num_seqs=SEQS,
            max_num_batched_tokens=BUDGET,
            block_size=BLOCK,
            max_model_len=trace.default_max_model_len(),
        )
        assert setup.num_gpu_blocks is not None
        config = EngineConfig(
            num_gpu_blocks=setup.num_gpu_blocks,
            max_num_seqs=SEQS,
            max_num_batched_tokens=BUDGET,
            block_size=BLOCK,
            enable_prefix_caching=True,
        )
        ours: list[dict[str, float]] = []
        peer_runs: list[dict[str, float]] = []
        for _ in range(args.repeat):
            ours.append(run_servesim(trace, config, setup.step_time))
            if peer is not None:
                peer_runs.append(run_peer(peer, path, setup.num_gpu_blocks, work))
                # Its start-up alone (the trace's first 5 requests), to net out of its CPU time.
                head = work / "head-5.jsonl"
                first = path.read_text(encoding="utf-8").splitlines(True)[:5]
                head.write_text("".join(first), encoding="utf-8")
                start = run_peer(peer, head, setup.num_gpu_blocks, work)
                peer_runs[-1]["startup_cpu_s"] = start["process_cpu_s"]
        walls = [r["wall_s"] for r in ours]
        theirs = [r["wall_s"] for r in peer_runs]
        row: dict[str, Any] = {
            "trace": label,
            "requests": n,
            "num_gpu_blocks": setup.num_gpu_blocks,
            "servesim_wall_s": walls,
            "servesim_cpu_s": [r["cpu_s"] for r in ours],
            "servesim_steps": ours[0]["steps"],
            "servesim_prefix_hit_rate": ours[0]["prefix_cache_hit_rate"],
            "aisimulate_wall_s": theirs,
            "aisimulate_process_wall_s": [r["process_wall_s"] for r in peer_runs],
            "aisimulate_process_cpu_s": [r["process_cpu_s"] for r in peer_runs],
            "aisimulate_prefix_hit_rate": peer_runs[0]["prefix_hit_rate"] if peer_runs else None,
            # The peer's replay CPU, estimated: its process CPU less that of a 5-request run.
            "aisimulate_net_cpu_s": [r["process_cpu_s"] - r["startup_cpu_s"] for r in peer_runs],
            "ratio": statistics.median(theirs) / statistics.median(walls) if theirs else None,
            "cpu_ratio": (
                statistics.median(r["process_cpu_s"] - r["startup_cpu_s"] for r in peer_runs)
                / statistics.median(r["cpu_s"] for r in ours)
                if peer_runs
                else None
            ),
        }
        rows.append(row)
        cpu = row["servesim_cpu_s"]
        say(
            f"{label}: {n:,} requests  {row['servesim_steps']:,} steps  "
            f"servesim {min(walls):.2f}-{max(walls):.2f} s "
            f"(cpu {min(cpu):.2f}-{max(cpu):.2f} s, {n / statistics.median(walls):,.0f} req/s, "
            f"{statistics.median(walls) / row['servesim_steps'] * 1e6:.0f} us/step, "
            f"hit rate {row['servesim_prefix_hit_rate']:.1%})"
            + (
                f"  AISimulate {min(theirs):.2f}-{max(theirs):.2f} s (cpu net of start-up "
                f"{min(row['aisimulate_net_cpu_s']):.2f}-{max(row['aisimulate_net_cpu_s']):.2f} s, "
                f"hit rate {row['aisimulate_prefix_hit_rate']:.1%})"
                f"  ->  servesim {row['ratio']:.2f}x faster (wall), {row['cpu_ratio']:.2f}x (CPU)"
                if theirs
                else ""
            )
        )
    if args.json:
        print(json.dumps({"host_cpus": os.cpu_count(), "python": sys.version.split()[0], "traces": rows}))
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
