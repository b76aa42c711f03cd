"""Speculative decoding vs load: TPOT p50/p99 and goodput for k = 0..4 at two acceptance levels.

One trace (a Poisson chat-like workload) is replayed at increasing load by compressing its
arrival times; each load runs with speculation off (k = 0) and with EAGLE-3 drafting k = 1..4 at
a high and a low acceptance level, on the roofline (llama-3.1-8b on one H100). For each k the
crossover is the lowest load at which its TPOT p50 is no better than k = 0's: where speculation
stops paying.

    uv run python benchmarks/spec_decode.py
    uv run python benchmarks/spec_decode.py --requests 400 --loads 2,8,16,32,64
    uv run python benchmarks/spec_decode.py --validate   # servesim vs published speed-ups
    uv run python benchmarks/spec_decode.py --validate --draft-step-fraction 0.07  # a fixed drafter cost

``--validate`` replays the published measurements of ``PUBLISHED`` (model, GPU, batch size) on
the roofline: a batch of B equal requests arriving together (B = the concurrency the source
ran at), EAGLE-3 with the preset acceptance, and prints servesim's output-token throughput
with and without speculation next to the published ratio (docs/perf.md, "Speculative decoding").
The drafter is timed on its own roofline (``perf/drafter.py``: the EAGLE-3 head of the target)
unless ``--draft-step-fraction`` fixes each pass at that fraction of the target's decode step.

Figures are printed, never asserted. Acceptance levels are per-position conditional rates
(``speculative.ACCEPTANCE_PRESETS``): "high" is the EAGLE-3 preset, "low" a flat 0.4.
"""

from __future__ import annotations

import argparse
import time
import warnings

from servesim.engine import SLO, EngineConfig, simulate
from servesim.perf.roofline import build_step_time_model
from servesim.traces import GeneratorSpec, PoissonArrivals, generate_trace
from servesim.traces.schema import Trace

LEVELS = {"high": None, "low": (0.4,)}  # None: the method's preset (EAGLE-3)
SLO_ = SLO(ttft_ms=2000, tpot_ms=25)


def scaled(base: Trace, factor: float) -> Trace:
    df = base.df.copy()
    df["arrival_time_s"] = df["arrival_time_s"] / factor
    return Trace(df, base.provenance)


#: Published measured speed-ups (output-token throughput, speculation on / off), with sources.
#: (label, model, gpu, batch, k, published on/off tok/s or None, published ratio, source)
PUBLISHED: tuple[tuple[str, str, str, int, int, tuple[float, float] | None, float, str], ...] = (
    (
        "EAGLE-3, batch 1",
        "llama-3.1-8b",
        "h100",
        1,
        5,
        (373.25, 158.34),
        373.25 / 158.34,
        "SGLang docs 'Speculative Decoding' (from the EAGLE-3 paper, arXiv:2503.01840): "
        "LLaMA-Instruct 3.1 8B, MT-bench, 1 x H100, 158.34 -> 373.25 tok/s",
    ),
    (
        "EAGLE-3, batch 64",
        "llama-3.1-8b",
        "h100",
        64,
        5,
        None,
        1.38,
        "EAGLE-3 paper (arXiv:2503.01840) abstract and sec. 4: SGLang, H100, LLaMA-3.1-8B, "
        "MT-bench, 1.38x throughput at batch size 64",
    ),
)
PROMPT_LEN, OUTPUT_LEN = 128, 512  # MT-bench-like: short turns, a few hundred output tokens


def _batch_throughput(
    model_name: str, gpu: str, batch: int, spec: dict[str, object] | None
) -> tuple[float, float]:
    """Output tokens/s of ``batch`` equal requests served together, and the run's tokens per
    verifying step (1 without speculation)."""
    trace = Trace.from_records(
        [
            {"req_id": f"b{i}", "arrival_time_s": 0.0, "prompt_len": PROMPT_LEN, "output_len": OUTPUT_LEN}
            for i in range(batch)
        ],
        source=f"batch of {batch}",
    )
    mns, mbt = max(batch, 1), 8192
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = build_step_time_model(model_name, gpu, max_num_seqs=mns, max_num_batched_tokens=mbt)
    cfg = EngineConfig(
        max_num_seqs=mns, max_num_batched_tokens=mbt, num_gpu_blocks=25_000, speculative_config=spec
    )
    res = simulate(trace, cfg, model, pooled_itl=False)
    s = res.summary
    first = float(res.requests["first_token_s"].min())
    last = float(res.requests["finish_s"].max())
    tps = batch * (OUTPUT_LEN - 1) / (last - first)  # decode throughput (the first token is the prefill's)
    mal = (
        s.speculative.mean_acceptance_length
        if s.speculative and s.speculative.mean_acceptance_length
        else 1.0
    )
    return tps, mal


def validate(fraction: float | None) -> None:
    drafter = "drafter on its roofline" if fraction is None else f"draft_step_fraction {fraction:g}"
    print(
        "servesim vs published speed-ups (EAGLE-3 preset acceptance, chain drafts; roofline with the "
        f"shipped profile, {drafter})"
    )
    head = f"{'configuration':<20} {'k':>2} {'off tok/s':>10} {'on tok/s':>9} {'tok/step':>8}"
    print(head + f" {'servesim':>9} {'published':>9} {'diff':>7}")
    for label, model, gpu, batch, k, pub_tps, pub_ratio, source in PUBLISHED:
        off, _ = _batch_throughput(model, gpu, batch, None)
        spec: dict[str, object] = {"method": "eagle3", "num_speculative_tokens": k}
        if fraction is not None:
            spec["draft_step_fraction"] = fraction
        on, mal = _batch_throughput(model, gpu, batch, spec)
        ratio = on / off
        diff = (ratio - pub_ratio) / pub_ratio * 100
        row = f"{label:<20} {k:>2} {off:>10.1f} {on:>9.1f} {mal:>8.2f}"
        print(row + f" {ratio:>8.2f}x {pub_ratio:>8.2f}x {diff:>+6.0f}%")
        if pub_tps is not None:
            print(f"{'':<20}    published tok/s: off {pub_tps[1]:.1f}, on {pub_tps[0]:.1f}")
        print(f"{'':<20}    source: {source}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--validate", action="store_true", help="compare with published speed-ups and exit")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--loads", default="2,8,32,64,128", help="request rates (req/s) to replay the trace at")
    ap.add_argument("--max-k", type=int, default=4)
    ap.add_argument(
        "--draft-step-fraction",
        type=float,
        default=None,
        help="each draft pass this fraction of the target's decode step (default: the drafter's roofline)",
    )
    args = ap.parse_args()
    if args.validate:
        validate(args.draft_step_fraction)
        return
    loads = [float(x) for x in args.loads.split(",")]
    base = generate_trace(
        GeneratorSpec(num_requests=args.requests, seed=0, arrival=PoissonArrivals(rate=1.0))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = build_step_time_model("llama-3.1-8b", "h100", max_num_seqs=256, max_num_batched_tokens=8192)
    t0 = time.perf_counter()
    rows: dict[tuple[str, int, float], tuple[float, float, float, float]] = {}
    for level, rates in LEVELS.items():
        for k in range(0 if level == "high" else 1, args.max_k + 1):  # k = 0 runs once
            for load in loads:
                spec = None
                if k:
                    spec = {"method": "eagle3", "num_speculative_tokens": k, "acceptance_rates": rates}
                    if args.draft_step_fraction is not None:
                        spec["draft_step_fraction"] = args.draft_step_fraction
                cfg = EngineConfig(
                    max_num_seqs=256,
                    max_num_batched_tokens=8192,
                    num_gpu_blocks=25_000,
                    speculative_config=spec,
                )
                s = simulate(scaled(base, load), cfg, model, slo=SLO_, pooled_itl=False).summary
                mal = s.speculative.mean_acceptance_length if s.speculative else 1.0
                rows[(level, k, load)] = (s.tpot_ms.p50, s.tpot_ms.p99, s.goodput, mal or 1.0)
    print(f"{args.requests} requests, llama-3.1-8b on 1 x h100 (roofline), EAGLE-3 drafts, SLO {SLO_}")
    for level in LEVELS:
        print(f"\nacceptance {level}:")
        print(f"{'k':>2} " + " ".join(f"{'load ' + format(x, 'g'):>24}" for x in loads))
        for k in range(args.max_k + 1):
            cells = []
            for load in loads:
                p50, p99, good, mal = rows[(level, k, load)] if k else rows[("high", 0, load)]
                cells.append(f"{p50:5.1f}/{p99:5.1f} ms {good:5.2f}/s {mal:3.1f}")
            print(f"{k:>2} " + " ".join(f"{c:>24}" for c in cells))
        print("   (cell: TPOT p50/p99, goodput, tokens per verifying step)")
        for k in range(1, args.max_k + 1):
            cross = next((x for x in loads if rows[(level, k, x)][0] >= rows[("high", 0, x)][0]), None)
            where = f"at {cross:g} req/s" if cross is not None else f"beyond {loads[-1]:g} req/s"
            print(f"   k={k}: TPOT p50 no better than k=0 {where}")
    print(f"\n{time.perf_counter() - t0:.1f} s wall")


if __name__ == "__main__":
    main()
