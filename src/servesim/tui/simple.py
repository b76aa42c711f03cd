"""``--ui simple``: the dashboard as progress lines, for terminals that cannot go full-screen
(CI logs, dumb terminals, pipes). No Textual: plain lines on a stream."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

from servesim import ClusterResult, LiveFleetRun, LiveRun, RunSnapshot, SimulationResult
from servesim.services.cluster import PDResult


def progress_line(snap: RunSnapshot, speed: float) -> str:
    """One line: the clock, the batch, the queue, KV and the rolling latencies."""

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:,.0f}"

    down = sum(not r.alive for r in snap.replicas)
    usable = snap.kv_blocks_usable
    # a hybrid model: each KV cache group kind's share of the pool beside the total
    groups = ", ".join(f"{kind} {n / usable:.0%}" for kind, n in snap.kv_groups) if usable else ""
    pd = snap.pd
    transfers = (
        f"  KV-wait {pd.waiting_for_kv:,}  transfers {pd.transfers_in_flight:,} on the wire "
        f"{pd.transfers_queued:,} queued  KV moved {pd.kv_moved_gb:,.2f} GB"
        if pd is not None
        else ""
    )
    return (
        f"t {snap.time_s:9,.2f}s x{speed:g}  step {snap.step:,}  "
        f"done {snap.num_closed:,}/{snap.num_requests:,}  "
        f"running {snap.num_running:,}  waiting {snap.num_waiting:,}  "
        f"kv {snap.kv_blocks_used / usable if usable else 0:.0%}{f' ({groups})' if groups else ''}  "
        f"ttft p50/p99 {ms(snap.ttft_p50_ms)}/{ms(snap.ttft_p99_ms)} ms  "
        f"tpot p99 {ms(snap.tpot_p99_ms)} ms  {snap.total_tokens_per_s:,.0f} tok/s"
        + transfers
        + (f"  {down} replica(s) down" if down else "")
    )


def run_simple(
    live: LiveRun | LiveFleetRun[Any],
    out: TextIO,
    *,
    speed: float,
    every_s: float = 1.0,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> SimulationResult | ClusterResult | PDResult:
    """Advance at ``speed`` simulated seconds per wall second, a line every ``every_s`` of wall
    time (and one at the end), then finish the run."""
    t_sim = 0.0
    while not live.done:
        started = clock()
        t_sim += speed * every_s
        live.advance_until(t_sim)
        print(progress_line(live.snapshot(waiting_shown=0), speed), file=out, flush=True)
        left = every_s - (clock() - started)
        if left > 0 and not live.done:
            sleep(left)
    return live.finish()
