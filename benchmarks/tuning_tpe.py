"""How often the tuner's sampler finds the best configuration, and how far its pick is from it.

(Formerly ``tuning_quality.py``, which now measures the recommendation's fewest-changes answer
against an exhaustive search: issue 46.8. This one measures TPE against a ranked grid.)

Fixed workloads (the bundled Azure conversation and code traces, a bursty synthetic trace, a
long-prompt shared-prefix trace, the users' two load-scenario shapes on their stated KV caches),
each under a loose and a tight SLO. For each case:

* **ground truth**: every combination of a reduced space (max_num_seqs 64/256 and vLLM's
  default 1024, budgets 2,048/8,192, chunked prefill on/off where vLLM allows it, TP 1/2, 1-3
  replicas) evaluated exactly as a trial is (same search seeds, same capacity probe), ranked by the
  tuner's own rule; cached on disk in the servesim data folder (``$SERVESIM_DATA_DIR``), keyed by
  everything that defines a trial, so a rerun only ranks;
* **the tuner** at its default budget (40 trials: on this small space it searches exhaustively)
  and, with exhaustive search off so that TPE itself is measured, at 40 / 25 / 50 / 200 trials.
  Its trials are served from that cache through an executor (the sampler, the seeding with the
  baseline and the cheapest candidates, de-duplication and ranking all run for real; a cached
  outcome is the outcome the simulation gives, it is deterministic). **Wall time** = the tuner's
  own time + the simulation seconds the grid measured for the distinct combinations it
  evaluated: what the study costs on this machine with ``--executor local``.

Printed per case: the grid's best (GPUs, goodput per GPU), the tuner's pick at each budget with
its regret (goodput per GPU relative to the best; GPUs against the best's), the flags it changes
from the baseline (vLLM's defaults) and wall time; at the end how many cases meet the target (no
more GPUs than the best and within 5 % of its goodput per GPU at the default budget). The pick
is the study's choice (``TuneResult.choice``): the fewest changes among the trials within the
step-time model's measured error of the study's best (``tuning.choice``); "flags" shows its
changes and, in brackets, those of the study's best by the ranking rule alone.

    uv run python benchmarks/tuning_tpe.py                # 12 cases, 200 requests each
    uv run python benchmarks/tuning_tpe.py --requests 200 --only azure-conv
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
import warnings
from dataclasses import dataclass
from typing import Any

import optuna

from servesim.paths import data_dir
from servesim.traces import GeneratorSpec, LogNormalLength, PoissonArrivals, Trace, load_trace
from servesim.tuning import (
    EvalContext,
    EvalSettings,
    Hardware,
    PercentileSLO,
    PerfHardware,
    TrialOutcome,
    TuneSettings,
    Workload,
    space_from_mapping,
    tune,
)
from servesim.tuning.deployment import vllm_default_deployment
from servesim.tuning.jobs import Job, TrialJob, evaluate_trial, execute
from servesim.tuning.search import TrialRecord, knob_values, rank_key, trial_spec
from servesim.tuning.space import SearchSpace

REDUCED = {
    "max_num_seqs": [64, 256],
    "max_num_batched_tokens": [2048, 8192],
    "long_prefill_token_threshold": [0],
    "enable_prefix_caching": [True],
    "block_size": [16],
    "gpu_memory_utilization": [0.9],
    "tensor_parallel_size": [1, 2],
    "replicas": [1, 2, 3],
    "queue_timeout_s": [None],
}
SLOS = {"loose": "ttft_p99_ms=2000,tpot_p99_ms=100", "tight": "ttft_p99_ms=500,tpot_p99_ms=50"}
BUDGETS = (40, 25, 50, 200)  # 40: TuneSettings' default
#: The reduced space is small enough that tune() would search it exhaustively at any budget (it
#: does so for spaces of at most max(64, trials) combinations): "default" is that run; the other
#: rows switch exhaustive search off, so that TPE itself is measured.


@dataclass(frozen=True)
class Case:
    name: str
    workload: Workload
    hardware: Hardware


def _head(source: str, n: int) -> Workload:
    t = load_trace(source)
    return Workload.from_trace(
        Trace(t.df.head(n).reset_index(drop=True), t.provenance), name=f"{source}[:{n}]"
    )


def _users(qps: float, isl: float, osl: float, n: int) -> Workload:
    return Workload.from_spec(
        GeneratorSpec(
            name=f"users-{qps:g}qps",
            num_requests=n,
            arrival=PoissonArrivals(rate=qps),
            prompt=LogNormalLength(mean=isl, sigma=0.6, max=8192),
            output=LogNormalLength(mean=osl, sigma=0.8, max=2048),
        )
    )


def cases(n: int) -> list[Case]:
    h100 = PerfHardware()
    return [
        Case("azure-conv", _head("azure-conv", n), h100),
        Case("azure-code", _head("azure-code", n), h100),
        Case("bursty", Workload.from_source("bursty", num_requests=n), h100),
        Case("shared-prefix", Workload.from_source("prefix_heavy", num_requests=n), h100),
        # The users' load scenarios (s001) on their stated caches: 1,024 and 2,048 blocks of 16.
        Case("users-25qps", _users(25, 1200, 150, n), PerfHardware(num_gpu_blocks=1025)),
        Case("users-5qps", _users(5, 512, 100, n), PerfHardware(num_gpu_blocks=2049)),
    ]


class CachedExecutor:
    """Trial outcomes from the grid's cache (computed and stored on a miss); timed."""

    def __init__(self, ctx: EvalContext, cache: dict[str, Any]) -> None:
        self.ctx = ctx
        self.cache = cache
        self.sim_s = 0.0
        self.evaluated: set[str] = set()

    def key(self, job: TrialJob) -> str:
        data = {
            "w": self.ctx.workload.describe(),
            "h": self.ctx.hardware.describe(),
            "slo": self.ctx.slo.model_dump(mode="json") if self.ctx.slo else None,
            "spec": job.spec.model_dump(mode="json"),
            "p": job.params,
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()

    def outcome(self, job: TrialJob) -> TrialOutcome:
        k = self.key(job)
        if k not in self.cache:
            t0 = time.perf_counter()
            o = evaluate_trial(self.ctx, job)
            self.cache[k] = {"outcome": o.model_dump(mode="json"), "s": time.perf_counter() - t0}
        hit = self.cache[k]
        if k not in self.evaluated:
            self.evaluated.add(k)
            self.sim_s += float(hit["s"])
        return TrialOutcome.model_validate(hit["outcome"]).model_copy(update={"number": job.number})

    def map(self, jobs: list[Job]) -> list[Any]:
        return [self.outcome(j) if isinstance(j, TrialJob) else execute(self.ctx, j) for j in jobs]

    def close(self) -> None:
        return None


def best_of(outcomes: list[TrialOutcome]) -> TrialOutcome | None:
    recs = [
        TrialRecord(
            number=o.number, state="COMPLETE", params=o.params, values=o.values, feasible=True, outcome=o
        )
        for o in outcomes
        if o.valid and o.feasible
    ]
    return min(recs, key=rank_key).outcome if recs else None


def speed(n_requests: int, trials: int) -> None:
    """Wall time of a study on a long trace, and where one trial's time goes."""
    from servesim.tuning import Deployment, run_once
    from servesim.tuning.evaluate import probe_capacity

    wl = _head("azure-conv", n_requests)
    hw = PerfHardware()
    slo = PercentileSLO.parse(SLOS["loose"])
    t0 = time.perf_counter()
    res = tune(wl, hw, slo, settings=TuneSettings(n_trials=trials), executor="local", storage=None)
    wall = time.perf_counter() - t0
    print(
        f"{trials} trials on {len(wl.sample()):,} requests (--executor local): {wall:.0f} s, "
        f"{wall / trials:.1f} s a trial"
    )
    print(f"  {res.n_complete} complete, {res.reused} reused, {res.n_pruned} pruned")
    d = Deployment(max_model_len=wl.default_max_model_len(), max_num_seqs=256, max_num_batched_tokens=8192)
    rate = wl.base_rate
    assert rate is not None
    for seed in (0, 1):
        t1 = time.perf_counter()
        run_once(wl.trace(rate, seed), d, hw, slo, seed=seed, rate=rate)
        print(f"  one trial's run at the target rate, seed {seed}: {time.perf_counter() - t1:.1f} s")
    t1 = time.perf_counter()
    probe_capacity(wl.trace(rate * 50, 0), d, hw)
    print(f"  one trial's capacity probe (50 x the rate): {time.perf_counter() - t1:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--only", default="", help="Comma-separated case names (workload names).")
    ap.add_argument("--speed", type=int, default=0, help="Only time N trials on 10,000 azure-conv requests.")
    args = ap.parse_args()
    if args.speed:
        warnings.simplefilter("ignore")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        speed(10_000, args.speed)
        return
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder = data_dir() / "benchmarks"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tuning_quality_grid.json"
    cache: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    only = {x for x in args.only.split(",") if x}
    print(
        "| case | SLO | grid best (GPUs, goodput/GPU) | grid size (sim s) | budget | search | pick GPUs "
        "| regret goodput/GPU | flags changed (best's) | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    met = total = tpe_met = tpe_total = 0
    n_changes: list[int] = []
    n_best_changes: list[int] = []
    for c in cases(args.requests):
        if only and c.name not in only:
            continue
        for slo_name, slo_text in SLOS.items():
            slo = PercentileSLO.parse(slo_text)
            ctx = EvalContext(c.workload, c.hardware, slo, EvalSettings())
            spec = trial_spec(c.workload, TuneSettings())
            mml = int(spec.fixed["max_model_len"])
            base = vllm_default_deployment(c.hardware, mml)
            space: SearchSpace = space_from_mapping(REDUCED)
            grid_space = space.effective(c.hardware).including(knob_values(base, c.hardware))
            grid = grid_space.grid(mml)
            ex = CachedExecutor(ctx, cache)
            outs = [ex.outcome(TrialJob(i, p, spec)) for i, p in enumerate(grid)]
            grid_s = ex.sim_s
            path.write_text(json.dumps(cache))
            best = best_of(outs)
            head = (
                f"{best.gpus}, {best.goodput_per_gpu:.3g}"
                if best and best.goodput_per_gpu is not None
                else "none"
            )
            for budget, limit in [(BUDGETS[0], None), *((b, 0) for b in BUDGETS)]:
                run_ex = CachedExecutor(ctx, cache)
                t1 = time.perf_counter()
                st = (
                    TuneSettings(n_trials=budget)
                    if limit is None
                    else TuneSettings(n_trials=budget, exhaustive_limit=0)
                )
                res = tune(
                    c.workload,
                    c.hardware,
                    slo,
                    space=space,
                    settings=st,
                    executor=run_ex,  # type: ignore[arg-type]
                    storage=None,
                )
                wall = time.perf_counter() - t1 + run_ex.sim_s
                by_number = {r.number: r for r in res.trials}
                ch = res.choice
                pick = by_number[ch.chosen].outcome if ch is not None else None
                flags = f"{len(ch.chosen_changes)} ({len(ch.best_changes)})" if ch is not None else "-"
                if ch is not None:
                    n_changes.append(len(ch.chosen_changes))
                    n_best_changes.append(len(ch.best_changes))
                if best is None or best.goodput_per_gpu is None:
                    verdict = "no feasible trial in the grid" + (
                        "" if pick is None else " (tuner found one?)"
                    )
                    gpus = "-" if pick is None else str(pick.gpus)
                    ok = pick is None
                elif pick is None or pick.goodput_per_gpu is None:
                    verdict, gpus, ok = "no feasible pick", "-", False
                else:
                    regret = pick.goodput_per_gpu / best.goodput_per_gpu - 1
                    ok = pick.gpus <= (best.gpus or 0) and regret >= -0.05
                    verdict = f"{regret:+.1%}" + ("" if ok else " MISS")
                    gpus = f"{pick.gpus} (best {best.gpus})"
                if limit is None:
                    total += 1
                    met += ok
                elif budget == BUDGETS[0]:
                    tpe_total += 1
                    tpe_met += ok
                print(
                    f"| {c.name} | {slo_name} | {head} | {len(grid)} ({grid_s:.0f} s) | {budget} | "
                    f"{'grid' if res.exhaustive else 'TPE'} | {gpus} | "
                    f"{verdict} | {flags} | {wall:.1f} |",
                    flush=True,
                )
    print(f"\nat the default budget: {met} of {total} cases meet the target (<= the best's GPUs, within 5 %)")
    print(f"TPE alone at 40 trials (exhaustive search off): {tpe_met} of {tpe_total}")
    if n_changes:
        print(
            f"flags changed by the pick: {sum(n_changes)} over {len(n_changes)} runs "
            f"(mean {sum(n_changes) / len(n_changes):.2f}); by the study's best alone: "
            f"{sum(n_best_changes)} (mean {sum(n_best_changes) / len(n_best_changes):.2f})"
        )


if __name__ == "__main__":
    main()
