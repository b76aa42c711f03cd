"""Dashboard speed: updates per second and what watching costs the engine, on a large trace.

Runs the dashboard headless (Textual's pilot, a real app with its timer) on a Poisson trace at a
speed the engine cannot keep up with, for a few wall seconds, and prints:

* renders per second (the issue's floor: 10 a second) and the wall time one render takes;
* engine steps per second while the dashboard samples it, against the same engine run bare
  (``simulate()``-style ``LiveRun.advance_until``, no display) over the same simulated span.

    uv run python benchmarks/dashboard_speed.py                      # 100,000 requests, 5 s
    uv run python benchmarks/dashboard_speed.py --requests 20000 --seconds 3 --size 160x48

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
    ap.add_argument("--seconds", type=float, default=5.0, help="wall time to watch")
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
            t0, s0 = time.perf_counter(), app.live.step
            await pilot.pause(args.seconds)
            return time.perf_counter() - t0, app.live.step - s0, app.clock

    wall, steps, sim_t = asyncio.run(watch())
    bare = LiveRun(trace, CONFIG, LinearStepTime())
    t0 = time.perf_counter()
    bare.advance_until(sim_t)
    bare_wall = time.perf_counter() - t0
    n = len(render_s)
    print(f"trace: {args.requests:,} requests at {args.rate:g} req/s; terminal {cols}x{rows}")
    print(f"watched {wall:.1f} s wall: {n / wall:.1f} renders/s, {1e3 * sum(render_s) / max(n, 1):.1f} ms per render")
    print(f"engine while watched: {steps / wall:,.0f} steps/s ({steps:,} steps to t={sim_t:,.1f} s simulated)")
    print(f"engine bare, same span: {bare.step / bare_wall:,.0f} steps/s ({bare_wall:.2f} s)")
    print(f"watching costs {100 * (1 - (steps / wall) / (bare.step / bare_wall)):.0f} % of engine speed")


if __name__ == "__main__":
    main()
