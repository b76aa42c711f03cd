"""Modal screens: help, a request's detail, choosing a replica to fail, a new max_num_seqs."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from servesim import RequestTimeline

HELP = """\
[b]servesim dashboard[/b]: a simulated vLLM replica (or cluster) running a trace.

[b]Keys[/b]
  space     pause / resume
  s         exactly one engine step (and pause)
  + / -     faster / slower (double / halve the speed)
  f         fail a replica (cluster): watch the planner route its jobs
  [ / ]     previous / next replica in the panels
  c         toggle chunked prefill, restart at the same simulated time
  m         change max_num_seqs, restart at the same simulated time
  enter     the selected request's timeline (or double-click a row)
  ↑ ↓ PgUp PgDn Home End   move in a table; click a header to sort
  tab       next panel
  z / esc   maximise the focused panel / restore it
  p         save a screenshot (SVG) in the current folder
  ?         this help (esc closes)
  q         quit

[b]Batch[/b]: the requests holding a slot. prefill k/n = chunk k of n at
  the per-step token cap (re: recompute after a preemption), cyan;
  decode done/total, green; ×N preempted N times (yellow); STARVED
  (red): preempted starvation_threshold times.
[b]Waiting[/b]: the queue in scheduling order. ↑ jumped ahead (a
  re-prioritisation); pre: preemptions; mv: moved from a lost replica;
  r7 KV: its KV is being pulled from a prefill replica (listed first).
[b]KV / latency[/b]: KV blocks in use, prefix-cache hit rate; rolling
  p50/p99 TTFT and TPOT of the last window against the SLO: green
  within 80 % of it, amber up to it, red past it; tokens per second.
[b]Events[/b]: preemptions, STARVED, rejections, node losses, each
  recovery decision and the rescheduler's re-admission order.

[b]Prefill/decode pools[/b] (--prefill-replicas/--decode-replicas): a line
  per pool; wait-KV N: decode legs holding their blocks while their KV is
  pulled (WAITING_FOR_REMOTE_KVS). [b]legs[/b]: mean/p99 ms of prefill queue,
  prefill, decode queue, transfer, decode over the requests finished so
  far; KV landed, transfers on the wire and queued for a link, the link
  queueing p99. f fails a replica of either pool (the run replays to now
  with it); c and m restart both pools with the flag.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(HELP)

    def action_dismiss(self, result: None = None) -> None:  # type: ignore[override]
        self.dismiss(None)


class DetailScreen(ModalScreen[None]):
    """One request's story: its figures now and what happened to it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,enter,q", "dismiss", "Close")]

    def __init__(self, timeline: RequestTimeline) -> None:
        super().__init__()
        self.timeline = timeline

    def compose(self) -> ComposeResult:
        tl = self.timeline
        t = Text(f"{tl.req_id}", style="bold")
        t.append(f"  {tl.state}" + (f" on {tl.replica}" if tl.replica else "") + "\n")
        t.append(f"prompt {tl.prompt_len:,} tokens, up to {tl.max_tokens:,} out, priority {tl.priority}")
        t.append(f", tenant {tl.tenant}\n" if tl.tenant else "\n")
        s = tl.slot
        if s is not None:
            t.append(
                f"now: {s.phase}, {s.computed_tokens:,} tokens computed, {s.num_output:,} generated, "
                f"{s.num_preemptions} preemptions\n"
            )
        t.append("\n")
        for when, what in tl.events:
            t.append(f"{when:10.3f}s  {what}\n")
        with VerticalScroll(id="detail"):
            yield Static(t)
            yield Label("esc closes", classes="hint")

    def action_dismiss(self, result: None = None) -> None:  # type: ignore[override]
        self.dismiss(None)


class FailScreen(ModalScreen[tuple[str, float | None] | None]):
    """Pick the replica to fail: it goes down now, for good or for a while."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]
    BACK_AFTER_S = 30.0

    def __init__(self, names: list[str]) -> None:
        super().__init__()
        self.names = names

    def compose(self) -> ComposeResult:
        options = []
        for name in self.names:
            options.append(Option(f"{name}: lose it now", id=f"{name}|"))
            options.append(Option(f"{name}: lose it now, back in {self.BACK_AFTER_S:g} s", id=f"{name}|back"))
        with Vertical(id="fail"):
            yield Label("Fail which replica? (enter picks, esc cancels)")
            yield OptionList(*options)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        name, _, back = str(event.option.id).partition("|")
        self.dismiss((name, self.BACK_AFTER_S if back else None))

    def action_cancel(self) -> None:
        self.dismiss(None)


class SeqsScreen(ModalScreen[int | None]):
    """A new max_num_seqs (the run restarts with it)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: int) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="seqs"):
            yield Label(f"max_num_seqs (now {self.current}); enter restarts, esc cancels")
            yield Input(str(self.current), type="integer", id="seqs-input")
            yield Label("", id="seqs-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        try:
            value = int(event.value)
        except ValueError:
            value = 0
        if value < 1:
            self.query_one("#seqs-error", Label).update("give a whole number ≥ 1")
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)
