"""Capacity planning on a 1,000-request trace: wall time of `saturate` and of `tune` + recommend.

    uv run python benchmarks/tuning_speed.py                      # Azure conv slice, 40 trials, process pool
    uv run python benchmarks/tuning_speed.py --source default --trials 20 --executor local

The trace is the first 1,000 requests of the bundled Azure conversation trace (real arrivals and
lengths; ``--source default`` uses the generator preset instead) on the default hardware context
(llama-3.1-8b on one H100, roofline step times). Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import time
import warnings

import optuna

from servesim.traces import Trace, load_trace
from servesim.tuning import (
    Deployment,
    EvalContext,
    EvalSettings,
    PercentileSLO,
    PerfHardware,
    TuneSettings,
    Workload,
    find_saturation,
    make_executor,
    recommend,
    tune,
)


def workload(source: str, n: int) -> Workload:
    if source == "default":
        return Workload.from_source("default", num_requests=n)
    trace = load_trace(source)
    head = Trace(trace.df.head(n).reset_index(drop=True), trace.provenance)
    return Workload.from_trace(head, name=f"{source} (first {n})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default="azure-conv", help="bundled trace name, or 'default' (generator)")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--executor", default="process", choices=["local", "process", "ray"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--slo", default="ttft_p99_ms=2000,tpot_p99_ms=80")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    wl = workload(args.source, args.requests)
    hw = PerfHardware()
    slo = PercentileSLO.parse(args.slo)
    ev = EvalSettings()
    rate = wl.base_rate
    assert rate is not None
    print(f"workload: {wl.name}, {wl.num_requests} requests at {rate:.2f} req/s; {hw.model} on {hw.gpu}")
    print(f"SLO {slo.describe()}; executor {args.executor} x {args.jobs}")

    ctx = EvalContext(wl, hw, slo, ev)
    t0 = time.perf_counter()
    with make_executor(args.executor, ctx, n_jobs=args.jobs) as ex:
        t_start = time.perf_counter() - t0
        mml = wl.default_max_model_len()
        d = Deployment(max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=mml)
        t1 = time.perf_counter()
        rep = find_saturation(wl, d, hw, slo, target_rate=rate, eval_settings=ev, executor=ex)
        t_sat = time.perf_counter() - t1
        print(
            f"saturate: {t_sat:.1f} s, {rep.num_simulations} simulations, {len(rep.points)} rates; "
            f"knee {rep.goodput_knee_rps} req/s, saturation {rep.saturation_rps} req/s"
        )
        t2 = time.perf_counter()
        st = TuneSettings(n_trials=args.trials)
        res = tune(wl, hw, slo, settings=st, eval_settings=ev, executor=ex, n_jobs=args.jobs)
        t_tune = time.perf_counter() - t2
        print(
            f"tune: {t_tune:.1f} s for {res.n_trials} trials ({res.n_complete} complete, "
            f"{res.n_pruned} pruned, {res.n_feasible} feasible)"
        )
        by_number = {r.number: r for r in res.trials}
        cands = []
        for n in res.shortlist(3):
            o = by_number[n].outcome
            assert o is not None
            cands.append(Deployment.model_validate({"max_model_len": mml, **o.params}))
        t3 = time.perf_counter()
        rec = recommend(wl, hw, slo, cands, target_rate=rate, eval_settings=ev, executor=ex)
        t_rec = time.perf_counter() - t3
    total = time.perf_counter() - t0
    print(f"recommend (3 fresh seeds, saturation, ablations): {t_rec:.1f} s")
    print(f"executor start-up {t_start:.1f} s; total {total:.1f} s")
    print(
        f"recommended: {rec.replicas} x TP {rec.deployment.tensor_parallel_size}, meets SLO {rec.meets_slo}, "
        f"{rec.status}, saturation {rec.saturation_rps} req/s, headroom {rec.headroom}"
    )
    print(rec.vllm_serve_command)


if __name__ == "__main__":
    main()
