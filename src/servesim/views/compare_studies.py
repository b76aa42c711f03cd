"""Two (or more) sweeps or studies side by side: their throughput-latency curves overlaid with the
saturation points compared, or their best configurations and Pareto fronts (issue 30).

``runs`` is each result's legend name (its label and trace) with the typed result; the first is
the baseline the ratios are taken against ("B / A")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servesim.tuning.saturation import SaturationReport
from servesim.tuning.search import TrialRecord, TuneResult
from servesim.views.model import Cell, Column, Line, Mark, Section, Series, Table


def short(name: str) -> str:
    """A run's letter (``"A: title · trace"`` -> ``"A"``): what marks, ratios and sentences use."""
    return name.split(": ", 1)[0]


def _ratio(a: float | None, b: float | None) -> float | None:
    return b / a if a is not None and b is not None and a > 0 else None


def _compare_columns(names: Sequence[str], unit: str | None = None) -> list[Column]:
    cols = [Column(key="what", label="figure", kind="str")]
    for i, n in enumerate(names):
        cols.append(Column(key=f"run{i}", label=n, unit=unit, decimals=3))
        if i:
            cols.append(
                Column(
                    key=f"run{i}_ratio",
                    label=f"{short(n)} / {short(names[0])}",
                    decimals=3,
                    help="This run's figure over the baseline's (1 = unchanged).",
                )
            )
    return cols


def _row(what: str, values: Sequence[float | None]) -> list[Cell]:
    row: list[Cell] = [what, values[0]]
    for v in values[1:]:
        row += [v, _ratio(values[0], v)]
    return row


SATURATION_POINTS = (
    ("goodput_knee_rps", "SLO knee (highest rate meeting the SLO), req/s"),
    ("max_stable_rps", "highest rate the queue test passes, req/s"),
    ("saturation_rps", "unstable from, req/s"),
    ("target_rate_rps", "target rate, req/s"),
)


def sweep_compare_view(runs: Sequence[tuple[str, SaturationReport]]) -> Section:
    """Saturation sweeps compared: the knee, the stable and the unstable rate of each (with the
    ratio to the first), and their TTFT p99 and throughput against offered load overlaid."""
    names = [n for n, _ in runs]
    rows = [_row(label, [getattr(r, key) for _, r in runs]) for key, label in SATURATION_POINTS]
    notes = [
        f"{n}: no {what} in the swept range"
        for n, r in runs
        for what, v in (("SLO knee", r.goodput_knee_rps), ("unstable rate", r.saturation_rps))
        if v is None
    ]
    table = Table(
        key="saturation_points",
        title="saturation points",
        columns=_compare_columns(names),
        rows=rows,
        notes=notes,
    )
    marks: list[Mark] = []
    for n, r in runs:
        if r.goodput_knee_rps is not None:
            marks.append(Mark(x=r.goodput_knee_rps, label=f"{short(n)}: knee {r.goodput_knee_rps:,.3g}"))
        if r.saturation_rps is not None:
            marks.append(Mark(x=r.saturation_rps, label=f"{short(n)}: unstable {r.saturation_rps:,.3g}"))

    def curve(key: str, title: str, label: str, unit: str, pick: Any, log_y: bool) -> Series | None:
        usable = [(n, r) for n, r in runs if r.points]
        if len(usable) != len(runs):
            return None
        xs = [[p.offered_rps.mean for p in r.points] for _, r in runs]
        ys = [[float(pick(p)) for p in r.points] for _, r in runs]
        return Series(
            key=key,
            title=title,
            x_label="offered load",
            x_unit="req/s",
            y_label=label,
            y_unit=unit,
            x=xs[0],
            y=ys[0],
            name=names[0],
            lines=[Line(label=n, x=x, y=y) for n, x, y in zip(names[1:], xs[1:], ys[1:], strict=True)],
            marks=marks,
            log_y=log_y,
            kind="line",
        )

    series = [
        curve(
            "ttft_p99_sweeps",
            "TTFT p99 against offered load, sweep by sweep (worst seed)",
            "TTFT p99",
            "ms",
            lambda p: p.ttft_ms.p99.max,
            True,
        ),
        curve(
            "throughput_sweeps",
            "throughput against offered load, sweep by sweep",
            "throughput",
            "req/s",
            lambda p: p.throughput_rps.mean,
            False,
        ),
    ]
    text = []
    base = runs[0][1].saturation_rps
    for n, r in runs[1:]:
        ratio = _ratio(base, r.saturation_rps)
        if ratio is not None:
            text.append(f"{short(n)} saturates at {ratio:,.2f}x the rate of {short(names[0])}")
    return Section(
        key="sweep_compare",
        title=f"{len(runs)} saturation sweeps: " + "; ".join(names),
        tables=[table],
        series=[s for s in series if s is not None],
        text=text,
    )


def _front(rec: Sequence[TrialRecord]) -> tuple[list[float], list[float]]:
    pts = sorted(
        (r.outcome.ttft_p99_ms.max, r.outcome.goodput_per_gpu)
        for r in rec
        if r.outcome is not None
        and r.outcome.ttft_p99_ms is not None
        and r.outcome.goodput_per_gpu is not None
    )
    return [float(x) for x, _ in pts], [float(y) for _, y in pts]


def study_compare_view(runs: Sequence[tuple[str, TuneResult]]) -> Section:
    """Tuning studies compared: each best configuration (setting by setting), its goodput per GPU
    and TTFT p99 with the ratio to the first, and the feasible trials (goodput per GPU against
    TTFT p99, the Pareto front when the study has one) overlaid."""
    names = [n for n, _ in runs]
    best = [r.best for _, r in runs]
    keys = sorted({k for b in best if b is not None for k in b.params})
    cfg_rows: list[list[Cell]] = []
    for k in keys:
        vals = [None if b is None else b.params.get(k) for b in best]
        cfg_rows.append(
            [
                k,
                *("-" if v is None else str(v) for v in vals),
                "same" if len(set(map(str, vals))) == 1 else "differs",
            ]
        )
    cfg = Table(
        key="best_configs",
        title="best configuration of each study",
        columns=[
            Column(key="setting", label="setting", kind="str"),
            *(Column(key=f"run{i}", label=n, kind="str") for i, n in enumerate(names)),
            Column(key="differs", label="same?", kind="str"),
        ],
        rows=cfg_rows,
        notes=[f"{n}: no feasible trial" for n, b in zip(names, best, strict=True) if b is None],
    )

    def of(b: TrialRecord | None, f: str) -> float | None:
        o = None if b is None else b.outcome
        if o is None:
            return None
        v = getattr(o, f)
        return None if v is None else float(v.max if hasattr(v, "max") else v)

    figures = Table(
        key="best_figures",
        title="the best trial's figures",
        columns=_compare_columns(names),
        rows=[
            _row("goodput per GPU, req/s", [of(b, "goodput_per_gpu") for b in best]),
            _row("capacity per GPU, req/s", [of(b, "capacity_per_gpu") for b in best]),
            _row("TTFT p99 (worst seed), ms", [of(b, "ttft_p99_ms") for b in best]),
            _row("TPOT p99 (worst seed), ms", [of(b, "tpot_p99_ms") for b in best]),
            _row("GPUs", [of(b, "gpus") for b in best]),
            _row("trials", [float(r.n_trials) for _, r in runs]),
            _row("feasible trials", [float(r.n_feasible) for _, r in runs]),
        ],
    )
    fronts = [_front(r.pareto_front or [t for t in r.trials if t.feasible]) for _, r in runs]
    series: list[Series] = []
    if all(x for x, _ in fronts):
        pareto = all(r.pareto_front for _, r in runs)
        series.append(
            Series(
                key="fronts",
                title=("Pareto fronts" if pareto else "feasible trials")
                + ": goodput per GPU against TTFT p99, study by study",
                x_label="TTFT p99 (worst seed)",
                x_unit="ms",
                y_label="goodput per GPU",
                y_unit="req/s",
                x=fronts[0][0],
                y=fronts[0][1],
                name=names[0],
                lines=[Line(label=n, x=x, y=y) for n, (x, y) in zip(names[1:], fronts[1:], strict=True)],
                kind="line",
            )
        )
    return Section(
        key="study_compare",
        title=f"{len(runs)} tuning studies: " + "; ".join(names),
        tables=[cfg, figures],
        series=series,
        text=[] if series else ["a study has no feasible trial: no front to overlay"],
    )


__all__ = ["SATURATION_POINTS", "short", "study_compare_view", "sweep_compare_view"]
