"""The dashboard app: a live run on a timer, sampled for display (never every step at speed).

Each tick (10 a second by default) advances the simulated clock by ``speed`` × the wall time
since the previous tick, within a wall-time budget so that keys stay responsive; if the engine
cannot keep up the clock lags and the status line says so. Then one snapshot is rendered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from time import perf_counter
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer, Static

from servesim import FailureEvent, LiveFleetRun, LiveRun, RunSnapshot
from servesim.errors import describe, user_errors
from servesim.events import RecoveryDecision, ReplicaDown
from servesim.services.run import tokens_per_verifying_step
from servesim.tui.screens import DetailScreen, FailScreen, HelpScreen, SeqsScreen
from servesim.tui.spec import DashboardSpec, PDDashboardSpec
from servesim.tui.widgets import (
    BatchTable,
    CpuTierGauge,
    EventLog,
    KvGauge,
    LatencyGauges,
    LegsTile,
    PoolStrip,
    QueueTable,
    ReplicaStrip,
    SlotTable,
    SpecSpark,
    SpecTile,
    Throughput,
    ThroughputSpark,
)

STEP_CHUNK = 256  # engine steps between wall-clock checks while catching up
WAITING_SHOWN = 200  # queue rows rendered (the count shown is always exact)
SPEEDS = (1 / 64, 100_000.0)


class DashboardApp(App[None]):
    """``servesim dashboard``: the continuous batch, the queue, KV, latency against the SLO."""

    CSS_PATH = "dashboard.tcss"
    TITLE = "servesim dashboard"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle_pause", "Pause", key_display="spc"),
        Binding("s", "step", "Step"),
        Binding("plus,equals_sign", "faster", "Fast", key_display="+"),
        Binding("minus", "slower", "Slow", key_display="-"),
        Binding("f", "fail", "Fail"),
        Binding("c", "toggle_chunked", "Chunk"),
        Binding("m", "max_num_seqs", "Seqs"),
        Binding("z", "zoom", "Zoom"),
        Binding("p", "screenshot_svg", "SVG"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit", "Quit"),
        Binding("left_square_bracket", "replica(-1)", "Prev", show=False, key_display="["),
        Binding("right_square_bracket", "replica(1)", "Next", show=False, key_display="]"),
        Binding("escape", "unzoom", "Restore", show=False),
    ]

    def __init__(
        self,
        spec: DashboardSpec | PDDashboardSpec,
        *,
        speed: float = 1.0,
        paused: bool = False,
        start_at: float = 0.0,
        fps: float = 10.0,
        budget_s: float = 0.06,
        screenshot_dir: Path | None = None,
        clock: Callable[[], float] = perf_counter,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.pd = isinstance(spec, PDDashboardSpec)  # prefill/decode pools: their strip and legs tile
        self.live: LiveRun | LiveFleetRun[Any] = spec.start()
        self.speed = min(max(speed, SPEEDS[0]), SPEEDS[1])
        self.paused = paused
        self.start_at = start_at
        self.fps = fps
        self.budget_s = budget_s
        self._budget = budget_s
        self.screenshot_dir = screenshot_dir
        self._clock = clock  # wall seconds: the ticks' pace and the engine's budget (tests pass their own)
        self.clock = 0.0  # the simulated time shown
        self.lagging = False
        # a disaggregated run opens on its first decode replica (the batch the clients wait on)
        self.selected = len(spec.resolved.prefill) if isinstance(spec, PDDashboardSpec) else 0
        self.injected: list[FailureEvent] = []
        self.spark: deque[float] = deque(maxlen=120)
        self._spark_t = -1.0
        # Speculative decoding: tokens per verifying step, sampled with the throughput.
        self.spec_spark: deque[float] = deque(maxlen=120)
        self._spec_last: tuple[int, int] = (0, 0)
        self.spec_recent: float | None = None
        self.snap: RunSnapshot | None = None
        self._summarized: object | None = None  # the finished run whose summary is shown
        self._last = 0.0
        self.renders = 0

    @property
    def main(self) -> Screen[None]:
        """The dashboard screen (queries go there even while a dialog is on top)."""
        return self.screen_stack[0]

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Static(id="status")
        if self.pd:
            yield from self._compose_pd()
            return
        if self.spec.is_cluster:
            yield ReplicaStrip(id="replicas")
        # With a CPU tier the side panel has four tiles: packed without gaps, and the top row no
        # shorter than they are (dashboard.tcss, ``-tier``), so tok/s stays on it at 80x24.
        tier = self.spec.config.kv_offloading_size is not None
        # A hybrid model's KV gauge has a line per KV cache group kind: packed (``-groups``).
        side = " ".join(c for c, on in (("-tier", tier), ("-groups", self.spec.config.hybrid)) if on)
        with Horizontal(id="top", classes="-tier" if tier else ""):
            yield BatchTable(id="batch")
            yield Static(id="summary")
            with Vertical(id="side", classes=side):
                yield KvGauge(id="kv")
                if tier:
                    yield CpuTierGauge(id="cpu")
                yield LatencyGauges(id="latency")
                yield Throughput(id="tput")
                yield ThroughputSpark([], id="spark")
                if self.spec.config.speculative_config is not None:
                    yield SpecTile(id="spec")
                    yield SpecSpark([], id="specspark")
        with Horizontal(id="bottom"):
            yield QueueTable(id="queue")
            yield EventLog(id="events")
        yield Footer(show_command_palette=False, compact=True)

    def _compose_pd(self) -> ComposeResult:
        """Prefill/decode pools: a line per pool, the shown replica's batch and gauges, then its
        queue, the events and the legs tile (at 80x24: ten rows each, every tile whole)."""
        yield PoolStrip(id="pools")
        with Horizontal(id="top", classes="-pd"):
            yield BatchTable(id="batch")
            yield Static(id="summary")
            with Vertical(id="side", classes="-pd"):
                yield KvGauge(id="kv")
                yield LatencyGauges(id="latency")
                yield Throughput(id="tput")
                yield ThroughputSpark([], id="spark")
        with Horizontal(id="bottom", classes="-pd"):
            yield QueueTable(id="queue")
            yield EventLog(id="events")
            yield LegsTile(id="legs")
        yield Footer(show_command_palette=False, compact=True)

    def on_mount(self) -> None:
        self.main.query_one("#side").border_title = "KV · latency · tok/s"
        self.main.query_one("#events").border_title = "events"

        if self.start_at > 0:
            self.fast_forward(self.start_at)
        self.refresh_view()
        self._last = self._clock()
        self.set_interval(1 / self.fps, self.tick)
        self.main.query_one("#batch").focus()

    # ------------------------------------------------------------------ the clock
    def tick(self) -> None:
        if not self.is_running or not self.screen_stack:
            # Quitting: Textual closes the screens (the stack goes empty) before it stops the
            # app's timers, so a tick can still come; there is nothing left to advance or show.
            return
        now = self._clock()
        dt, self._last = min(now - self._last, 0.5), now
        # Keep the display at fps: when ticks come late (the terminal paints slowly, the host is
        # busy) the engine gets less of each tick, and more again when they are on time.
        period = 1 / self.fps
        self._budget = self._budget * 0.8 if dt > 1.05 * period else min(self._budget * 1.05, self.budget_s)
        if len(self.screen_stack) > 1:
            return  # a dialog is open: the run waits for it
        if not self.paused and not self.live.done:
            self.advance_to(self.clock + self.speed * dt, deadline=now + self._budget)
        try:
            self.refresh_view()
        except NoMatches:  # the app is shutting down: its widgets are gone
            return

    def advance_to(self, target: float, deadline: float | None = None) -> None:
        """Move the simulated clock to ``target`` (or as far as the deadline allows)."""
        run = self.live
        self.lagging = False
        while not run.done:
            if run.advance_until(target, max_steps=STEP_CHUNK) < STEP_CHUNK:
                self.clock = max(self.clock, target)
                break
            if deadline is not None and self._clock() > deadline:
                self.clock = max(self.clock, min(run.now, target))
                self.lagging = True
                break
        if run.done:
            self.clock = max(self.clock, run.now)

    def fast_forward(self, t: float) -> None:
        """Advance to ``t`` at once, sampling the figures as the timer would (deterministic)."""
        dt = self.spec.window_s / 10
        while self.clock < t and not self.live.done:
            self.advance_to(min(t, self.clock + dt))
            self._sample(self.live.snapshot(waiting_shown=0))

    def _sample(self, snap: RunSnapshot) -> None:
        if self.clock > self._spark_t:
            self.spark.append(snap.total_tokens_per_s)
            self._spark_t = self.clock
            totals = self.live.speculation_totals()
            if totals is not None:
                acc, ver = totals[0] - self._spec_last[0], totals[1] - self._spec_last[1]
                recent = tokens_per_verifying_step(acc, ver)  # since the last sample
                if recent is not None:
                    self.spec_recent = recent
                    self.spec_spark.append(recent)
                self._spec_last = totals

    # ------------------------------------------------------------------ rendering
    def refresh_view(self) -> None:
        run = self.live
        snap = run.snapshot(waiting_shown=WAITING_SHOWN)
        self.snap = snap
        self._sample(snap)
        reps = snap.replicas
        self.selected = min(self.selected, len(reps) - 1)
        rep = reps[self.selected]
        cfg = self.spec.config
        state = "done" if snap.done else "paused" if self.paused else "running"
        t = Text()
        t.append(f" {'■' if snap.done else '‖' if self.paused else '▶'} {state} ", style="bold reverse")
        t.append(f" t {self.clock:,.2f}s ×{self.speed:g}", style="bold")
        if self.lagging and not self.paused:
            t.append(" (engine-bound)", style="yellow")
        t.append(f" · step {snap.step:,} · done {snap.num_closed:,}/{snap.num_requests:,}")
        t.append(
            f" · seqs {cfg.max_num_seqs} · chunked {'on' if cfg.enable_chunked_prefill else 'off'}",
            style="dim",
        )
        self.main.query_one("#status", Static).update(t)
        if self.pd:
            self.main.query_one("#pools", PoolStrip).show(reps, self.selected, snap.num_parked)
            legs = self.main.query_one("#legs", LegsTile)
            legs.show(snap)
            link = snap.pd.link if snap.pd is not None else None
            legs.border_title = "legs (ms) · KV" + (f" on {link}" if link else "")
        elif self.spec.is_cluster:
            self.main.query_one("#replicas", ReplicaStrip).show(reps, self.selected)
        batch = self.main.query_one("#batch", BatchTable)
        where = f" {rep.label}" if self.spec.is_cluster else ""
        batch.border_title = f"batch{where} {len(rep.running)}/{rep.max_num_seqs}" + (
            "" if rep.alive else " DOWN"
        )
        batch.show(rep.running, self.clock)
        self._show_summary(snap.done)
        queue = self.main.query_one("#queue", QueueTable)
        listed = (*rep.holding, *rep.waiting)  # vLLM admits the KV-holding queue first
        total = rep.num_holding + rep.num_waiting
        shown = f" (first {len(listed)})" if total > len(listed) else ""
        here = f" {rep.name}" if self.pd else where  # the pool is in the batch's title
        queue.border_title = f"waiting{here} {total:,}{shown}"  # those waiting for KV: marked KV
        queue.show(listed, self.clock)
        if self.spec.is_cluster:
            self.main.query_one("#side").border_title = "KV · latency · tok/s (all)"
        self.main.query_one("#kv", KvGauge).show(rep, rep.name if self.spec.is_cluster else None)
        if self.spec.config.kv_offloading_size is not None and not self.pd:
            self.main.query_one("#cpu", CpuTierGauge).show(rep)
        self.main.query_one("#latency", LatencyGauges).show(snap, self.spec.slo)
        self.main.query_one("#tput", Throughput).show(snap)
        self.main.query_one("#spark", ThroughputSpark).data = list(self.spark)
        sc = self.spec.config.speculative_config
        if sc is not None and not self.pd:
            totals = self.live.speculation_totals()
            overall = tokens_per_verifying_step(*totals) if totals else None
            self.main.query_one("#spec", SpecTile).show(sc.num_speculative_tokens, self.spec_recent, overall)
            self.main.query_one("#specspark", SpecSpark).data = list(self.spec_spark)
        events = run.events()
        log = self.main.query_one("#events", EventLog)
        log.add(events, replicated=self.spec.is_cluster)
        if isinstance(run, LiveFleetRun) and any(isinstance(e, ReplicaDown) for e in events):
            self._show_recovery_order(run, log)
        self.renders += 1

    def _show_summary(self, done: bool) -> None:
        """A finished run shows its summary where the (now empty) batch was; a restarted one
        (c, m, f after the end) shows its batch again."""
        from servesim.views.run_end import run_end_lines

        batch = self.main.query_one("#batch", BatchTable)
        panel = self.main.query_one("#summary", Static)
        if not done:
            if self._summarized is not None:
                self._summarized = None
                panel.display, batch.display = False, True
            return
        if self._summarized is self.live:
            return
        self._summarized = self.live
        lines = run_end_lines(self.live.finish())
        panel.border_title = f"run finished: {self.spec.title}"
        panel.update(Text("\n".join(lines)))
        batch.display, panel.display = False, True

    def _show_recovery_order(self, run: LiveFleetRun[Any], log: EventLog) -> None:
        plan = run.recovery_queue()
        if plan is None:
            return
        bounded = self.spec.slo is not None and self.spec.slo.e2e_ms is not None
        has_sla = bounded or bool(self.spec.trace.df["sla_e2e_ms"].notna().any())
        misses = f"{plan.num_violations} projected SLA misses" if has_sla else "no e2e SLA (--slo e2e_ms=...)"
        head = f"       re-admission order ({plan.policy}), {misses}"
        log.note(head, "bold cyan")
        for p in plan.requests[:8]:
            verdict = ("MISS" if p.violates else "ok") if has_sla else "-"
            line = f"       {p.position + 1}. {p.req_id} done in {p.completion_ms:,.0f} ms {verdict}"
            log.note(line, "red" if p.violates and has_sla else "cyan")

    # ------------------------------------------------------------------ actions
    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self._last = self._clock()
        self.refresh_view()

    def action_step(self) -> None:
        """Exactly one engine step (and pause, so that it can be looked at)."""
        self.paused = True
        if not self.live.done and self.live.advance_steps(1):  # a finished run has no step left
            self.clock = max(self.clock, self.live.now)
        self.refresh_view()

    def action_faster(self) -> None:
        self.speed = min(self.speed * 2, SPEEDS[1])
        self.refresh_view()

    def action_slower(self) -> None:
        self.speed = max(self.speed / 2, SPEEDS[0])
        self.refresh_view()

    def action_replica(self, delta: int) -> None:
        if self.snap is not None:
            self.selected = (self.selected + delta) % len(self.snap.replicas)
            self.refresh_view()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_zoom(self) -> None:
        widget = self.focused or self.main.query_one("#batch")
        if not self.screen.maximize(widget):
            self.screen.maximize(self.main.query_one("#batch"))

    def action_unzoom(self) -> None:
        self.screen.minimize()

    def action_screenshot_svg(self) -> None:
        folder = self.screenshot_dir or Path.cwd()
        name = f"servesim-dashboard-{self.clock:.2f}s.svg"
        try:
            path = self.save_screenshot(name, str(folder))
        except OSError as e:
            self.notify(f"screenshot not saved: {describe(e)}", severity="error")
            return
        self.notify(f"screenshot saved: {path}")

    def action_fail(self) -> None:
        run = self.live
        if run.done:
            self.notify("the run is finished: there is nothing left to fail", severity="warning")
            return
        if isinstance(run, LiveFleetRun) and self.pd:
            alive = [n for n, a in zip(run.replica_names, run.alive, strict=True) if a]
            if not alive:
                self.notify("every replica is down", severity="warning")
                return
            self.push_screen(FailScreen(alive), self._pd_fail_chosen)
            return
        if not isinstance(run, LiveFleetRun):
            self.notify("failures need a cluster: start with --replicas 2 (or more)", severity="warning")
            return
        alive = [n for n, a in zip(run.replica_names, run.alive, strict=True) if a]
        if not alive:
            self.notify("every replica is down", severity="warning")
            return
        self.push_screen(FailScreen(alive), self._fail_chosen)

    def _fail_chosen(self, choice: tuple[str, float | None] | None) -> None:
        if choice is None or not isinstance(self.live, LiveFleetRun):
            return
        name, back = choice
        try:
            self.injected.append(self.live.inject_failure(name, recover_after_s=back))
        except user_errors() as e:
            self.notify(describe(e), severity="error")
            return
        moves = self.live.sim.num_recoveries
        self.live.advance_until(self.clock + 1e-9)  # process the failure now, even paused
        decided = self.live.sim.recovery_events(moves)
        targets = [e.to_replica for e in decided if isinstance(e, RecoveryDecision)]
        if targets:  # show where most of its jobs went
            busiest = max(set(targets), key=lambda n: (targets.count(n), n))
            self.selected = self.live.replica_names.index(busiest)
        self.refresh_view()

    def _pd_fail_chosen(self, choice: tuple[str, float | None] | None) -> None:
        """A disaggregated run: the failure is one more of the run's (``--fail NODE@NOW``): the
        run replays to now with it, then it strikes (even paused)."""
        if choice is None or not isinstance(self.spec, PDDashboardSpec):
            return
        name, back = choice
        t = self.clock
        try:
            spec = self.spec.with_failure(FailureEvent(node=name, time_s=t, recover_after_s=back))
            run = spec.start()
        except user_errors() as e:
            self.notify(f"not failed: {describe(e)}", severity="error")
            return
        self._replace_run(spec, run, t, f"{t:7.2f}s {name} failed (f): the run replayed to now", quiet=True)
        self.live.advance_until(t + 1e-9)  # process the failure now, even paused
        self.selected = self.live.replica_names.index(name)  # type: ignore[union-attr]
        self.refresh_view()

    def action_toggle_chunked(self) -> None:
        self.restart(enable_chunked_prefill=not self.spec.config.enable_chunked_prefill)

    def action_max_num_seqs(self) -> None:
        self.push_screen(SeqsScreen(self.spec.config.max_num_seqs), self._seqs_chosen)

    def _seqs_chosen(self, value: int | None) -> None:
        if value is not None:
            self.restart(max_num_seqs=value)

    def restart(self, **flags: object) -> None:
        """Run the same trace again with changed flags, fast-forwarded to the same time (a
        disaggregated run: the flags in both pools)."""
        t = self.clock
        what = ", ".join(f"{k} {v}" for k, v in flags.items())
        try:
            spec: DashboardSpec | PDDashboardSpec
            if isinstance(self.spec, PDDashboardSpec):
                spec, line = self.spec.with_flags(**flags), f"{t:7.2f}s restarted with {what} (both pools)"
            else:
                spec, line = self.spec.with_flags(**flags), f"{t:7.2f}s restarted with {what}"
                if spec.is_cluster:
                    failures = sorted([*spec.failures, *self.injected], key=lambda f: f.time_s)
                    spec = replace(spec, failures=tuple(failures))
            run = spec.start()
        except user_errors() as e:
            self.notify(f"not restarted: {describe(e)}", severity="error")
            return
        self._replace_run(spec, run, t, line)
        self.refresh_view()

    def _replace_run(
        self,
        spec: DashboardSpec | PDDashboardSpec,
        run: LiveRun | LiveFleetRun[Any],
        t: float,
        line: str,
        quiet: bool = False,
    ) -> None:
        """Show ``run`` (of ``spec``) from the start, fast-forwarded to ``t``; ``quiet``: the same
        run up to ``t`` (a failure added at ``t``), so its events before ``t`` are not logged twice."""
        self.spec, self.live, self.injected = spec, run, []
        self.clock, self._spark_t = 0.0, -1.0
        self.spark.clear()
        self.spec_spark.clear()
        self._spec_last, self.spec_recent = (0, 0), None
        log = self.main.query_one("#events", EventLog)
        log.note(line, "bold")
        self.fast_forward(t)
        if quiet:
            run.events()  # the replay's events up to now: shown already

    def on_slot_table_chosen(self, event: SlotTable.Chosen) -> None:
        self.push_screen(DetailScreen(self.live.timeline(event.slot.req_id)))
