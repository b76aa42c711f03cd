"""The engine's fast path with KV connectors (issue 48 item 2): wall and CPU time of the runs the
issue named, each in a fresh process (CPU time of the child: steadier than wall time on a shared
host).

1. the docs' layouts example (docs/cluster.md): ``servesim tune examples/trace.jsonl --layouts
   agg,disagg --gpus 3 --slo ttft_p99_ms=100,tpot_p99_ms=8`` (P/D clusters, break-even bandwidth
   probes down to 0.1 Gbit/s: idle spans while only KV transfers are in flight);
2. a small tune (``--trials``) without and with a CPU offload tier in the space
   (``--space kv_offloading_size=16,64``: every trial has a tier), and their ratio (target
   <= 1.5x);
3. one replica on the examples trace, offload tier on and off, fast path vs the plain loop
   (``fast=False``), in-process.

    .venv/bin/python benchmarks/kv_fast_path.py [--trials 20] [--skip-docs]

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVESIM = str(Path(sys.executable).parent / "servesim")
TRACE = str(ROOT / "examples" / "trace.jsonl")


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the child: user + system) of one command; fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def tune_cmd(trials: int, offload: bool) -> list[str]:
    cmd = [SERVESIM, "tune", TRACE, "--trials", str(trials), "--storage", "memory", "--executor", "local"]
    cmd += ["--slo", "ttft_p99_ms=200,tpot_p99_ms=30"]
    if offload:
        cmd += ["--space", "kv_offloading_size=16,64"]
    return cmd


def one_replica() -> None:
    """The examples trace on one H100 replica (roofline step times), tier on/off, fast/plain."""
    from servesim.engine import EngineConfig, simulate
    from servesim.perf.catalog import load_catalog
    from servesim.perf.offload import offloading_connector
    from servesim.perf.roofline import RooflineStepTime
    from servesim.traces.load import load_trace

    cat = load_catalog()
    model, gpu = cat.model("llama-3.1-8b"), cat.gpu("h100")
    trace = load_trace(TRACE)
    step = RooflineStepTime(model, gpu)
    print("\none replica, examples trace (CPU s of simulate; fast vs plain loop)")
    for size in (None, 16.0):
        cfg = EngineConfig(num_gpu_blocks=2000, kv_offloading_size=size)
        times = {}
        for fast in (True, False):
            conn = offloading_connector(cfg, model, gpu) if size is not None else None
            c0 = time.process_time()
            simulate(trace, cfg, step, fast=fast, kv_connector=conn)
            times[fast] = time.process_time() - c0
        label = "no tier" if size is None else f"{size:g} GiB tier"
        ratio = times[False] / times[True]
        print(f"  {label:12s} fast {times[True]:.3f} s  plain {times[False]:.3f} s  ({ratio:.1f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--skip-docs", action="store_true", help="skip the docs' layouts example")
    args = ap.parse_args()
    if not args.skip_docs:
        cmd = [SERVESIM, "tune", TRACE, "--layouts", "agg,disagg", "--gpus", "3"]
        wall, cpu = timed([*cmd, "--slo", "ttft_p99_ms=100,tpot_p99_ms=8"])
        print(
            f"docs layouts example (agg,disagg, 3 GPUs): wall {wall:.1f} s, CPU {cpu:.1f} s (target <= 20 s)"
        )
    plain = timed(tune_cmd(args.trials, offload=False))
    off = timed(tune_cmd(args.trials, offload=True))
    print(
        f"tune, {args.trials} trials, no offload space:          wall {plain[0]:.1f} s, CPU {plain[1]:.1f} s"
    )
    print(f"tune, {args.trials} trials, kv_offloading_size=16,64:  wall {off[0]:.1f} s, CPU {off[1]:.1f} s")
    print(f"  offload / plain: wall {off[0] / plain[0]:.2f}x, CPU {off[1] / plain[1]:.2f}x (target <= 1.5x)")
    one_replica()


if __name__ == "__main__":
    main()
