"""The dashboard's KV gauge for a hybrid model (sliding-window / chunked-local layers beside full
ones), driven with Textual's pilot: a bar per KV cache group kind, each that kind's share of the
one pool, the shares adding up to the gauge; every side tile still whole at 80x24."""

from __future__ import annotations

import asyncio

import pytest
from textual.pilot import Pilot

from servesim import SLO, EngineConfig, LinearStepTime, open_trace
from servesim.engine.kv_groups import KVCacheGroup
from servesim.tui.app import DashboardApp
from servesim.tui.spec import DashboardSpec

GROUPS = {
    "window": [KVCacheGroup(kind="sliding_window", window=64), KVCacheGroup(kind="full")],
    "chunk": [KVCacheGroup(kind="chunked_local", window=256)] * 3 + [KVCacheGroup(kind="full")],
}


def _spec(groups: list[KVCacheGroup], replicas: int) -> DashboardSpec:
    cfg = EngineConfig(num_gpu_blocks=1600, max_num_seqs=32, kv_cache_groups=groups)
    trace = open_trace("bursty", num_requests=400, seed=3)
    return DashboardSpec(trace, "bursty", cfg, LinearStepTime(), replicas=replicas, slo=SLO(ttft_ms=2000))


@pytest.mark.parametrize(("layout", "replicas"), [("window", 1), ("window", 2), ("chunk", 1)])
def test_the_kv_gauge_has_a_bar_per_group_kind(layout: str, replicas: int) -> None:
    app = DashboardApp(_spec(GROUPS[layout], replicas), paused=True, start_at=12.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        snap = app.snap
        assert snap is not None
        rep = snap.replicas[0]
        kinds = dict(rep.kv_groups)
        want = {"window": ["sliding_window(64)", "full"], "chunk": ["chunked_local(256)", "full"]}[layout]
        assert list(kinds) == want
        assert sum(kinds.values()) == rep.kv_blocks_used > 0  # the kinds split the pool's blocks in use
        lines = str(app.query_one("#kv").render()).splitlines()
        assert lines[0].startswith("KV ") and lines[0].endswith(f"{rep.kv_usage:4.0%}")
        short = {"window": ["window 64", "full"], "chunk": ["chunk 256", "full"]}[layout]
        for line, name, kind in zip(lines[1:3], short, want, strict=True):
            assert line.startswith(name) and line.endswith(f"{kinds[kind] / rep.kv_blocks_usable:4.0%}"), line
        assert lines[3].startswith("prefix hits ")
        assert not any(line.endswith(" blocks") for line in lines)  # the kinds' bars in its place
        side = app.query_one("#side").content_region
        for tile in ("#kv", "#latency", "#tput", "#spark"):
            region = app.query_one(tile).region
            assert region.height > 0 and side.contains_region(region), (tile, region, side)
        assert app.query_one("#kv").region.height == 4  # every line of the gauge

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await body(pilot, app)

    asyncio.run(main())


def test_the_simple_ui_line_splits_kv_by_group_kind() -> None:
    """``--ui simple``: the progress line's ``kv`` figure has each kind's share of the fleet's
    pool beside it (summed over the live replicas), the shares adding up to it."""
    from servesim.tui.simple import progress_line

    app = DashboardApp(_spec(GROUPS["window"], 2), paused=True, start_at=12.0)

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            snap = app.snap
            assert snap is not None
            kinds = dict(snap.kv_groups)
            assert sum(kinds.values()) == snap.kv_blocks_used > 0
            assert kinds == {
                k: sum(dict(r.kv_groups)[k] for r in snap.replicas) for k in ("sliding_window(64)", "full")
            }
            usable = snap.kv_blocks_usable
            want = (
                f"kv {snap.kv_blocks_used / usable:.0%} (sliding_window(64) "
                f"{kinds['sliding_window(64)'] / usable:.0%}, full {kinds['full'] / usable:.0%})  "
            )
            assert want in progress_line(snap, 1.0)

    asyncio.run(main())
