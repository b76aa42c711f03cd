"""The recovery planner against the fixed policies (all-migrate, all-restart) in cluster simulations.

Each scenario is one failure of one of three replicas (``n1`` fails at 30 s and returns 20 s later,
the README's case) on a Poisson trace, varied one dimension at a time from the base case: the
load, the link speed, the checkpointing mode and the model (8B on the linear step model, as the
``cluster`` command by default; 70B on 4 x H100 with roofline step times and its KV size). Every
scenario runs on several trace seeds; per policy it prints the mean over seeds of the cluster's
TTFT p99 and E2E p99, and the planner's paired difference to the best fixed policy with its noise
(two standard errors of the per-seed difference). The planner *loses* only when it is worse by
more than both the noise and 2 %.

    uv run python benchmarks/recovery_policies.py              # every scenario, 3 seeds
    uv run python benchmarks/recovery_policies.py --seeds 2 --only base,link-1
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from servesim.cluster import FailureEvent, Replica, default_context, simulate_cluster
from servesim.cluster.config import KVCheckpointing
from servesim.engine import EngineConfig, LinearStepTime
from servesim.perf import deployment_setup, load_catalog
from servesim.perf.catalog import resolve_model
from servesim.traces import open_trace
from servesim.traces.schema import Trace

POLICIES = ("planner", "migrate", "restart")


@dataclass(frozen=True)
class Scenario:
    name: str
    rate: int = 30
    gbps: float = 10.0
    checkpointing: KVCheckpointing = "continuous"
    warning_s: float = 0.0
    model: str = "llama-3.1-8b"
    tp: int = 1
    roofline: bool = False
    requests: int = 2000


SCENARIOS = [
    Scenario("base"),
    Scenario("load-20", rate=20),
    Scenario("load-40", rate=40),
    Scenario("link-1", gbps=1.0),
    Scenario("link-100", gbps=100.0),
    Scenario("on-warning-5s", checkpointing="on_warning", warning_s=5.0),
    Scenario("70b-tp4-roofline", model="llama-3.1-70b", tp=4, roofline=True, rate=10, requests=1000),
]


def replicas(s: Scenario, trace: Trace) -> list[Replica]:
    cfg = EngineConfig(num_gpu_blocks=6000, max_num_seqs=64)  # the cluster command's defaults
    if not s.roofline:
        return [Replica(f"n{i}", EngineConfig(), LinearStepTime()) for i in range(3)]
    setup = deployment_setup(
        s.model,
        "h100",
        s.tp,
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_model_len=trace.default_max_model_len(),
    )
    assert setup.num_gpu_blocks is not None
    c = cfg.model_copy(update={"num_gpu_blocks": setup.num_gpu_blocks})
    return [Replica(f"n{i}", c, setup.step_time) for i in range(3)]


def run(s: Scenario, seed: int) -> dict[str, tuple[float, float, int]]:
    trace = open_trace(f"poisson_{s.rate}_rps", num_requests=s.requests, seed=seed)
    reps = replicas(s, trace)
    ctx = dataclasses.replace(
        default_context(),
        model=resolve_model(s.model, load_catalog()),
        tp=s.tp,
        bandwidth_gbps=s.gbps,
    )
    fail = [FailureEvent(node="n1", time_s=30.0, recover_after_s=20.0, warning_s=s.warning_s)]
    out = {}
    for p in POLICIES:
        r = simulate_cluster(
            trace, reps, failures=fail, recovery=p, context=ctx, kv_checkpointing=s.checkpointing
        )
        c = r.summary.cluster
        migrated = int((r.moves["strategy"] == "MIGRATE_STATE").sum()) if len(r.moves) else 0
        out[p] = (c.ttft_ms.p99, c.e2e_ms.p99, migrated)
    return out


def _mean(x: Sequence[float]) -> float:
    return statistics.fmean(x)


def verdict(planner: Sequence[float], best: Sequence[float]) -> tuple[float, float, str]:
    """Mean relative difference (planner / best - 1), its noise (2 SE) and win/tie/loses."""
    d = [p / b - 1 for p, b in zip(planner, best, strict=True)]
    mean = _mean(d)
    noise = 2 * statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else 0.0
    if mean > max(noise, 0.02):
        word = "LOSES"
    elif mean < -max(noise, 0.02):
        word = "wins"
    else:
        word = "tie"
    return mean, noise, word


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--only", default="", help="Comma-separated scenario names.")
    args = ap.parse_args()
    only = {x for x in args.only.split(",") if x}
    print(
        "| scenario | metric | planner | all-migrate | all-restart | planner vs best fixed | noise (2 SE) | |"
    )
    print("|---|---|---|---|---|---|---|---|")
    t0 = time.perf_counter()
    for s in SCENARIOS:
        if only and s.name not in only:
            continue
        runs = [run(s, seed) for seed in range(args.seeds)]
        for i, metric in enumerate(("TTFT p99", "E2E p99")):
            per = {p: [r[p][i] for r in runs] for p in POLICIES}
            fixed = min(("migrate", "restart"), key=lambda p: _mean(per[p]))
            mean, noise, word = verdict(per["planner"], per[fixed])
            migrated = _mean([r["planner"][2] for r in runs])
            cells = " | ".join(f"{_mean(per[p]):,.0f}" for p in POLICIES)
            tail = f" (planner migrates {migrated:.1f} per failure)" if i == 0 else ""
            print(f"| {s.name} | {metric} | {cells} | {mean:+.1%} vs {fixed} | ±{noise:.1%} | {word}{tail} |")
    print(f"\n{args.seeds} seeds per scenario; {time.perf_counter() - t0:.0f} s wall (ms; means over seeds)")


if __name__ == "__main__":
    main()
