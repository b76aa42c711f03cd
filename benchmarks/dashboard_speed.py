"""Dashboard speed: updates per second and what watching costs the engine, on a large trace.

Runs the dashboard headless (Textual's pilot, a real app with its timer) on a Poisson trace at a
speed the engine cannot keep up with, until the trace is done (or ``--seconds``), and prints:

* renders per second (the issue's floor: 10 a second) and the wall time one render takes;
* the wall time to run the whole trace watched, against the same engine run bare
  (``LiveRun.advance_until``, no display): what watching costs.

    uv run python benchmarks/dashboard_speed.py                      # 100,000 requests
    uv run python benchmarks/dashboard_speed.py --requests 20000 --size 160x48

Timings are printed, never asserted (machines are noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from servesim import EngineConfig, LinearStepTime, LiveRun
from servesim.traces import GeneratorSpec, PoissonArrivals, generate_trace
from servesim.tui.app import DashboardApp
from servesim.tui.spec import DashboardSpec

CONFIG = EngineConfig(num_gpu_blocks=30_000, max_num_seqs=256, max_num_batched_tokens=8192)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=17.5)
    ap.add_argument("--seconds", type=float, default=120.0, help="most wall time to watch")
    ap.add_argument("--speed", type=float, default=100_000.0, help="simulated s per wall s (engine-bound)")
    ap.add_argument("--size", default="80x24")
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.split("x"))
    trace = generate_trace(
        GeneratorSpec(num_requests=args.requests, seed=0, arrival=PoissonArrivals(rate=args.rate))
    )
    spec = DashboardSpec(trace, "bench", CONFIG, LinearStepTime())
    app = DashboardApp(spec, speed=args.speed)
    render_s: list[float] = []
    original = app.refresh_view

    def timed() -> None:
        t = time.perf_counter()
        original()
        render_s.append(time.perf_counter() - t)

    app.refresh_view = timed  # type: ignore[method-assign]

    async def watch() -> tuple[float, int, float]:
        async with app.run_test(size=(cols, rows)) as pilot:
            await pilot.pause()
            render_s.clear()
            t0, s0 = time.perf_counter(), 0  # steps from the start (the first tick may run some)
            while not app.live.done and time.perf_counter() - t0 < args.seconds:
                await pilot.pause(0.1)
            return time.perf_counter() - t0, app.live.step - s0, app.clock

    wall, steps, sim_t = asyncio.run(watch())
    bare = LiveRun(trace, CONFIG, LinearStepTime())
    t0 = time.perf_counter()
    bare.advance_until(sim_t)
    bare_wall = time.perf_counter() - t0
    n = len(render_s)
    print(f"trace: {args.requests:,} requests at {args.rate:g} req/s; terminal {cols}x{rows}")
    per_render = 1e3 * sum(render_s) / max(n, 1)
    print(f"watched {wall:.1f} s wall: {n / wall:.1f} renders/s, {per_render:.1f} ms per render")
    done = "the whole trace" if app.live.done else f"to t={sim_t:,.1f} s simulated"
    print(f"watched: {steps:,} engine steps ({done}) in {wall:.2f} s wall, {steps / wall:,.0f} steps/s")
    print(f"bare, same span: {bare.step:,} steps in {bare_wall:.2f} s, {bare.step / bare_wall:,.0f} steps/s")
    share = 100 * (steps / wall) / (bare.step / bare_wall)
    print(f"watching runs at {share:.0f} % of the bare engine's speed")


if __name__ == "__main__":
    main()
