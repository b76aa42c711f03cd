"""Does a cluster cost in proportion to its replicas? ``servesim cluster`` at 1/2/4/8 replicas.

Each size N runs what ``servesim cluster poisson_{N*rate}_rps -n {N*requests} --replicas N
--router ROUTER`` runs (the cluster service, ``run_cluster``: the trace generated, every replica
resolved, the comparison), with no failure, so every replica carries the same load at every size.
Issue 48's target: 8 replicas take at most 9x one replica's time. The script also counts how many
cluster simulations one command runs (without a failure it must be one, not one per recovery
strategy) and the router's decisions.

CPU time (``time.process_time``) is printed next to wall time: on a shared host it is the steadier
figure, and the ratio uses it. Each size is run ``--repeat`` times in turn (1, 2, 4, 8, 1, 2, ...)
so that every size sees the same host load; the median is kept.

    uv run python benchmarks/cluster_scaling.py
    uv run python benchmarks/cluster_scaling.py --sizes 1,8 --rate 10 --requests 2000 --repeat 3
    uv run python benchmarks/cluster_scaling.py --profile 8      # cProfile of one 8-replica run

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import time
from typing import Any

from servesim.cluster import simulate as cluster_simulate
from servesim.services.cluster import ClusterAnswer, ClusterRequest, run_cluster
from servesim.spec import ClusterSpec, DeploymentSpec

COUNTS = {"simulations": 0, "routed": 0}


def _counting() -> None:
    """Count cluster simulations (wrapping, not changing, ``ClusterSimulator.run``) and the
    router's decisions (its turn counter, read after each run: no wrapper on the hot path)."""
    run = cluster_simulate.ClusterSimulator.run

    def counted_run(self: Any) -> Any:
        COUNTS["simulations"] += 1
        out = run(self)
        COUNTS["routed"] += self.router._turn
        return out

    cluster_simulate.ClusterSimulator.run = counted_run  # type: ignore[method-assign]


def request(n: int, args: argparse.Namespace) -> ClusterRequest:
    rate = args.rate * n
    spec = ClusterSpec(
        trace=f"poisson_{rate:g}_rps",
        num_requests=args.requests * n,
        seed=args.seed,
        deployment=DeploymentSpec(replicas=n, router=args.router),
    )
    return ClusterRequest(spec=spec)


def one(n: int, args: argparse.Namespace) -> dict[str, Any]:
    COUNTS.update(simulations=0, routed=0)
    wall, cpu = time.perf_counter(), time.process_time()
    answer = run_cluster(request(n, args))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert isinstance(answer, ClusterAnswer)
    c = answer.result.summary.cluster
    return {
        "replicas": n,
        "requests": len(answer.trace),
        "wall_s": wall,
        "cpu_s": cpu,
        "simulations": COUNTS["simulations"],
        "rows": [r.strategy for r in answer.rows],
        "routed": COUNTS["routed"],
        "ttft_p99_ms": c.ttft_ms.p99,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,2,4,8", help="replica counts, comma-separated")
    ap.add_argument("--rate", type=float, default=10.0, help="arrivals per second per replica")
    ap.add_argument("--requests", type=int, default=2000, help="requests per replica")
    ap.add_argument("--router", default="least_outstanding", help="router policy (one for every size)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each size, interleaved")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", type=int, metavar="N", help="cProfile one run of N replicas instead")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = ap.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise SystemExit(f"--sizes: {args.sizes!r} is not a list of replica counts") from None
    _counting()
    if args.profile:
        one(args.profile, argparse.Namespace(**{**vars(args), "requests": 50}))
        prof = cProfile.Profile()
        prof.runcall(one, args.profile, args)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return
    one(sizes[0], argparse.Namespace(**{**vars(args), "requests": 50}))  # imports, catalog: untimed
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in sizes}
    for _ in range(args.repeat):
        for n in sizes:
            runs[n].append(one(n, args))
    rows = []
    for n in sizes:
        r = runs[n]
        rows.append(
            {
                **r[0],
                "wall_s": statistics.median(x["wall_s"] for x in r),
                "cpu_s": statistics.median(x["cpu_s"] for x in r),
                "wall_all_s": [round(x["wall_s"], 3) for x in r],
                "cpu_all_s": [round(x["cpu_s"], 3) for x in r],
            }
        )
    base = rows[0]
    for row in rows:
        row["cpu_ratio"] = row["cpu_s"] / base["cpu_s"]
        row["wall_ratio"] = row["wall_s"] / base["wall_s"]
    if args.json:
        print(json.dumps({"host_cpus": os.cpu_count(), "python": sys.version.split()[0], "sizes": rows}))
        return
    print(
        f"router {args.router}, {args.rate:g} req/s and {args.requests:,} requests per replica, no failure; "
        f"median of {args.repeat} (interleaved)"
    )
    print("| replicas | requests | simulations | routed | CPU s | wall s | CPU / 1 replica | TTFT p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['replicas']} | {row['requests']:,} | {row['simulations']} | {row['routed']:,} | "
            f"{row['cpu_s']:.2f} | {row['wall_s']:.2f} | {row['cpu_ratio']:.2f}x | "
            f"{row['ttft_p99_ms']:,.0f} |"
        )
    last = rows[-1]
    print(
        f"{last['replicas']}/{base['replicas']} replicas: CPU {last['cpu_ratio']:.2f}x, "
        f"wall {last['wall_ratio']:.2f}x (target for 8/1: <= 9x)"
    )


if __name__ == "__main__":
    main()
