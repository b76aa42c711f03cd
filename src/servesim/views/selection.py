"""How an answer was chosen, in words: the fewest-changes rule of a recommendation
(``tuning.selection``), the noise rule of the layout search (``tuning.layout_choice``), the
fewest GPUs that meet the SLO, and why no break-even bandwidth is given.

Every figure is the answer's; nothing is recomputed. ``selection_lines`` / ``selection_view`` word
``SchedulerRecommendation.selection``; ``layout_choice_lines`` / ``layout_choice_view`` word a
``LayoutAnswer``'s choice, fewest GPUs and break-even; ``break_even_line`` replaces a bare
"break-even bandwidth: -" with the reason; ``gap_text`` words one ``noise.GapVerdict``.
"""

from __future__ import annotations

from typing import Any

from servesim.tuning.layouts import LayoutAnswer
from servesim.tuning.noise import GapVerdict
from servesim.tuning.recommend import SchedulerRecommendation
from servesim.tuning.selection import Option, Selection
from servesim.views.model import Cell, Column, Section, Table, Verdict

_ORIGIN = {
    "baseline": "your configuration",
    "trial": "a trial of the search",
    "single": "one change alone",
    "pair": "two changes together",
}


def _value(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "on" if v else "off"
    return f"{v:g}" if isinstance(v, float) else str(v)


def rule_line(sel: Selection) -> str:
    """'rule: ...; band ±12.8 % (the model's error; the best's fresh-seed spread 0.4 %)'."""
    src = (
        f"the step-time model's error; the best's fresh-seed spread {sel.seed_spread:.1%}"
        if sel.band_from == "model error"
        else f"the best's fresh-seed spread; the step-time model's error {sel.model_error:.1%}"
    )
    return f"rule: {sel.rule}; band {sel.band:.1%} ({src})"


def chosen_line(sel: Selection) -> str:
    """What was chosen from how many, in one line."""
    o = sel.chosen_option()
    best = (
        "none" if sel.objective_best is None else f"{sel.objective_best:.3g} good req/s per GPU ({sel.best})"
    )
    skipped = f"; {sel.skipped} not run: too many GPUs to be within the band" if sel.skipped else ""
    head = f"{sel.considered} candidates considered ({sel.simulations} fresh-seed runs{skipped}); best {best}"
    if o is None:
        return f"{head}: none met the SLO on every fresh seed"
    if sel.keep:
        return f"{head}: your configuration is within the band, keep what you have"
    changes = ", ".join(f"{k} -> {_value(v)}" for k, v in o.changes.items())
    return (
        f"{head}: chosen {o.label!s} ({_ORIGIN[o.origin]}; {o.n_changes} change(s): {changes}; "
        f"{o.gpus} GPU(s); {(o.objective_mean or 0):.3g} good req/s per GPU)"
    )


def selection_lines(rec: SchedulerRecommendation) -> list[str]:
    """The rule and the choice (empty for a recommendation made without the rule)."""
    sel = rec.selection
    return [] if sel is None else [rule_line(sel), chosen_line(sel)]


def _row(o: Option) -> list[Cell]:
    status = "qualifies" if o.qualifies else ("refused" if not o.valid else _why_not(o))
    return [
        o.label,
        _ORIGIN[o.origin],
        o.n_changes,
        o.gpus,
        o.objective_mean,
        len(o.seeds),
        "yes" if o.meets_slo and o.complete else "no",
        status,
    ]


def _why_not(o: Option) -> str:
    if not o.meets_slo:
        return "misses the SLO" if o.seeds else "not run"
    if not o.complete:
        return "not run on every seed"
    return "outside the band"


def selection_view(rec: SchedulerRecommendation) -> Section | None:
    """The candidates table (qualifying first, in the rule's order) with the rule as a verdict."""
    sel = rec.selection
    if sel is None:
        return None
    cols = [
        Column(key="candidate", label="candidate", kind="str"),
        Column(key="origin", label="from", kind="str"),
        Column(key="changes", label="changes", kind="int"),
        Column(key="gpus", label="GPUs", kind="int"),
        Column(
            key="objective",
            label="goodput/GPU",
            unit="req/s",
            decimals=3,
            help="Target rate x good fraction / GPUs, mean over the fresh seeds it ran on.",
        ),
        Column(key="seeds", label="seeds", kind="int"),
        Column(key="meets", label="SLO on every seed", kind="str"),
        Column(key="status", label="status", kind="str"),
    ]
    notes = [f"{o.label}: {o.reason}" for o in sel.options if not o.valid and o.reason]
    table = Table(
        key="selection",
        title="candidates (the chosen one first)",
        columns=cols,
        rows=[_row(o) for o in sel.options],
        notes=notes,
    )
    return Section(
        key="selection",
        title="how the recommendation was chosen",
        tables=[table],
        verdicts=[Verdict(key="selection", label="fewest changes", status="info", text=chosen_line(sel))],
        text=[rule_line(sel)],
    )


# ------------------------------------------------------------------------------ layouts
def gap_text(v: GapVerdict, a: str, b: str) -> str:
    """'a is better by 7.0 %, beyond the noise (±2.1 %)' or 'a and b are equivalent: ...'."""
    if v.equivalent:
        return f"{a} and {b} are equivalent: the gap {v.gap:+.1%} is inside the noise (±{v.band:.1%})"
    win, lose = (a, b) if v.winner == "a" else (b, a)
    return f"{win} is better than {lose} by {abs(v.gap):.1%}, beyond the noise (±{v.band:.1%})"


def break_even_line(ans: LayoutAnswer) -> str | None:
    """The break-even line: the bandwidth, or why there is none (None: nothing to say)."""
    be = ans.break_even
    if be is not None and be.gbps is not None:
        return f"break-even bandwidth: {be.gbps:.3g} Gbit/s per TP rank"
    if ans.break_even_note is not None:
        return f"break-even bandwidth: none ({ans.break_even_note})"
    return None


def fewest_line(ans: LayoutAnswer) -> str | None:
    few = ans.fewest_gpus
    return None if few is None else f"fewest GPUs: {few.note}"


def layout_choice_lines(ans: LayoutAnswer, *, besides_reasons: bool = False) -> list[str]:
    """The rule, each comparison, the fewest GPUs and the break-even line (``besides_reasons``:
    only those the answer's reasons do not already say, for a view that shows both)."""
    out: list[str] = []
    ch = ans.choice
    if ch is not None:
        where = f"{len(ch.seeds)} fresh seeds" if ch.seeds else "the search trace alone"
        out.append(f"rule ({where}, model error ±{ch.floor:.1%}): {ch.rule}")
        if ch.lead != ch.recommended:
            out.append(f"the search trace's lead {ch.lead} is not recommended: {ch.recommended} is")
        out += [c.note for c in ch.comparisons]
    out += [x for x in (fewest_line(ans), break_even_line(ans)) if x is not None]
    if besides_reasons:
        said = set(ans.reasons)
        out = [x for x in out if x not in said and x.removeprefix("fewest GPUs: ") not in said]
    return out


def layout_choice_view(ans: LayoutAnswer) -> Section | None:
    """The contenders' fresh-seed figures and the comparisons (None: no choice recorded)."""
    ch = ans.choice
    if ch is None:
        return None
    rows: list[list[Cell]] = [
        [
            r.label,
            "search trace" if r.seed is None else str(r.seed),
            r.goodput_per_gpu,
            f"{r.good_requests}/{r.num_requests}",
            "yes" if r.meets_p99 else "no",
        ]
        for r in ch.runs
    ]
    table = Table(
        key="layout_choice",
        title="contenders on the same seeds",
        columns=[
            Column(key="layout", label="layout", kind="str"),
            Column(key="seed", label="seed", kind="str"),
            Column(key="goodput_per_gpu", label="goodput/GPU", unit="req/s", decimals=3),
            Column(key="good", label="good", kind="str"),
            Column(key="meets", label="p99 within the SLO", kind="str"),
        ],
        rows=rows,
    )
    return Section(
        key="layout_choice",
        title=f"how {ans.recommended} was chosen",
        tables=[table],
        text=layout_choice_lines(ans),
    )


__all__ = [
    "break_even_line",
    "chosen_line",
    "fewest_line",
    "gap_text",
    "layout_choice_lines",
    "layout_choice_view",
    "rule_line",
    "selection_lines",
    "selection_view",
]
