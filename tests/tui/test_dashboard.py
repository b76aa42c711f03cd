"""The terminal dashboard driven with Textual's pilot: what a person sees after each key."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from test_starvation import bursty_trace
from textual.pilot import Pilot

from servesim import SLO, BatchComposition, EngineConfig, LinearStepTime, Trace, open_trace, simulate
from servesim.cluster import planner_policy
from servesim.tui.app import DashboardApp
from servesim.tui.screens import DetailScreen, FailScreen, HelpScreen, SeqsScreen
from servesim.tui.spec import DashboardSpec
from servesim.tui.widgets import BatchTable, EventLog, QueueTable

SIZES = [(80, 24), (160, 48)]
CONFIG = EngineConfig(num_gpu_blocks=800, max_num_seqs=32)


def spec(
    replicas: int = 1, config: EngineConfig = CONFIG, trace: Trace | None = None, **kw: Any
) -> DashboardSpec:
    tr = trace if trace is not None else open_trace("bursty", num_requests=400, seed=3)
    return DashboardSpec(
        tr, "bursty", config, LinearStepTime(), replicas=replicas, slo=SLO(ttft_ms=2000, tpot_ms=50), **kw
    )


def drive(
    app: DashboardApp,
    body: Callable[[Pilot[None], DashboardApp], Awaitable[None]],
    size: tuple[int, int] = (80, 24),
) -> None:
    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await body(pilot, app)

    asyncio.run(main())


def status(app: DashboardApp) -> str:
    return str(app.query_one("#status").render())


def log_lines(app: DashboardApp) -> list[str]:
    return app.query_one("#events", EventLog).lines_written


@pytest.mark.parametrize("size", SIZES)
def test_slots_fill_and_the_queue_drains(size: tuple[int, int]) -> None:
    app = DashboardApp(spec(), paused=True, start_at=12.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        batch = app.query_one("#batch", BatchTable)
        queue = app.query_one("#queue", QueueTable)
        snap = app.snap
        assert snap is not None and snap.num_running > 0 and snap.num_waiting > 0
        assert batch.row_count == snap.num_running
        assert queue.row_count == snap.num_waiting
        assert batch.border_title == f"batch {snap.num_running}/32"
        first = batch.get_row_at(0)
        assert str(first[0]) == snap.running[0].req_id
        assert str(first[1]).startswith(("decode ", "prefill "))
        assert "t 12.00s" in status(app) and "paused" in status(app)
        app.fast_forward(math.inf)
        app.refresh_view()
        await pilot.pause()
        assert app.live.done and batch.row_count == 0 and queue.row_count == 0
        assert "done 400/400" in status(app)

    drive(app, body, size)


def test_a_single_step_advances_exactly_one_engine_step() -> None:
    app = DashboardApp(spec(), paused=True, start_at=3.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        before = app.live.step
        await pilot.press("s")
        assert app.live.step == before + 1
        assert f"step {before + 1:,}" in status(app)
        await pilot.press("s", "s", "s")
        assert app.live.step == before + 4
        assert app.paused

    drive(app, body)


def test_space_runs_the_clock_and_speed_keys_change_it() -> None:
    """The wall clock is the test's: half a second at speed 4 is two simulated seconds, on any
    machine however busy (the app's own timer ticks too, and sees no time pass)."""
    wall = [100.0]
    app = DashboardApp(spec(), paused=True, speed=8.0, clock=lambda: wall[0])

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        await pilot.press("plus")
        assert app.speed == 16.0 and "×16" in status(app)
        await pilot.press("minus", "minus")
        assert app.speed == 4.0
        await pilot.press("space")
        wall[0] += 0.5
        app.tick()
        assert app.clock == 2.0 and "running" in status(app) and "t 2.00s" in status(app)
        await pilot.press("space")
        wall[0] += 0.3
        app.tick()
        assert app.clock == 2.0 and "paused" in status(app)

    drive(app, body)


def test_a_tick_while_the_app_shuts_down_does_nothing() -> None:
    """Issue 47: Textual closes the screens before it stops the app's timers, so when the app
    shuts down other than by ``exit()`` (after an error, or a test's pilot) the timer can tick in
    between; the tick read the dashboard screen of an empty stack (IndexError, a red CI by
    chance). Here a running dashboard's ticks come at those moments on purpose: as the shutdown
    begins, and after the screens are gone. Neither advances the clock nor renders, and the
    shutdown ends without an error."""
    app = DashboardApp(spec(), speed=8.0)
    seen: list[tuple[int, int, float]] = []
    close_all = app._close_all

    def look() -> None:
        seen.append((len(app.screen_stack), app.renders, app.clock))

    async def close_then_tick() -> None:
        look()
        app.tick()  # stopping, the screens still there
        look()
        await close_all()
        app.tick()  # the screens gone
        look()

    app._close_all = close_then_tick  # type: ignore[method-assign]

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        await pilot.press("s")  # one engine step: a clock and renders to compare with

    drive(app, body)  # an error in the shutdown's ticks would raise here
    (_, renders, clock), during, after = seen
    assert clock > 0 and renders > 0
    assert (during, after) == ((1, renders, clock), (0, renders, clock))
    app.tick()  # and once the app has ended
    assert (app.renders, app.clock) == (renders, clock)


@pytest.mark.parametrize("size", SIZES)
def test_an_injected_failure_reroutes_the_replicas_jobs_with_the_planners_strategies(
    size: tuple[int, int],
) -> None:
    app = DashboardApp(spec(replicas=3), paused=True, start_at=6.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        victims = {s.req_id for s in app.live.snapshot().replicas[0].running if s.computed_tokens}
        assert victims
        await pilot.press("f")
        assert isinstance(app.screen, FailScreen)
        await pilot.press("enter")  # the first choice: n0, lost now
        await pilot.pause()
        assert not isinstance(app.screen, FailScreen)
        sim = app.live.sim  # type: ignore[union-attr]
        assert not sim.alive[0] and "n0 DOWN" in str(app.query_one("#replicas").render())
        assert {m.req_id for m in sim.moves} == victims
        lines = log_lines(app)
        assert any("n0 LOST" in line for line in lines)
        for m in sim.moves:  # each decision shown as the planner made it
            assert any(f"{m.req_id} {m.strategy} n0->{m.to_node}" in line for line in lines)
        assert sim.recovery is planner_policy
        assert any("re-admission order (sla-aware)" in line for line in lines)
        shown = app.live.replica_names[app.selected]  # type: ignore[union-attr]
        assert shown in {m.to_node for m in sim.moves}  # the panels follow the jobs
        await pilot.press("right_square_bracket")
        nxt = app.live.replica_names[app.selected]  # type: ignore[union-attr]
        assert nxt != shown and app.query_one("#batch").border_title.startswith(f"batch {nxt}")

    drive(app, body, size)


def test_failures_need_a_cluster() -> None:
    app = DashboardApp(spec(), paused=True)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        await pilot.press("f")
        assert not isinstance(app.screen, FailScreen)
        assert any("failures need a cluster" in n.message for n in app._notifications)

    drive(app, body)


def test_the_starvation_scenario_flags_a_request_starved_after_three_preemption_cycles() -> None:
    config = EngineConfig(num_gpu_blocks=1200, policy="priority", max_num_seqs=64, starvation_threshold=3)
    trace = bursty_trace()  # the engine's starvation scenario (tests/engine/test_starvation.py)
    first = simulate(trace, config, LinearStepTime()).starvation.iloc[0]
    app = DashboardApp(spec(config=config, trace=trace), paused=True, start_at=float(first["time_s"]) - 0.05)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        who = str(first["req_id"])
        assert not any("STARVED" in line for line in log_lines(app))
        while not any("STARVED" in line for line in log_lines(app)):
            await pilot.press("s")
        line = next(line for line in log_lines(app) if "STARVED" in line)
        assert f"{who} STARVED after 3 preemptions" in line
        three = [ln for ln in log_lines(app) if f"{who} preempted" in ln]
        assert len(three) == 3 and "preempted #3," in three[-1]
        batch, queue = app.query_one("#batch", BatchTable), app.query_one("#queue", QueueTable)
        shown = [str(batch.get_row_at(i)[0]) for i in range(batch.row_count)]
        shown += [str(queue.get_row_at(i)[1]) for i in range(queue.row_count)]
        assert f"{who} STARVED" in shown  # its row says so, wherever it is

    drive(app, body, (120, 40))


def test_changing_max_num_seqs_restarts_with_the_new_limit_at_the_same_time() -> None:
    app = DashboardApp(
        spec(config=EngineConfig(num_gpu_blocks=4000, max_num_seqs=32)), paused=True, start_at=8.0
    )

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        assert app.snap is not None and app.snap.num_running > 8
        await pilot.press("m")
        assert isinstance(app.screen, SeqsScreen)
        await pilot.press(*"\b\b", "8", "enter")
        await pilot.pause()
        assert app.spec.config.max_num_seqs == 8 and app.live.config.max_num_seqs == 8  # type: ignore[union-attr]
        assert app.clock == 8.0 and "seqs 8" in status(app)
        assert app.snap.num_running <= 8 and app.query_one("#batch").border_title.endswith("/8")
        assert any("restarted with max_num_seqs 8" in line for line in log_lines(app))
        await pilot.press("c")  # refused: this trace's prompts exceed the 2048-token step budget
        assert app.spec.config.enable_chunked_prefill and "chunked on" in status(app)
        assert any(
            "not restarted" in n.message and "max_num_batched_tokens" in n.message for n in app._notifications
        )

    drive(app, body)


def test_toggling_chunked_prefill_restarts_without_it() -> None:
    config = EngineConfig(num_gpu_blocks=4000, max_num_seqs=32, max_num_batched_tokens=16384)
    app = DashboardApp(spec(config=config), paused=True, start_at=5.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        await pilot.press("c")
        assert not app.spec.config.enable_chunked_prefill and "chunked off" in status(app)
        assert app.clock == 5.0 and app.live.config.enable_chunked_prefill is False  # type: ignore[union-attr]
        await pilot.press("c")
        assert app.spec.config.enable_chunked_prefill

    drive(app, body)


def test_bad_max_num_seqs_is_refused_in_the_prompt() -> None:
    app = DashboardApp(spec(), paused=True)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        await pilot.press("m", "\b", "\b", "0", "enter")
        assert isinstance(app.screen, SeqsScreen)
        assert "≥ 1" in str(app.screen.query_one("#seqs-error").render())
        await pilot.press("escape")
        assert app.spec.config.max_num_seqs == 32

    drive(app, body)


def test_help_zoom_detail_and_screenshot(tmp_path: Path) -> None:
    app = DashboardApp(spec(), paused=True, start_at=12.0, screenshot_dir=tmp_path)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("z")
        assert app.screen.maximized is app.query_one("#batch")
        await pilot.press("escape")
        assert app.screen.maximized is None
        req = app.query_one("#batch", BatchTable).selected()
        assert req is not None
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        tl = app.screen.timeline
        assert tl.req_id == req.req_id and tl.state == "running" and tl.events[0][1] == "arrived"
        await pilot.press("escape")
        await pilot.press("p")
        shot = tmp_path / "servesim-dashboard-12.00s.svg"
        assert shot.exists() and "<svg" in shot.read_text()[:200]

    drive(app, body)


def test_clicking_a_header_sorts_the_batch() -> None:
    app = DashboardApp(spec(), paused=True, start_at=12.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        batch = app.query_one("#batch", BatchTable)
        await pilot.click(BatchTable, offset=(1 + 9 + 16 + 2, 1))  # the "context" header (inside the border)
        ctx = [s.context_len for s in batch.slots]
        assert batch.sort_key == "ctx" and ctx == sorted(ctx) and len(ctx) > 2
        await pilot.click(BatchTable, offset=(1 + 9 + 16 + 2, 1))
        assert [s.context_len for s in batch.slots] == sorted(ctx, reverse=True)
        await pilot.press("down", "down")
        assert batch.selected() is batch.slots[2]
        await pilot.click(BatchTable, offset=(2, 3), times=2)  # double click opens the row
        assert isinstance(app.screen, DetailScreen) and app.screen.timeline.req_id == batch.slots[1].req_id

    drive(app, body)


def test_a_restart_with_model_redoes_the_deployment_setup() -> None:
    """With --model, a changed flag re-derives KV blocks and step times as `simulate` would."""
    from servesim.cli.simulate_cmd import deploy
    from servesim.spec import DeploymentSpec

    trace = open_trace("bursty", num_requests=50, seed=1)
    dep = DeploymentSpec(model="llama-3.1-8b", gpu="h100", tp=1, gpu_memory_utilization=0.9)
    resolved, rebuild = deploy(dep, trace)
    s = DashboardSpec(trace, "bursty", resolved.config, resolved.step_time, rebuild=rebuild).with_flags(
        max_num_batched_tokens=16384
    )
    again = deploy(dep.model_copy(update={"engine": {"max_num_batched_tokens": 16384}}), trace)[0]
    want, want_step = again.config, again.step_time
    batch = BatchComposition(8, 8000, [], 0)
    assert s.config == want and s.step_time.step_time(batch) == want_step.step_time(batch)
    assert s.config.num_gpu_blocks is not None and s.config.max_num_batched_tokens == 16384


def _multi_turn() -> Trace:
    """Conversations whose every turn repeats the previous turns' tokens: a 600-block GPU cache
    cannot hold them from one turn to the next, a 16 GiB CPU tier can."""
    rows = [
        {
            "req_id": f"c{c}t{t}",
            "arrival_time_s": t * 6.0 + c * 0.05,
            "prompt_len": 1600 + 500 * t,
            "output_len": 40,
            "prefix_group": f"conv{c}",
            "prefix_len": 1500 + 500 * t,
        }
        for t in range(4)
        for c in range(24)
    ]
    rows.sort(key=lambda r: r["arrival_time_s"])
    return Trace.from_records(rows, source="multi-turn")


def _tier_spec(trace: Trace, offload: float | None, replicas: int = 1) -> DashboardSpec:
    from servesim.spec import DeploymentSpec, resolve_for_trace

    engine: dict[str, Any] = {"num_gpu_blocks": 600}
    if offload is not None:
        engine["kv_offloading_size"] = offload
    dep = DeploymentSpec(model="llama-3.1-8b", gpu="h100", engine=engine)
    resolved, rebuild = resolve_for_trace(dep, trace)
    return DashboardSpec(
        trace,
        "multi-turn",
        resolved.config,
        resolved.step_time,
        replicas=replicas,
        rebuild=rebuild,
        kv_connector=resolved.kv_connector if offload is not None else None,
    )


def test_the_cpu_tier_gauge_shows_usage_hits_and_tokens_as_the_run_reports_them() -> None:
    """Issue 31.4: with --kv-offloading-size the side panel has a CPU-tier gauge: chunks held of
    the tier (sized as vLLM sizes it), the CPU hit rate, tokens loaded and stored; at the end its
    figures are simulate()'s offload summary. Without a tier there is no gauge."""
    from textual.css.query import NoMatches

    from servesim.perf.catalog import load_catalog
    from servesim.perf.offload import cpu_chunks

    trace = _multi_turn()
    s = _tier_spec(trace, 16.0)
    chunks = cpu_chunks(s.config, load_catalog().model("llama-3.1-8b"))
    want = simulate(trace, s.config, s.step_time, kv_connector=s.kv_connector(s.config)).offload  # type: ignore[misc]
    assert want is not None and want.loaded_tokens > 0 and want.cpu_hit_rate is not None
    app = DashboardApp(s, paused=True, start_at=3.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        early = str(app.query_one("#cpu").render())
        assert early.startswith("CPU ") and f"/{chunks:,} chunks" in early
        assert " hit 0.0%" in early and "loaded 0 " in early  # first turns: nothing to load yet
        app.fast_forward(math.inf)
        app.refresh_view()
        await pilot.pause()
        end = str(app.query_one("#cpu").render())
        assert f"{want.cpu_chunks_stored_at_end:,}/{chunks:,} chunks" in end
        assert f" hit {want.cpu_hit_rate:.1%}\n" in end
        assert (
            f"loaded {want.loaded_tokens / 1e3:,.1f}k" in end
            and f"stored {want.stored_tokens / 1e3:,.1f}k" in end
        )

    drive(app, body, (80, 30))

    plain = DashboardApp(_tier_spec(trace, None), paused=True)

    async def none(pilot: Pilot[None], app: DashboardApp) -> None:
        with pytest.raises(NoMatches):
            app.query_one("#cpu")

    drive(plain, none)


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("offload", [None, 16.0])
def test_every_tile_fits_at_80x24_with_and_without_the_cpu_tier(replicas: int, offload: float | None) -> None:
    """At 80x24 (a cluster's replica strip included) every tile of the side panel lies inside
    it: the KV gauge, the CPU gauge with a tier, the latency gauges, tok/s and its sparkline; the
    queue and the event log keep rows too. (With the tier the side panel used to need 14 lines
    of the 10-11 it had: tok/s fell off the bottom.)"""
    app = DashboardApp(_tier_spec(_multi_turn(), offload, replicas=replicas), paused=True, start_at=20.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        screen = app.screen.region
        side = app.query_one("#side").content_region
        tiles = ["#kv", "#latency", "#tput", "#spark"] + (["#cpu"] if offload is not None else [])
        for tile in tiles:
            region = app.query_one(tile).region
            assert region.height > 0 and side.contains_region(region), (tile, region, side)
        assert str(app.query_one("#tput").render()).startswith("tok/s ")
        if offload is not None:
            cpu = str(app.query_one("#cpu").render())
            assert cpu.startswith("CPU ") and " chunks\n" in cpu and "loaded " in cpu
            assert app.query_one("#cpu").region.height == 3  # all three of its lines
        # a run already finished at 20 s shows its summary in the batch's place (issue 46)
        top = "#summary" if app.live.done else "#batch"
        for panel in (top, "#queue", "#events"):
            inner = app.query_one(panel).content_region
            assert inner.height >= 3 and screen.contains_region(app.query_one(panel).region), panel

    drive(app, body, (80, 24))


def test_each_replica_of_a_cluster_shows_its_own_cpu_tier() -> None:
    """On two replicas each engine has its own tier (the router splits the conversations): ]
    switches the gauge to the other replica's figures, and a restart keeps the tier."""
    app = DashboardApp(_tier_spec(_multi_turn(), 16.0, replicas=2), paused=True, start_at=20.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        snap = app.snap
        assert snap is not None
        tiers = [r.cpu_tier for r in snap.replicas]
        assert all(t is not None and t.stored_tokens > 0 for t in tiers)
        for i, tier in enumerate(tiers):
            assert tier is not None
            assert f"{tier.chunks_stored:,}/{tier.num_chunks:,} chunks" in str(app.query_one("#cpu").render())
            if i == 0:
                await pilot.press("right_square_bracket")
                await pilot.pause()
        await pilot.press("c")  # restart without chunked prefill: a fresh tier per engine
        await pilot.pause()
        again = app.snap
        assert again is not None and all(r.cpu_tier is not None for r in again.replicas)

    drive(app, body, (120, 36))


@pytest.mark.parametrize(("rate", "per_step"), [(1.0, "4.00"), (0.0, "1.00")])
def test_speculation_shows_accepted_tokens_per_step_and_their_history(rate: float, per_step: str) -> None:
    """With --speculative-config the side panel has a tile (tokens per verifying step now and
    over the run) and a sparkline of its history: every draft accepted gives k + 1 = 4 tokens a
    step, none 1. Without speculation there is no tile."""
    from textual.css.query import NoMatches

    from servesim.tui.widgets import SpecSpark

    cfg = EngineConfig(
        num_gpu_blocks=800,
        max_num_seqs=32,
        speculative_config={"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rates": [rate]},
    )
    app = DashboardApp(spec(config=cfg), paused=True, start_at=8.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        tile = str(app.query_one("#spec").render())
        assert tile.startswith("spec k=3 tok/step ") and f"tok/step {per_step} (run {per_step})" in tile
        data = app.query_one("#specspark", SpecSpark).data
        assert len(data) >= 2 and all(f"{v:.2f}" == per_step for v in data)

    drive(app, body, (100, 30))

    plain = DashboardApp(spec(), paused=True, start_at=2.0)

    async def none(pilot: Pilot[None], app: DashboardApp) -> None:
        with pytest.raises(NoMatches):
            app.query_one("#spec")

    drive(plain, none)


@pytest.mark.parametrize("size", SIZES)
def test_a_finished_run_shows_its_summary_not_a_blank_screen(size: tuple[int, int]) -> None:
    """Issue 46: when the run ended the batch and queue emptied and the screen went blank; the
    batch's place now holds the run's summary (the figures servesim simulate prints)."""
    app = DashboardApp(spec(), paused=True, start_at=2.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        panel = app.query_one("#summary")
        assert not panel.display and app.query_one("#batch").display  # running: the batch
        app.fast_forward(math.inf)
        app.refresh_view()
        await pilot.pause()
        assert app.live.done and panel.display and not app.query_one("#batch").display
        shown = str(panel.render())
        result = app.live.finish()
        assert panel.border_title == "run finished: bursty"
        assert "TTFT   p50" in shown and "(SLO 2,000.0 ms)" in shown
        assert f"requests: {result.summary.num_requests:,} ({result.summary.num_finished:,} finished" in shown
        assert f"preemptions: {result.summary.num_preemptions:,}" in shown
        assert "SLO attainment:" in shown and "finished within every SLO" in shown
        await pilot.press("s")  # no step left: nothing breaks, the summary stays
        assert panel.display and "done 400/400" in status(app)

    drive(app, body, size)


def test_a_finished_cluster_shows_the_fleets_summary() -> None:
    app = DashboardApp(spec(replicas=2), paused=True)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        app.fast_forward(math.inf)
        app.refresh_view()
        await pilot.pause()
        shown = str(app.query_one("#summary").render())
        assert app.query_one("#summary").display and "requests: 400 (400 finished" in shown, shown

    drive(app, body)
