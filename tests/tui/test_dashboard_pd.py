"""The dashboard of a prefill/decode-disaggregated run, driven with Textual's pilot: the pools'
strip, each replica labelled with its pool, the legs tile against ``PDCluster``'s own result,
failures in either pool, the keys, and every tile whole at 80x24."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence

import pytest
from textual.pilot import Pilot

from servesim import open_trace
from servesim.cluster.config import FailureEvent
from servesim.cluster.pd import PDCluster
from servesim.cluster.pd_results import LEGS, PDResult, pd_result
from servesim.spec import ClusterSpec, DeploymentSpec, DisaggregatedSpec, resolve_cluster
from servesim.spec.cluster import ResolvedDisaggregated
from servesim.tui.app import DashboardApp
from servesim.tui.screens import DetailScreen, FailScreen, SeqsScreen
from servesim.tui.spec import PDDashboardSpec
from servesim.tui.widgets import BatchTable, EventLog, QueueTable

SIZES = [(80, 24), (160, 48)]
N = 200


def pd_spec(failures: Sequence[FailureEvent] = (), n_prefill: int = 1, n_decode: int = 2) -> PDDashboardSpec:
    tr = open_trace("poisson_20_rps", num_requests=N, seed=0)
    cluster = ClusterSpec(
        trace="poisson_20_rps",
        num_requests=N,
        disaggregated=DisaggregatedSpec(
            prefill=DeploymentSpec(step_time_ms=10, replicas=n_prefill),
            decode=DeploymentSpec(step_time_ms=10, replicas=n_decode),
            link="tcp-25g",  # slow enough that transfers queue
        ),
        failures=list(failures),
    )
    resolved = resolve_cluster(cluster, tr)
    assert isinstance(resolved, ResolvedDisaggregated)
    return PDDashboardSpec(tr, "poisson_20_rps", cluster, resolved)


def one_go(spec: PDDashboardSpec) -> PDResult:
    """The same run as ``servesim cluster --prefill-replicas ...`` runs it: PDCluster.run()."""
    r = spec.resolved
    run = PDCluster(
        spec.trace,
        r.prefill,
        r.decode,
        r.context,
        short_prompt_tokens=r.short_prompt_tokens,
        failures=spec.cluster.failures,
    ).run()
    return pd_result(run, r.context.bytes_total(1))


def drive(
    app: DashboardApp, body: Callable[[Pilot[None], DashboardApp], Awaitable[None]], size: tuple[int, int]
) -> None:
    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await body(pilot, app)

    asyncio.run(main())


def text(app: DashboardApp, widget: str) -> str:
    return str(app.query_one(widget).render())


def log_lines(app: DashboardApp) -> list[str]:
    return app.query_one("#events", EventLog).lines_written


def ms(v: float) -> str:
    return f"{v:,.1f}" if v < 10_000 else f"{v:,.0f}"


@pytest.mark.parametrize("size", SIZES)
def test_the_pools_each_replica_labelled_and_the_legs_tile_is_the_runs_result(size: tuple[int, int]) -> None:
    spec = pd_spec()
    app = DashboardApp(spec, paused=True, start_at=2.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        snap = app.snap
        assert snap is not None and snap.pd is not None
        status = text(app, "#status")
        assert "t 2.00s" in status and f"done {snap.num_closed}/{N}" in status
        assert app.query_one("#legs").border_title == "legs (ms) · KV on tcp-25g"
        prefill, decode = text(app, "#pools").splitlines()
        assert prefill.startswith("prefill") and " p0 " in prefill and "d0" not in prefill
        assert decode.startswith("decode") and "▸d0 " in decode and " d1 " in decode
        d0 = snap.replicas[1]
        assert f"d0 {len(d0.running)}/{d0.max_num_seqs} kv {d0.kv_usage:.0%}" in decode
        waits = [r.kv_wait for r in snap.replicas if r.role == "decode"]
        assert sum(waits) == snap.pd.waiting_for_kv > 0  # transfers are under way at 2 s
        assert decode.count("wait-KV") == sum(1 for w in waits if w)
        batch = app.query_one("#batch", BatchTable)
        assert batch.border_title == f"batch d0 (decode) {len(d0.running)}/{d0.max_num_seqs}"
        assert batch.row_count == len(d0.running) > 0
        await pilot.press("left_square_bracket")
        assert str(batch.border_title).startswith("batch p0 (prefill) ")
        assert text(app, "#kv").startswith("KV p0 ")
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert str(batch.border_title).startswith("batch d1 (decode) ")
        # the legs so far: the tile shows the snapshot's figures
        legs = text(app, "#legs").splitlines()
        assert legs[0].split() == [str(snap.pd.num_disaggregated), "done", "mean", "p99"]
        figures = {x.leg: x for x in snap.pd.legs}
        for line, leg in zip(legs[1:6], LEGS, strict=True):
            x = figures[leg]
            assert line == f"{leg.replace('_', ' '):<14}{ms(x.mean_ms):>8}{ms(x.p99_ms):>8}"
        assert legs[6].startswith(f"KV {snap.pd.kv_moved_gb:,.2f} GB · wire {snap.pd.transfers_in_flight}")
        assert legs[7].startswith(f"wait-KV {snap.pd.waiting_for_kv} · queue p99 ")
        # to the end: the legs are PDCluster.run()'s, figure for figure
        app.fast_forward(math.inf)
        app.refresh_view()
        await pilot.pause()
        want = one_go(spec).summary
        legs = text(app, "#legs").splitlines()
        assert legs[0].split()[:2] == [str(want.num_disaggregated), "done"]
        for line, leg in zip(legs[1:6], LEGS, strict=True):
            x = want.legs[leg]
            assert line == f"{leg.replace('_', ' '):<14}{ms(x.mean_ms):>8}{ms(x.p99_ms):>8}"
        assert legs[6].startswith(f"KV {want.transfer_gb:,.2f} GB · wire 0 · queue 0")
        assert legs[7] == f"wait-KV 0 · queue p99 {ms(want.link_wait_p99_ms)}"
        assert f"done {N}/{N}" in text(app, "#status") and app.live.done

    drive(app, body, size)


@pytest.mark.parametrize(("n_prefill", "n_decode"), [(1, 2), (6, 6)])
def test_every_tile_fits_at_80x24(n_prefill: int, n_decode: int) -> None:
    """At 80x24 the pools' two lines (six replicas a pool too: the words dropped, never wrapped
    onto the other pool's line), the batch and its gauges, the queue, the events and the legs
    tile (header, five legs, two transfer lines) are all whole on the screen."""
    app = DashboardApp(pd_spec(n_prefill=n_prefill, n_decode=n_decode), paused=True, start_at=3.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        screen = app.screen.region
        assert app.query_one("#pools").region.height == 2
        prefill, decode = text(app, "#pools").splitlines()
        assert len(prefill) <= 80 and len(decode) <= 80
        assert all(f"p{k} " in prefill for k in range(n_prefill))
        assert all(f"d{k} " in decode for k in range(n_decode))
        side = app.query_one("#side").content_region
        for tile in ("#kv", "#latency", "#tput", "#spark"):
            region = app.query_one(tile).region
            assert region.height > 0 and side.contains_region(region), (tile, region, side)
        assert text(app, "#tput").startswith("tok/s ")
        legs = app.query_one("#legs")
        assert legs.content_region.height >= 8 and screen.contains_region(legs.region)
        lines = text(app, "#legs").splitlines()
        assert len(lines) == 8 and all(len(line) <= legs.content_region.width for line in lines), lines
        for panel in ("#batch", "#queue", "#events"):
            inner = app.query_one(panel).content_region
            assert inner.height >= 3 and screen.contains_region(app.query_one(panel).region), panel

    drive(app, body, (80, 24))


@pytest.mark.parametrize("size", SIZES)
def test_failures_in_either_pool_are_shown_as_cluster_failures(size: tuple[int, int]) -> None:
    fails = [FailureEvent(node="p0", time_s=1.0), FailureEvent(node="d1", time_s=1.5, recover_after_s=1.0)]
    spec = pd_spec(fails, n_prefill=2)
    app = DashboardApp(spec, paused=True, start_at=2.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        prefill, decode = text(app, "#pools").splitlines()
        assert "p0 DOWN" in prefill and "p1 " in prefill
        assert "d1 DOWN" in decode
        want = one_go(spec)
        lines = log_lines(app)
        for f in want.failures:
            assert any(f"{f.node} LOST, {f.requests} requests taken off" in line for line in lines)
        early = [r for r in want.recoveries if r.time_s <= 2.0]
        assert early
        for r in early:  # what became of each request the losses touched
            assert any(f"{r.req_id} {r.action} ({r.node} lost) -> {r.target or 'parked'}" in x for x in lines)
        app.fast_forward(3.0)
        app.refresh_view()
        await pilot.pause()
        assert "d1 DOWN" not in text(app, "#pools") and any("d1 back" in x for x in log_lines(app))

    drive(app, body, size)


def test_f_fails_a_replica_of_either_pool_as_if_given_with_fail() -> None:
    app = DashboardApp(pd_spec(n_prefill=2), paused=True, start_at=1.2)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        await pilot.press("f")
        assert isinstance(app.screen, FailScreen)
        assert [n for n in app.screen.names] == ["p0", "p1", "d0", "d1"]
        await pilot.press("down", "down", "down", "down", "enter")  # d0, lost now, for good
        await pilot.pause()
        assert not isinstance(app.screen, FailScreen)
        assert isinstance(app.spec, PDDashboardSpec)
        assert [(f.node, f.time_s) for f in app.spec.cluster.failures] == [("d0", 1.2)]
        assert "d0 DOWN" in text(app, "#pools").splitlines()[1]
        assert str(app.query_one("#batch").border_title).startswith("batch d0 (decode) 0/")
        lines = log_lines(app)
        assert any("d0 failed (f)" in x for x in lines) and any("d0 LOST" in x for x in lines)
        assert any("(d0 lost) -> d1" in x for x in lines)
        app.fast_forward(math.inf)
        # the run is the one --fail d0@1.2 gives
        assert app.live.finish() == one_go(pd_spec([FailureEvent(node="d0", time_s=1.2)], n_prefill=2))

    drive(app, body, (80, 24))


def test_m_and_c_restart_both_pools_or_say_why_not() -> None:
    app = DashboardApp(pd_spec(), paused=True, start_at=1.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        await pilot.press("m")
        assert isinstance(app.screen, SeqsScreen)
        await pilot.press(*"\b\b\b", "8", "enter")
        await pilot.pause()
        assert isinstance(app.spec, PDDashboardSpec)
        assert app.spec.config.max_num_seqs == 8 == app.spec.prefill_config.max_num_seqs
        prefill, decode = text(app, "#pools").splitlines()
        assert "/8 kv" in prefill and decode.count("/8 kv") == 2
        assert "t 1.00s" in text(app, "#status") and "seqs 8" in text(app, "#status")
        assert any("restarted with max_num_seqs 8 (both pools)" in x for x in log_lines(app))
        await pilot.press("c")
        await pilot.pause()
        longest = int(app.spec.trace.df["prompt_len"].max())
        said = [n.message for n in app._notifications]
        if longest > app.spec.config.max_num_batched_tokens:  # vLLM refuses: its reason, no crash
            assert app.spec.config.enable_chunked_prefill and "chunked on" in text(app, "#status")
            assert any("not restarted" in m and "max_num_batched_tokens" in m for m in said)
        else:
            assert not app.spec.config.enable_chunked_prefill and "chunked off" in text(app, "#status")

    drive(app, body, (80, 24))


def test_enter_shows_a_requests_legs() -> None:
    app = DashboardApp(pd_spec(), paused=True, start_at=2.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        batch = app.query_one("#batch", BatchTable)
        slot = batch.selected()
        assert slot is not None
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, DetailScreen)
        shown = str(app.screen.query_one("#detail Static").render())
        assert f"{slot.req_id}  decoding on d0" in shown
        assert (
            "prefill scheduled on p0" in shown and "KV pull p0->d0 issued" in shown and "KV landed" in shown
        )

    drive(app, body, (80, 24))


def test_f_on_a_replica_whose_later_failure_is_given_says_why_not() -> None:
    app = DashboardApp(pd_spec([FailureEvent(node="p0", time_s=3.0)]), paused=True, start_at=1.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        await pilot.press("f", "enter")  # p0, lost now, for good: it fails again at 3 s
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert any("not failed" in m and "node 'p0' fails at 3.0 s while already down" in m for m in said), (
            said
        )
        assert isinstance(app.spec, PDDashboardSpec) and len(app.spec.cluster.failures) == 1
        assert "p0 DOWN" not in text(app, "#pools")

    drive(app, body, (80, 24))


def test_the_queue_lists_the_requests_waiting_for_their_kv_first() -> None:
    """vLLM admits its KV-holding queue before the waiting queue: a decode replica's queue panel
    lists the requests whose KV is being pulled first, marked KV, each one's timeline saying so."""
    app = DashboardApp(pd_spec(), paused=True, start_at=2.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        snap = app.snap
        assert snap is not None
        d0 = snap.replicas[1]
        assert d0.label == "d0 (decode)" and d0.kv_wait > 0
        queue = app.query_one("#queue", QueueTable)
        total = d0.num_holding + d0.num_waiting
        assert queue.border_title == f"waiting d0 {total}"
        assert queue.row_count == total
        rows = [queue.get_row_at(i) for i in range(queue.row_count)]
        marked = [str(r[1]).removesuffix(" KV") for r in rows if str(r[1]).endswith(" KV")]
        assert len(marked) == d0.kv_wait and all(str(r[1]).endswith(" KV") for r in rows[: d0.kv_wait])
        assert marked == [s.req_id for s in d0.holding if s.waiting_for_kv]
        # the mark and the title are on the screen at 80x24
        inner = queue.content_region.width
        assert queue.region.width >= len(str(queue.border_title)) + 6  # corner, spaces, corner
        assert inner >= 4 + 1 + len(f"{marked[0]} KV")
        tl = app.live.timeline(marked[0])
        assert tl.state == "waiting for KV" and tl.replica == "d0"
        assert any(w.startswith("KV pull p0->d0 issued") for _t, w in tl.events)

    drive(app, body, (80, 24))


def test_with_every_decode_replica_down_the_strip_counts_the_parked_requests() -> None:
    spec = pd_spec([FailureEvent(node="d0", time_s=1.0, recover_after_s=2.0)], n_decode=1)
    app = DashboardApp(spec, paused=True, start_at=2.5)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        snap = app.snap
        assert snap is not None and snap.num_parked > 0
        decode = text(app, "#pools").splitlines()[1]
        assert "d0 DOWN" in decode and decode.endswith(f"{snap.num_parked:,} parked")
        app.fast_forward(3.5)
        app.refresh_view()
        await pilot.pause()
        assert "parked" not in text(app, "#pools") and "d0 DOWN" not in text(app, "#pools")

    drive(app, body, (80, 24))


def test_s_runs_exactly_one_engine_step_of_either_pool() -> None:
    app = DashboardApp(pd_spec(), paused=True, start_at=1.0)

    async def body(pilot: Pilot[None], app: DashboardApp) -> None:
        before = app.live.step
        await pilot.press("s")
        assert app.live.step == before + 1 and f"step {before + 1:,}" in text(app, "#status")
        await pilot.press("s", "s")
        assert app.live.step == before + 3 and app.paused

    drive(app, body, (80, 24))
