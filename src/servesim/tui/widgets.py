"""The dashboard's panels. Each one renders a ``RunSnapshot`` (or the notices) it is handed; none
of them knows how the run advances."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.events import Click
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import RichLog, Sparkline, Static

from servesim import SLO, ReplicaState, RunSnapshot, Slot
from servesim.events import (
    Event,
    LegRecovered,
    RecoveryDecision,
    ReplicaDown,
    ReplicaUp,
    ReplicaWarning,
    RequestPreempted,
    RequestRejected,
    RequestStarved,
)
from servesim.services.cluster import LEGS

PREFILL = "bold cyan"
DECODE = "green"
PREEMPTED = "bold yellow"
STARVED = "bold white on red"
GOOD, AMBER, BAD = "green", "yellow", "bold red"


def phase_text(s: Slot) -> Text:
    """``prefill k/n`` (chunk k of n) or ``decode done/total``, coloured by phase."""
    if s.phase == "prefill":
        label = f"prefill {s.chunk}/{s.chunks}" + (" re" if s.num_preemptions else "")
        return Text(label, style=PREFILL)
    return Text(f"decode {s.num_output}/{s.max_tokens}", style=DECODE)


def req_text(s: Slot) -> Text:
    if s.starved:
        return Text(f"{s.req_id} STARVED", style=STARVED)
    if s.waiting_for_kv:  # P/D: queued with its blocks while its KV is pulled
        return Text(f"{s.req_id} KV", style="bold cyan")
    if s.num_preemptions:
        return Text(f"{s.req_id} ×{s.num_preemptions}", style=PREEMPTED)
    return Text(s.req_id)


def class_text(s: Slot) -> str:
    return f"{s.priority}" + (f"/{s.tenant}" if s.tenant else "")


class SlotTable(ScrollView, can_focus=True):
    """A table of requests, re-filled from each snapshot, drawn line by line: only the rows on
    screen are rendered, so a batch of a thousand requests costs what the visible ones cost.
    Up/down/page keys move the cursor, enter (or a double click) opens the row, a click on a
    header sorts by that column (again: reversed)."""

    COLUMNS: tuple[tuple[str, str, int], ...] = ()  # key, label, minimum width
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move(-1000000000)", "First", show=False),
        Binding("end", "move(1000000000)", "Last", show=False),
        Binding("enter", "choose", "Open", show=False),
    ]

    class Chosen(Message):
        """A row was opened (enter or double click)."""

        def __init__(self, table: SlotTable, slot: Slot) -> None:
            super().__init__()
            self.table = table
            self.slot = slot

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.sort_key: str | None = None
        self.sort_reverse = False
        self.slots: list[Slot] = []
        self.cursor_row = 0
        self._now = 0.0
        self._widths = [w for _k, _l, w in self.COLUMNS]

    # ------------------------------------------------------------------ data
    @property
    def row_count(self) -> int:
        return len(self.slots)

    def get_row_at(self, i: int) -> list[Text | str]:
        return self.row_cells(self.slots[i], self._now)

    def row_cells(self, s: Slot, now: float) -> list[Text | str]:
        raise NotImplementedError

    def sort_value(self, s: Slot, key: str) -> tuple[float | str, ...]:
        values: dict[str, tuple[float | str, ...]] = {
            "req": (s.req_id,),
            "phase": (s.phase, s.computed_tokens),
            "ctx": (s.context_len,),
            "cls": (s.priority, s.tenant or ""),
            "pre": (s.num_preemptions,),
            "wait": (s.arrival_s,),
        }
        return values.get(key, (0,))

    def sort_by(self, key: str) -> None:
        self.sort_reverse = not self.sort_reverse if self.sort_key == key else False
        self.sort_key = key
        self.show(self.slots, self._now)

    def show(self, slots: Sequence[Slot], now: float) -> None:
        rows = list(slots)
        if self.sort_key is not None:
            key = self.sort_key
            rows.sort(key=lambda s: self.sort_value(s, key), reverse=self.sort_reverse)
        self.slots, self._now = rows, now
        longest = max((len(s.req_id) for s in rows), default=0)
        self._widths = [max(w, longest + 4) if k == "req" else w for k, _l, w in self.COLUMNS]
        self.cursor_row = min(self.cursor_row, max(len(rows) - 1, 0))
        self.virtual_size = Size(sum(self._widths) + len(self._widths), len(rows) + 1)
        self.refresh()

    def selected(self) -> Slot | None:
        return self.slots[self.cursor_row] if 0 <= self.cursor_row < len(self.slots) else None

    # ------------------------------------------------------------------ drawing
    def _line(self, cells: Sequence[Text | str], style: Style | None) -> Strip:
        line = Text(no_wrap=True, overflow="crop")
        for cell, width in zip(cells, self._widths, strict=False):
            t = cell if isinstance(cell, Text) else Text(cell)
            t = t.copy()
            t.truncate(width, overflow="ellipsis", pad=True)
            line.append_text(t)
            line.append(" ")
        width = max(self.size.width, self.virtual_size.width)
        line.truncate(width, overflow="crop", pad=True)  # every row spans the panel (one background)
        x = int(self.scroll_offset.x)
        strip = Strip(line.render(self.app.console)).crop_extend(x, x + self.size.width, self.rich_style)
        return strip.apply_style(style) if style is not None else strip

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            labels = []
            for k, label, _w in self.COLUMNS:
                mark = ("▼" if self.sort_reverse else "▲") if k == self.sort_key else ""
                labels.append(Text(label + mark, style="bold"))
            return self._line(labels, Style(bgcolor="grey23"))
        i = int(self.scroll_offset.y) + y - 1
        if i >= len(self.slots):
            return Strip.blank(width, self.rich_style)
        style = None
        if i == self.cursor_row:
            style = Style(reverse=True, bold=True) if self.has_focus else Style(bgcolor="grey30")
        return self._line(self.row_cells(self.slots[i], self._now), style)

    # ------------------------------------------------------------------ keys and mouse
    def _visible(self) -> int:
        return max(self.size.height - 1, 1)

    def action_move(self, delta: int) -> None:
        if not self.slots:
            return
        self.cursor_row = min(max(self.cursor_row + delta, 0), len(self.slots) - 1)
        top = int(self.scroll_offset.y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + self._visible():
            self.scroll_to(y=self.cursor_row - self._visible() + 1, animate=False)
        self.refresh()

    def action_page(self, direction: int) -> None:
        self.action_move(direction * self._visible())

    def action_choose(self) -> None:
        slot = self.selected()
        if slot is not None:
            self.post_message(self.Chosen(self, slot))

    def on_click(self, event: Click) -> None:
        at = event.get_content_offset(self)
        if at is None:
            return
        if at.y == 0:
            x = -int(self.scroll_offset.x)
            for (key, _label, _w), width in zip(self.COLUMNS, self._widths, strict=False):
                if at.x < x + width + 1:
                    self.sort_by(key)
                    return
                x += width + 1
            return
        i = int(self.scroll_offset.y) + at.y - 1
        if 0 <= i < len(self.slots):
            self.cursor_row = i
            self.refresh()
            if event.chain >= 2:
                self.action_choose()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()


class BatchTable(SlotTable):
    """The running batch: who holds a slot, what it computes, how far it is."""

    COLUMNS = (("req", "request", 8), ("phase", "phase", 15), ("ctx", "context", 7), ("cls", "prio", 6))

    def row_cells(self, s: Slot, now: float) -> list[Text | str]:
        return [req_text(s), phase_text(s), f"{s.context_len:,}", class_text(s)]


class QueueTable(SlotTable):
    """The waiting queue in scheduling order; preempted requests and requests that jumped ahead
    (a re-prioritisation) stand out."""

    COLUMNS = (
        ("pos", "#", 4),
        ("req", "request", 8),
        ("wait", "waited", 7),
        ("pre", "pre", 3),
        ("cls", "prio", 6),
    )

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._ranks: dict[str, int] = {}
        self.jumped: set[str] = set()

    def show(self, slots: Sequence[Slot], now: float) -> None:
        # A request jumped ahead when it now precedes one that preceded it before.
        prev = self._ranks
        later_min = None
        jumped: set[str] = set()
        for s in reversed(slots):
            r = prev.get(s.req_id)
            if r is None:
                continue
            if later_min is not None and r > later_min:
                jumped.add(s.req_id)
            later_min = r if later_min is None else min(later_min, r)
        self.jumped = jumped
        self._ranks = {s.req_id: i for i, s in enumerate(slots)}
        super().show(slots, now)

    def row_cells(self, s: Slot, now: float) -> list[Text | str]:
        pos = self._ranks.get(s.req_id, 0) + 1
        mark = Text(f"↑{pos}", style="bold magenta") if s.req_id in self.jumped else Text(str(pos))
        return [
            mark,
            req_text(s),
            f"{max(0.0, now - s.arrival_s):,.1f}s",
            Text(str(s.num_preemptions), style=PREEMPTED)
            if s.num_preemptions
            else Text("mv", style="bold cyan")
            if s.moved
            else "0",
            class_text(s),
        ]


def bar(frac: float, width: int, style: str) -> Text:
    frac = min(max(frac, 0.0), 1.0)
    full = round(frac * width)
    t = Text("█" * full, style=style)
    t.append("░" * (width - full), style="grey37")
    return t


def verdict_style(value: float | None, slo: float | None) -> str:
    """Green within 80 % of the SLO, amber up to it, red past it (no SLO: neutral)."""
    if value is None or slo is None:
        return "bold"
    if value <= 0.8 * slo:
        return GOOD
    return AMBER if value <= slo else BAD


def group_kind_short(kind: str) -> str:
    """A KV cache group kind as the side panel has room for: ``full``, ``window 128`` (a
    sliding window of 128 tokens), ``chunk 8192`` (chunked local attention)."""
    for long, short in (("sliding_window", "window"), ("chunked_local", "chunk")):
        if kind.startswith(long + "("):
            return f"{short} {kind[len(long) + 1 : -1]}"
    return kind


class KvGauge(Static):
    """KV-cache usage of the shown replica, and its prefix-cache hit rate. A hybrid model's gauge
    has a line per KV cache group kind in place of the block count: the share of the one pool
    that kind's groups hold (the lines add up to the gauge)."""

    def show(self, rep: ReplicaState, name: str | None = None) -> None:
        usage = rep.kv_usage
        style = GOOD if usage < 0.8 else AMBER if usage < 0.95 else BAD
        t = Text(f"KV {name} " if name else "KV ", style="bold")
        t.append_text(bar(usage, 14 - (len(name) + 1 if name else 0), style))
        t.append(f" {usage:4.0%}\n", style=style)
        if rep.kv_groups and rep.kv_blocks_usable:
            for kind, blocks in rep.kv_groups:
                share = blocks / rep.kv_blocks_usable
                t.append(f"{group_kind_short(kind):<11}", style="dim")
                t.append_text(bar(share, 10, style))
                t.append(f" {share:4.0%}\n")
        else:
            t.append(f"{rep.kv_blocks_used:,}/{rep.kv_blocks_usable:,} blocks\n")
        hit = "off" if rep.prefix_hit_rate is None else f"{rep.prefix_hit_rate:.1%}"
        t.append(f"prefix hits {hit}")
        self.update(t)


def _tokens(n: int) -> str:
    """1,234 / 12.3k / 4.56M: a token count that fits the side panel."""
    if n < 10_000:
        return f"{n:,}"
    return f"{n / 1e3:,.1f}k" if n < 1_000_000 else f"{n / 1e6:,.2f}M"


class CpuTierGauge(Static):
    """The shown replica's CPU offload tier (``--kv-offloading-size``): chunks held of the tier,
    the CPU prefix-hit rate and the tokens loaded from it and stored to it (vLLM's connector
    metrics). A full tier is normal (LRU keeps it full), so the bar is not coloured as a warning."""

    def show(self, rep: ReplicaState) -> None:
        tier = rep.cpu_tier
        t = Text("CPU ", style="bold")
        if tier is None:
            t.append("no tier" if rep.alive else "down", style="dim")
            self.update(t)
            return
        t.append_text(bar(tier.usage, 10, "cyan"))
        t.append(f" {tier.usage:4.0%}", style="cyan")
        hit = "-" if tier.hit_rate is None else f"{tier.hit_rate:.1%}"
        t.append(f" hit {hit}\n")  # three lines, as the KV gauge: the side panel fits 80x24
        t.append(f"{tier.chunks_stored:,}/{tier.num_chunks:,} chunks\n")
        t.append(f"loaded {_tokens(tier.loaded_tokens)} stored {_tokens(tier.stored_tokens)} tok")
        self.update(t)


class LatencyGauges(Static):
    """Rolling p50/p99 TTFT and TPOT against the SLO."""

    def show(self, snap: RunSnapshot, slo: SLO | None) -> None:
        t = Text(f"{f'last {snap.window_s:g}s':<9}{'p50':>7}{'p99':>7}{'SLO':>6}\n", style="dim")
        for label, p50, p99, goal in (
            ("TTFT ms", snap.ttft_p50_ms, snap.ttft_p99_ms, slo.ttft_ms if slo else None),
            ("TPOT ms", snap.tpot_p50_ms, snap.tpot_p99_ms, slo.tpot_ms if slo else None),
        ):
            t.append(f"{label:<9}", style="bold")
            for v in (p50, p99):
                t.append(f"{'-' if v is None else f'{v:,.0f}':>7}", style=verdict_style(v, goal))
            t.append(f"{'-' if goal is None else f'{goal:g}':>6}\n", style="dim")
        t.rstrip()
        self.update(t)


class Throughput(Static):
    """Tokens per second now (the sparkline below shows their history)."""

    def show(self, snap: RunSnapshot) -> None:
        t = Text("tok/s ", style="bold")
        t.append(f"{snap.total_tokens_per_s:,.0f}")
        t.append(f"  out {snap.output_tokens_per_s:,.0f}", style="dim")
        self.update(t)


class ThroughputSpark(Sparkline):
    pass


class SpecTile(Static):
    """Speculative decoding: tokens per verifying step (1 + accepted drafts) since the last
    sample, and over the run so far; the sparkline below shows the recent history."""

    def show(self, k: int, recent: float | None, overall: float | None) -> None:
        t = Text("spec ", style="bold")
        t.append(f"k={k} ")
        t.append("tok/step ")
        t.append("-" if recent is None else f"{recent:.2f}", style="bold")
        t.append(f" (run {'-' if overall is None else f'{overall:.2f}'})", style="dim")
        self.update(t)


class SpecSpark(Sparkline):
    """Accepted tokens per step over time (tokens per verifying step, 1 = nothing accepted)."""


class ReplicaStrip(Static):
    """One line per cluster: each replica's state, the one shown in the panels marked."""

    def show(self, replicas: Sequence[ReplicaState], selected: int) -> None:
        t = Text()
        for k, r in enumerate(replicas):
            mark = "▸" if k == selected else " "
            if not r.alive:
                t.append(f"{mark}{r.name} DOWN ", style=BAD if k != selected else "bold red reverse")
                continue
            style = "bold reverse" if k == selected else ""
            t.append(f"{mark}{r.name} {len(r.running)}/{r.max_num_seqs} kv {r.kv_usage:.0%}", style=style)
            t.append(" ")
        self.update(t)


class PoolStrip(Static):
    """A disaggregated cluster's pools, one line each: every replica's slots in use and KV usage
    (a decode replica's requests waiting for their KV too), ``DOWN`` when lost; the one shown in
    the panels marked. Lines too long for the terminal go short (``d0 17 21% w9``: running, KV,
    waiting for KV), then are cut: never wrapped onto the other pool's line."""

    _shown: tuple[Sequence[ReplicaState], int, int] | None = None

    def show(self, replicas: Sequence[ReplicaState], selected: int, parked: int = 0) -> None:
        self._shown = (replicas, selected, parked)
        t = self._strip(replicas, selected, parked, compact=False)
        width = self.size.width
        if width and any(len(line) > width for line in t.plain.splitlines()):
            t = self._strip(replicas, selected, parked, compact=True)
        self.update(t)

    def on_resize(self) -> None:
        """Fitted again to the new width: a strip first drawn before the layout had a width (or
        a paused run, which draws nothing more) would otherwise keep its long form and be cut."""
        if self._shown is not None:
            self.show(*self._shown)

    @staticmethod
    def _strip(replicas: Sequence[ReplicaState], selected: int, parked: int, *, compact: bool) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        for pool in ("prefill", "decode"):
            t.append(f"{pool:<8}", style="bold")
            for k, r in enumerate(replicas):
                if r.role != pool:
                    continue
                mark = "▸" if k == selected else " "
                if not r.alive:
                    t.append(f"{mark}{r.name} DOWN ", style=BAD if k != selected else "bold red reverse")
                    continue
                style = "bold reverse" if k == selected else ""
                slots = f"{len(r.running)}" if compact else f"{len(r.running)}/{r.max_num_seqs} kv"
                t.append(f"{mark}{r.name} {slots} {r.kv_usage:.0%}", style=style)
                if r.kv_wait:
                    t.append(f" w{r.kv_wait}" if compact else f" wait-KV {r.kv_wait}", style="cyan")
                t.append(" ")
            if pool == "prefill":
                t.append("\n")
        if parked:  # decode legs with no decode replica up to take them
            t.append(f"{parked:,} parked", style=BAD)
        return t


def _ms(v: float) -> str:
    return f"{v:,.1f}" if v < 10_000 else f"{v:,.0f}"


class LegsTile(Static):
    """A disaggregated run: each leg's mean and p99 over the requests finished so far (prefill
    queue, prefill, decode queue, transfer, decode: the five add up to a request's E2E), then
    the KV transfers: GB landed, on the wire and queued for a link, requests waiting for their
    KV, the links' queueing p99."""

    def show(self, snap: RunSnapshot) -> None:
        pd = snap.pd
        t = Text()
        if pd is None:
            self.update(t)
            return
        t.append(f"{f'{pd.num_disaggregated:,} done':<14}{'mean':>8}{'p99':>8}\n", style="dim")
        figures = {x.leg: x for x in pd.legs}
        for leg in LEGS:
            x = figures.get(leg)
            t.append(f"{leg.replace('_', ' '):<14}", style="bold")
            t.append(f"{'-' if x is None else _ms(x.mean_ms):>8}{'-' if x is None else _ms(x.p99_ms):>8}\n")
        t.append(f"KV {pd.kv_moved_gb:,.2f} GB", style="bold")
        t.append(f" · wire {pd.transfers_in_flight} · queue {pd.transfers_queued}")
        self.border_subtitle = f"{pd.transfers_cut:,} cut off by a loss" if pd.transfers_cut else ""
        wait = "-" if pd.link_wait_p99_ms is None else _ms(pd.link_wait_p99_ms)
        t.append(f"\nwait-KV {pd.waiting_for_kv}", style="cyan" if pd.waiting_for_kv else "")
        t.append(f" · queue p99 {wait}")
        self.update(t)


def describe_event(e: Event) -> tuple[str, str] | None:
    """An event as one log line and its style (None: not for the log)."""
    if isinstance(e, RequestPreempted):
        return f"{e.req_id} preempted #{e.num_preemptions}, -{e.lost_tokens:,} tok", "yellow"
    if isinstance(e, RequestStarved):
        return f"{e.req_id} STARVED after {e.num_preemptions} preemptions", STARVED
    if isinstance(e, RequestRejected):
        return f"{e.req_id} rejected: {e.reason.replace('_', ' ')}", "magenta"
    if isinstance(e, ReplicaWarning):
        return f"{e.replica} failure announced: no new requests", "bold yellow"
    if isinstance(e, ReplicaDown):
        return f"{e.replica} LOST, {e.num_interrupted} requests taken off", "bold red"
    if isinstance(e, ReplicaUp):
        return f"{e.replica} back (empty, cold cache)", "bold green"
    if isinstance(e, RecoveryDecision):
        cost = f"{e.tokens_moved:,} tok in {e.delay_s * 1e3:,.0f} ms, " if e.tokens_moved else ""
        move = f"{e.req_id} {e.strategy} {e.from_replica}->{e.to_replica}"
        return f"{move}: {cost}{e.recompute_tokens:,} to recompute", "cyan"
    if isinstance(e, LegRecovered):
        return f"{e.req_id} {e.action} ({e.lost_replica} lost) -> {e.target or 'parked'}", "cyan"
    return None


class EventLog(RichLog):
    """Preemptions, STARVED flags, rejections, node losses and each recovery decision."""

    PER_KIND = 12  # per refresh: more than this of one kind is summarised in one line

    def __init__(self, **kwargs: object) -> None:
        super().__init__(max_lines=400, wrap=True, markup=False, min_width=20, **kwargs)  # type: ignore[arg-type]
        self.lines_written: list[str] = []

    def add(self, events: Sequence[Event], replicated: bool) -> None:
        counts: dict[type, int] = {}
        skipped: dict[str, int] = {}
        for e in events:
            kind = type(e)
            counts[kind] = counts.get(kind, 0) + 1
            if counts[kind] > self.PER_KIND and kind in (RequestPreempted, RequestRejected):
                name = "preemptions" if kind is RequestPreempted else "rejections"
                skipped[name] = skipped.get(name, 0) + 1
                continue
            told = describe_event(e)
            if told is None:
                continue
            text, style = told
            where = (
                getattr(e, "replica", None)
                if replicated and not isinstance(e, RecoveryDecision | LegRecovered)
                else None
            )
            prefix = f"{where} " if where and not text.startswith(where) else ""
            self.note(f"{e.time_s:7.2f}s {prefix}{text}", style)  # type: ignore[union-attr]
        for name, k in skipped.items():
            self.note(f"        … and {k:,} more {name}", "yellow")

    def note(self, line: str, style: str = "") -> None:
        self.lines_written.append(line)
        del self.lines_written[:-400]
        self.write(Text(line, style=style))
