"""Prefix-cache bookkeeping on Mooncake-shaped traces: long prompts described by 512-token hash_ids.

Mooncake's public conversation trace (12,031 multi-turn requests, prompts of ~12k tokens, each
turn's ``hash_ids`` starting with the previous turn's) is not shipped, so this writes one of the
same shape, seeded (JSON lines: ``timestamp`` ms, ``input_length``, ``output_length``,
``hash_ids``):

* conversations start Poisson; each opens with one of ``num_system`` system prompts
  (2-8 hash blocks) and a log-normal first message (mean ~8k tokens);
* each later turn (``turns_mean`` turns per conversation, geometric) re-sends the previous prompt
  and answer plus a new message (mean ~1.5k tokens), ``turn_gap_s`` later on average: its ids
  repeat the previous prompt's full blocks and go on with new ones. Prompts are capped at 30k.

One vLLM replica of Llama-3.1-8B on an H100 (block size 16, prefix caching, max_num_seqs 256,
max_num_batched_tokens 8192, servesim's KV block estimate) replays it. Each run is a separate
process and reports its CPU time (steadier than wall time on a shared host) and a digest of the
summary JSON and of every request's result. ``--baseline DIR`` points at another checkout's
``src`` (with its compiled core built in place, or run with ``--pure``): the runs alternate
(this checkout, the baseline, ...) so both see the same host load; the ratio is the baseline's
median CPU time over this checkout's, and the digests must agree.

    uv run python benchmarks/hash_blocks.py                            # this checkout, 3 runs
    uv run python benchmarks/hash_blocks.py --baseline /tmp/base/src   # before/after, same host
    uv run python benchmarks/hash_blocks.py --pure --profile           # cProfile, pure-Python core

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HASH_BLOCK = 512
MAX_PROMPT = 30_000
HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def lognormal(rng: np.random.Generator, mean: float, sigma: float) -> int:
    mu = np.log(mean) - sigma**2 / 2
    return max(1, round(float(rng.lognormal(mu, sigma))))


def write_conversation_trace(
    path: Path,
    n: int,
    *,
    rate: float = 0.6,
    seed: int = 0,
    num_system: int = 16,
    first_mean: float = 8_000.0,
    turn_mean: float = 1_500.0,
    output_mean: float = 350.0,
    turns_mean: float = 4.0,
    turn_gap_s: float = 60.0,
) -> None:
    """Write ``n`` requests of multi-turn conversations to ``path`` (Mooncake JSON lines)."""
    rng = np.random.default_rng(seed)
    next_id = 0
    systems: list[list[int]] = []
    for _ in range(num_system):
        k = int(rng.integers(2, 9))
        systems.append(list(range(next_id, next_id + k)))
        next_id += k
    rows: list[tuple[float, int, int, list[int]]] = []
    t = 0.0
    while len(rows) < n:
        t += float(rng.exponential(1.0 / rate))
        turns = int(rng.geometric(1.0 / turns_mean))
        ids = list(systems[int(rng.integers(num_system))])
        length = len(ids) * HASH_BLOCK + lognormal(rng, first_mean, 0.7)
        when = t
        for _ in range(turns):
            if length > MAX_PROMPT or len(rows) >= n:
                break
            need = -(-length // HASH_BLOCK)
            fresh = max(0, need - len(ids))
            ids = ids + list(range(next_id, next_id + fresh))
            next_id += fresh
            out = min(lognormal(rng, output_mean, 0.8), 2048)
            rows.append((when, length, out, ids))
            # the next turn: this prompt's full blocks, then its tail, the answer and a new message
            ids = ids[: length // HASH_BLOCK]
            length += out + lognormal(rng, turn_mean, 0.8)
            when += float(rng.exponential(turn_gap_s))
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0]
    with path.open("w", encoding="utf-8") as f:
        for when, length, out, ids in rows:
            row = {
                "timestamp": int((when - t0) * 1000),
                "input_length": length,
                "output_length": out,
                "hash_ids": ids,
            }
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def replay(path: Path) -> dict[str, Any]:
    """One replay of the trace at ``path`` in this process: CPU time and digests of the results."""
    from servesim.engine import EngineConfig, simulate
    from servesim.engine._native import core as core_name
    from servesim.perf import deployment_setup
    from servesim.traces import load_trace

    trace = load_trace(path)
    setup = deployment_setup(
        "llama-3.1-8b",
        "h100",
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        block_size=16,
        max_model_len=trace.default_max_model_len(),
    )
    assert setup.num_gpu_blocks is not None
    config = EngineConfig(
        num_gpu_blocks=setup.num_gpu_blocks,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        block_size=16,
        enable_prefix_caching=True,
    )
    cpu = time.process_time()
    result = simulate(trace, config, setup.step_time)
    cpu = time.process_time() - cpu
    summary = result.summary.model_dump_json()
    rows = json.dumps(result.request_rows(), sort_keys=True, default=str)
    return {
        "cpu_s": cpu,
        "core": core_name(),
        "requests": len(trace),
        "steps": result.summary.num_steps,
        "hit_rate": result.summary.prefix_cache_hit_rate,
        "summary_sha": hashlib.sha256(summary.encode()).hexdigest()[:16],
        "requests_sha": hashlib.sha256(rows.encode()).hexdigest()[:16],
    }


def run_in(src: Path, path: Path, pure: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src))
    if pure:
        env["SERVESIM_PURE_PYTHON"] = "1"
    else:
        env.pop("SERVESIM_PURE_PYTHON", None)
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", str(path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the replay under {src} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--num-requests", type=int, default=3000)
    ap.add_argument("--rate", type=float, default=0.6, help="conversations started per second")
    ap.add_argument("--repeat", type=int, default=3, help="runs per checkout (interleaved)")
    ap.add_argument("--baseline", type=Path, help="another checkout's src directory to compare with")
    ap.add_argument("--pure", action="store_true", help="the pure-Python core (SERVESIM_PURE_PYTHON=1)")
    ap.add_argument("--profile", action="store_true", help="cProfile one replay in this process")
    ap.add_argument("--trace", type=Path, help="replay this Mooncake-format trace instead")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(replay(args.worker)))
        return
    with tempfile.TemporaryDirectory(prefix="servesim-hash-blocks-") as work:
        path = args.trace or Path(work) / "conversations.jsonl"
        if args.trace is None:
            write_conversation_trace(path, args.num_requests, rate=args.rate)
        if args.profile:
            if args.pure:
                os.environ["SERVESIM_PURE_PYTHON"] = "1"
            prof = cProfile.Profile()
            prof.enable()
            out = replay(path)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            print(out)
            return
        checkouts = [("this", SRC)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in checkouts}
        for _ in range(args.repeat):
            for name, src in checkouts:
                r = run_in(src, path, args.pure)
                runs[name].append(r)
                print(
                    f"{name:>8} ({r['core']}): {r['requests']:,} requests {r['steps']:,} steps "
                    f"cpu {r['cpu_s']:.2f} s  hit rate {r['hit_rate']:.1%}  "
                    f"summary {r['summary_sha']}  requests {r['requests_sha']}",
                    flush=True,
                )
        med = {name: statistics.median(r["cpu_s"] for r in rs) for name, rs in runs.items()}
        for name in runs:
            print(f"{name:>8}: median cpu {med[name]:.2f} s")
        if args.baseline:
            digests = {(r["summary_sha"], r["requests_sha"]) for rs in runs.values() for r in rs}
            print(f"baseline / this: {med['baseline'] / med['this']:.2f}x  same results: {len(digests) == 1}")


if __name__ == "__main__":
    main()
