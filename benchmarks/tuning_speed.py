"""Search speed: a 200-trial study on 10,000 requests, then the recommendation, as `servesim tune`
runs them, with where the time goes.

    .venv/bin/python benchmarks/tuning_speed.py                   # issue 28's case: 200 trials, 10k requests
    .venv/bin/python benchmarks/tuning_speed.py --requests 1000 --trials 40 --saturate
    .venv/bin/python benchmarks/tuning_speed.py --storage memory --executor local --trials 20
    .venv/bin/python benchmarks/tuning_speed.py --pruning both    # search rungs off, then on: CPU, same pick?
    .venv/bin/python benchmarks/tuning_speed.py --requests 2000 --trials 20 --no-recommend \
        --compare-spec '{"method": "eagle3", "num_speculative_tokens": 3}'   # plain vs speculative study

``--speculative-config`` runs the study as ``servesim tune --speculative-config`` does (the
config fixed, its k searched in {0, k}); ``--compare-spec`` runs the same study without, then
with it (fresh processes, same trials and trace) and prints both times, their CPU and the ratio.

The trace is the first ``--requests`` requests of the bundled Azure conversation trace (real
arrivals and lengths; ``--source default`` uses the generator preset instead) on the default
hardware context (llama-3.1-8b on one H100, roofline step times). Like ``servesim tune`` it runs a
process pool of ``--jobs`` workers (spawned once, each given the workload once by its
initializer), keeps the study in a fresh journal file (``--storage sqlite``: a fresh SQLite file,
as ``servesim tune --storage sqlite:///FILE``; ``--storage memory``: Optuna's in-memory storage),
and verifies the first three of ``TuneResult.shortlist`` on three fresh seeds.

The breakdown: the driver's time in Optuna (ask + the sampler's suggestions), in telling results
(the storage's writes), waiting for the workers, and in ``recommend``; inside the workers, summed
over workers, the engine (``simulate`` less its results), turning its records into results
(``simulate.build_result``), judging a run (``evaluate.measure``: queue test, KV events,
percentiles), building the seeded traces, and the rest of a job; the gap between the
workers' busy time and (workers x waiting time) is the pool's idle time and overhead (pickling,
IPC, a batch waiting for its slowest trial). Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna

import servesim.tuning.evaluate as evaluate
import servesim.tuning.executors as executors
import servesim.tuning.search as search
import servesim.tuning.workload as workload_mod
from servesim.traces import Trace, load_trace
from servesim.tuning import (
    Deployment,
    EvalContext,
    EvalSettings,
    Knob,
    PercentileSLO,
    PerfHardware,
    SearchSpace,
    TuneSettings,
    Workload,
    find_saturation,
    make_executor,
    recommend,
    tune,
)

engine_simulate = importlib.import_module(
    "servesim.engine.simulate"
)  # the package exports a function of that name

# ---------------------------------------------------------------- timers (driver and workers)
_TIMES: dict[str, float] = defaultdict(float)
_COUNTS: dict[str, int] = defaultdict(int)


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _TIMES[name] += time.perf_counter() - t0
            _COUNTS[name] += 1

    return wrapper


def _patch(obj: Any, attr: str, name: str) -> None:
    setattr(obj, attr, _timed(name, getattr(obj, attr)))


def install_worker_timers() -> None:
    """Time the phases of a job where it runs (nested timers: the engine is inside simulate)."""
    _patch(evaluate, "simulate", "simulate")
    _patch(evaluate, "simulate_cluster", "simulate")
    _patch(engine_simulate, "build_result", "engine results")
    _patch(evaluate, "measure", "measure")
    _patch(workload_mod.Workload, "trace", "traces")
    _patch(executors, "execute", "job")


def _init_timed_worker(ctx: EvalContext) -> None:
    executors._init_worker(ctx)
    install_worker_timers()


def _run_timed(job: Any) -> tuple[Any, dict[str, float], dict[str, int], float]:
    _TIMES.clear()
    _COUNTS.clear()
    c0 = time.process_time()
    out = executors._run_in_worker(job)
    return out, dict(_TIMES), dict(_COUNTS), time.process_time() - c0


class TimedProcessExecutor(executors.ProcessExecutor):
    """``servesim``'s process pool, with the workers' phase times sent back with each result."""

    def __init__(self, ctx: EvalContext, n_jobs: int) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.ctx = ctx
        self.worker_times: dict[str, float] = defaultdict(float)
        self.worker_counts: dict[str, int] = defaultdict(int)
        self.worker_cpu = 0.0
        self.jobs_by_kind: dict[str, int] = defaultdict(int)
        self._pool = ProcessPoolExecutor(
            max_workers=n_jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_timed_worker,
            initargs=(ctx,),
        )

    def _run(self, jobs_: Sequence[Any]) -> list[Any]:
        out = []
        for job in jobs_:
            self.jobs_by_kind[type(job).__name__] += 1
        for res, times, counts, cpu in self._pool.map(_run_timed, jobs_):
            for k, v in times.items():
                self.worker_times[k] += v
            for k, n in counts.items():
                self.worker_counts[k] += n
            self.worker_cpu += cpu
            out.append(res)
        return out


def install_driver_timers() -> None:
    """Optuna's ask and the space's suggestions, telling results, the executor's map."""
    _patch(optuna.Study, "ask", "optuna ask")
    _patch(search.SearchSpace, "suggest", "optuna suggest")
    _patch(search, "_tell", "optuna tell + storage")
    _patch(search, "summarize_study", "summarize")


def workload(source: str, n: int) -> Workload:
    if source == "default":
        return Workload.from_source("default", num_requests=n)
    trace = load_trace(source)
    head = Trace(trace.df.head(n).reset_index(drop=True), trace.provenance)
    return Workload.from_trace(head, name=f"{source} (first {n})")


def row(label: str, seconds: float, total: float, note: str = "") -> None:
    share = f"{100 * seconds / total:5.1f} %" if total > 0 else ""
    print(f"  {label:<34} {seconds:8.1f} s  {share}  {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="azure-conv", help="bundled trace name, or 'default' (generator)")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--executor", default="process", choices=["local", "process"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--storage",
        default="journal",
        choices=["journal", "sqlite", "memory"],
        help="a fresh journal file (as servesim tune), a fresh SQLite file, or Optuna's in-memory storage",
    )
    ap.add_argument("--slo", default="ttft_p99_ms=2000,tpot_p99_ms=80")
    ap.add_argument("--saturate", action="store_true", help="also time `saturate` on vLLM-like flags")
    ap.add_argument("--no-recommend", action="store_true", help="the study alone")
    ap.add_argument(
        "--pruning",
        default="none",
        choices=["none", "rungs", "both"],
        help="search rungs (tuning.rungs); 'both': the run without, then with, and whether the picks match",
    )
    ap.add_argument(
        "--speculative-config",
        default=None,
        help="vLLM's --speculative-config JSON: fixed in every trial, its k searched in {0, k}",
    )
    ap.add_argument(
        "--compare-spec", default=None, help="a --speculative-config: the study without, then with it"
    )
    ap.add_argument("--summary", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.pruning == "both":
        compare_pruning(sys.argv[1:])
        return
    if args.compare_spec is not None:
        compare_speculative(sys.argv[1:], args.compare_spec)
        return
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    wl = workload(args.source, args.requests)
    hw = PerfHardware()
    slo = PercentileSLO.parse(args.slo)
    ev = EvalSettings()
    rate = wl.base_rate
    assert rate is not None
    print(f"workload: {wl.name}, {wl.num_requests} requests at {rate:.2f} req/s; {hw.model} on {hw.gpu}")
    print(f"SLO {slo.describe()}; executor {args.executor} x {args.jobs}; storage {args.storage}")

    tmp = tempfile.TemporaryDirectory()
    url = {
        "memory": None,
        "sqlite": f"sqlite:///{Path(tmp.name) / 'study.db'}",
        "journal": str(Path(tmp.name) / "study.journal"),
    }[args.storage]
    ctx = EvalContext(wl, hw, slo, ev)
    if args.executor == "local":
        install_worker_timers()
    install_driver_timers()
    t0 = time.perf_counter()
    ex: Any = (
        TimedProcessExecutor(ctx, args.jobs) if args.executor == "process" else make_executor("local", ctx)
    )
    if args.executor == "process":  # spawn the workers now, as the pool's first map would
        ex._pool.submit(os.getpid).result()
    t_start = time.perf_counter() - t0
    mml = wl.default_max_model_len()
    with ex:
        if args.saturate:
            d = Deployment(max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=mml)
            t1 = time.perf_counter()
            rep = find_saturation(wl, d, hw, slo, target_rate=rate, eval_settings=ev, executor=ex)
            print(
                f"saturate: {time.perf_counter() - t1:.1f} s, {rep.num_simulations} simulations, "
                f"{len(rep.points)} rates; knee {rep.goodput_knee_rps} req/s, saturation {rep.saturation_rps}"
            )
        driver0 = dict(_TIMES)
        map_time = [0.0]
        inner_map = ex._run

        def timed_map(js: Sequence[Any]) -> list[Any]:
            t = time.perf_counter()
            try:
                return inner_map(js)
            finally:
                map_time[0] += time.perf_counter() - t

        ex._run = timed_map
        t2 = time.perf_counter()
        c2 = time.process_time()
        st = TuneSettings(n_trials=args.trials, pruning=args.pruning)
        fixed, space = speculative_study(args.speculative_config)
        res = tune(
            wl,
            hw,
            slo,
            settings=st,
            eval_settings=ev,
            executor=ex,
            n_jobs=args.jobs,
            storage=url,
            fixed=fixed,
            space=space,
        )
        t_tune = time.perf_counter() - t2
        cpu_tune = time.process_time() - c2
        tune_map = map_time[0]
        tune_driver = {k: v - driver0.get(k, 0.0) for k, v in _TIMES.items()}
        worker_tune = dict(getattr(ex, "worker_times", _TIMES))
        worker_cpu_tune = getattr(ex, "worker_cpu", 0.0)
        tune_jobs = dict(getattr(ex, "jobs_by_kind", {}))
        tune_counts = dict(getattr(ex, "worker_counts", _COUNTS))
        tune_hits = ex.hits
        t_rec = 0.0
        rec = None
        if not args.no_recommend:
            picks = res.shortlist(3)
            by_number = {r.number: r for r in res.trials}
            cands = [
                Deployment.model_validate({"max_model_len": mml, "policy": "fcfs", **by_number[n].params})
                for n in picks
            ]
            base = (
                Deployment.model_validate({"max_model_len": mml, "policy": "fcfs", **res.baseline.params})
                if res.baseline is not None
                else None
            )
            t3 = time.perf_counter()
            rec = recommend(
                wl,
                hw,
                slo,
                cands,
                target_rate=res.target_rate_rps,
                verify_seeds=[1000, 1001, 1002],
                eval_settings=ev,
                executor=ex,
                baseline=base,
                add_capacity=True,
            )
            t_rec = time.perf_counter() - t3
    total = time.perf_counter() - t0
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)

    distinct = res.n_trials - res.reused
    stopped = res.rungs.stopped if res.rungs is not None else 0
    print(
        f"\ntune: {t_tune:.1f} s for {res.n_trials} trials ({res.n_complete} complete, "
        f"{res.n_pruned - stopped} pruned as invalid, {stopped} stopped at a rung, {res.n_feasible} "
        f"feasible; {res.reused} repeated a combination and were not "
        f"simulated again: {distinct} evaluated) = {t_tune / max(res.n_trials, 1):.2f} s a trial"
    )
    print(
        f"  jobs sent to the workers: {tune_jobs or 'local'}; runs found in the executor's cache {tune_hits}"
    )
    print("where the study's time goes (driver wall time):")
    opt = tune_driver.get("optuna ask", 0.0) + tune_driver.get("optuna suggest", 0.0)
    tell = tune_driver.get("optuna tell + storage", 0.0)
    summ = tune_driver.get("summarize", 0.0)
    row("Optuna ask + sampling", opt, t_tune)
    row("Optuna tell + storage writes", tell, t_tune)
    row("waiting for the workers", tune_map, t_tune)
    row("summary, seeding, the rest", t_tune - opt - tell - tune_map, t_tune, f"(summary {summ:.1f} s)")
    busy = worker_tune.get("job", 0.0)
    workers = args.jobs if args.executor == "process" else 1
    print(f"inside the workers (summed over {workers}; CPU {worker_cpu_tune:.1f} s):")
    results = worker_tune.get("engine results", 0.0)
    eng = worker_tune.get("simulate", 0.0) - results
    meas = worker_tune.get("measure", 0.0)
    traces = worker_tune.get("traces", 0.0)
    slots = workers * tune_map
    row("simulate: engine", eng, slots)
    row("simulate: records -> results", results, slots)
    row("measurement (queue test, KV, pct)", meas, slots)
    row("seeded traces", traces, slots)
    row("rest of a job (deployment, probe...)", busy - eng - results - meas - traces, slots)
    row("pool idle / pickling / IPC", slots - busy, slots, f"(of {workers} x {tune_map:.1f} s)")
    sims = worker_tune.get("simulate", 0.0)
    nsim = int(tune_counts.get("simulate", 0))
    if nsim:
        print(f"  {nsim} engine runs, {sims / nsim:.2f} s each")
    if rec is not None:
        print(f"recommend (3 fresh seeds, saturation, ablations, flag changes): {t_rec:.1f} s")
        all_jobs = dict(getattr(ex, "jobs_by_kind", {}))
        more = {k: v - tune_jobs.get(k, 0) for k, v in all_jobs.items() if v - tune_jobs.get(k, 0)}
        print(f"  jobs sent to the workers: {more or 'local'}; runs found in the cache {ex.hits - tune_hits}")
    print(
        f"executor start-up {t_start:.1f} s; total {total:.1f} s "
        f"(study + recommendation {t_tune + t_rec:.1f} s)"
    )
    print(
        f"CPU: driver {cpu.ru_utime + cpu.ru_stime:.1f} s, workers {kids.ru_utime + kids.ru_stime:.1f} s; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    if res.rungs is not None:
        rr = res.rungs
        print(
            "rungs: "
            + "; ".join(f"{r.rung} {r.name}: {r.entered} ran, {r.stopped} stopped" for r in rr.rungs)
            + f" ({rr.prefix_skipped} skipped the prefix)"
            + f"; {rr.simulated_requests:,} of {rr.unpruned_requests:,} requests simulated "
            f"({rr.saved_fraction:.0%} saved)"
        )
    if res.best is not None:
        print(f"best trial #{res.best.number}: {res.best.params}")
    if rec is not None:
        print(
            f"recommended: {rec.verdict}, {rec.replicas} x TP {rec.deployment.tensor_parallel_size}, "
            f"meets SLO {rec.meets_slo}, {rec.status}, saturation {rec.saturation_rps} req/s"
        )
        print(rec.vllm_serve_command)
    if args.summary:
        Path(args.summary).write_text(
            json.dumps(
                {
                    "tune_s": t_tune,
                    "tune_cpu_s": cpu_tune + worker_cpu_tune,
                    "n_trials": res.n_trials,
                    "cpu_s": cpu.ru_utime + cpu.ru_stime + kids.ru_utime + kids.ru_stime,
                    "best": res.best.params if res.best is not None else None,
                    "chosen": res.choice.chosen if res.choice is not None else None,
                    "recommended": rec.deployment.model_dump(mode="json") if rec is not None else None,
                    "verdict": rec.verdict if rec is not None else None,
                }
            )
        )
    tmp.cleanup()


def speculative_study(raw: str | None) -> tuple[dict[str, Any] | None, SearchSpace | None]:
    """The fixed fields and space of ``servesim tune --speculative-config raw`` (services.tune's
    ``_fixed``): the config in every trial, its k searched in {0, k}; (None, None) without."""
    if raw is None:
        return None, None
    from servesim.engine.speculative import SpeculativeConfig

    sc = SpeculativeConfig.model_validate(raw)
    fixed = {"policy": "fcfs", "speculative_config": sc.model_dump(mode="json")}
    space = SearchSpace().with_overrides(
        {"num_speculative_tokens": Knob(choices=[0, sc.num_speculative_tokens])}
    )
    return fixed, space


def compare_speculative(argv: list[str], spec: str) -> None:
    """Run this benchmark's study without, then with, ``--speculative-config spec`` (fresh
    processes, same trials and trace) and print both times and the ratio."""
    rest: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a == "--compare-spec":
            skip = True
        elif not a.startswith("--compare-spec="):
            rest.append(a)
    out: dict[str, Any] = {}
    for label, extra in (("plain", []), ("speculative", ["--speculative-config", spec])):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            print(f"\n===== {label} =====", flush=True)
            subprocess.run([sys.executable, __file__, *rest, *extra, "--summary", f.name], check=True)
            out[label] = json.loads(Path(f.name).read_text())
    a, b = out["plain"], out["speculative"]
    print(f"\n===== plain vs --speculative-config {spec} =====")
    print(
        f"study wall time: plain {a['tune_s']:.1f} s, speculative {b['tune_s']:.1f} s "
        f"({a['n_trials']} trials each)"
    )
    print(
        f"study CPU (driver + workers): plain {a['tune_cpu_s']:.1f} s, speculative {b['tune_cpu_s']:.1f} s: "
        f"ratio {b['tune_cpu_s'] / a['tune_cpu_s']:.2f} (wall {b['tune_s'] / a['tune_s']:.2f})"
    )


def compare_pruning(argv: list[str]) -> None:
    """Run this benchmark without the rungs, then with them (fresh processes), and compare."""
    out: dict[str, Any] = {}
    rest = [a for a in argv if a not in ("--pruning", "both", "--pruning=both")]
    for mode in ("none", "rungs"):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            print(f"\n===== --pruning {mode} =====", flush=True)
            subprocess.run(
                [sys.executable, __file__, *rest, "--pruning", mode, "--summary", f.name], check=True
            )
            out[mode] = json.loads(Path(f.name).read_text())
    a, b = out["none"], out["rungs"]
    print("\n===== search rungs =====")
    print(f"study wall time: {a['tune_s']:.1f} s without, {b['tune_s']:.1f} s with")
    print(f"study CPU (driver + workers): {a['tune_cpu_s']:.1f} s without, {b['tune_cpu_s']:.1f} s with")
    print(
        f"CPU (driver + workers, study and recommendation): {a['cpu_s']:.1f} s without, "
        f"{b['cpu_s']:.1f} s with"
    )
    print(f"same best trial's flags: {a['best'] == b['best']}")
    print(f"same recommendation: {a['recommended'] == b['recommended']} ({a['verdict']} / {b['verdict']})")


if __name__ == "__main__":
    main()
