"""The view of a tuning study's recommendation: the headline and verdict, the predicted
percentiles with the step-time model's error bars, the settings, the comparison with the
baseline, each change alone, the capacity search, the ablations and the deployable answer; and
the verdict sentence a report opens with (``lead_sentence``). The list of changes is said once
(``change_list``): the CLI's verdict, the web's card, the report's first page and the PDF name
the same settings."""

from __future__ import annotations

from typing import Any

from servesim.tuning.recommend import SchedulerRecommendation
from servesim.views.deploy import changes_table, deploy_lines, tolerance_text, value_text
from servesim.views.glossary import define
from servesim.views.model import Column, Kpi, Section, Table, Verdict
from servesim.views.reasons import METRIC_NAMES, ms_text, ms_unit, rate_text, reason_text
from servesim.views.selection import chosen_line, rule_line, selection_lines, selection_view

#: The load state a failing SLO gets instead of "stable" (``views.saturation.state_words``).
OVER_SLO = "over the SLO"


def baseline_table(rec: SchedulerRecommendation) -> Table:
    """The recommendation against the baseline (and the best candidate that did not beat it)."""
    cols = [
        Column(key="what", label="", kind="str"),
        Column(key="gpus", label="GPUs", kind="int"),
        Column(key="ttft_p99_ms", label="TTFT p99", unit="ms", help=define("ttft_ms")),
        Column(key="tpot_p99_ms", label="TPOT p99", unit="ms", help=define("tpot_ms")),
        Column(key="e2e_p99_ms", label="E2E p99", unit="ms", help=define("e2e_ms")),
        Column(key="good_fraction", label="good", kind="float", decimals=3),
        Column(key="meets_slo", label="SLO", kind="bool"),
    ]
    rows: list[list[Any]] = []
    for label, s in (
        (baseline_name(rec), rec.baseline),
        ("best candidate (not adopted)", rec.best_alternative),
    ):
        if s is not None:
            rows.append(
                [label, s.gpus, s.ttft_p99_ms, s.tpot_p99_ms, s.e2e_p99_ms, s.good_fraction, s.meets_slo]
            )
    if rec.verdict != "keep" and rows:
        rows.append(
            [
                "recommended",
                rec.gpus,
                rec.predicted_ttft_ms.p99.max,
                rec.predicted_tpot_ms.p99.max,
                rec.predicted_e2e_ms.p99.max,
                rec.predicted_good_fraction.mean,
                rec.meets_slo,
            ]
        )
    return Table(
        key="baseline", title=f"against {baseline_name(rec)} (worst fresh seed)", columns=cols, rows=rows
    )


def capacity_table(rec: SchedulerRecommendation) -> Table:
    cols = [
        Column(key="replicas", label="replicas", kind="int"),
        Column(key="gpus", label="GPUs", kind="int"),
        Column(key="meets", label="meets SLO", kind="bool"),
        Column(key="saturated_runs", label="saturated seeds", kind="int"),
        Column(key="ttft_p99_ms", label="TTFT p99", unit="ms"),
        Column(key="e2e_p99_ms", label="E2E p99", unit="ms"),
    ]
    rows: list[list[Any]] = []
    if rec.capacity is not None:
        rows = [
            [t.replicas, t.gpus, t.meets, t.saturated_runs, t.ttft_p99_ms, t.e2e_p99_ms]
            for t in rec.capacity.tried
        ]
    return Table(key="capacity", title="capacity search (same flags, more replicas)", columns=cols, rows=rows)


def error_bars_table(rec: SchedulerRecommendation) -> Table:
    """Predicted p99s with the step-time model's measured error (sim2real leave-one-out)."""
    cols = [
        Column(key="metric", label="p99", kind="str"),
        Column(key="predicted", label="predicted", unit="ms"),
        Column(key="low_80", label="80 % low", unit="ms"),
        Column(key="high_80", label="80 % high", unit="ms"),
        Column(key="cap", label="cap", unit="ms"),
        Column(key="probability", label="P(within cap)", kind="float", decimals=2),
        Column(key="max_for_90", label="predicted max for 90 %", unit="ms"),
    ]
    rows: list[list[Any]] = []
    if rec.error_bars is not None:
        rows = [
            [
                METRIC_NAMES.get(m.metric, m.metric),
                m.predicted,
                m.low_80,
                m.high_80,
                m.cap,
                m.probability_within_cap,
                m.max_predicted_for_90,
            ]
            for m in rec.error_bars.metrics
        ]
    notes = (
        [
            # a document written before ``basis`` existed: calibrated, on the H100 runs
            (
                rec.error_bars.basis
                or f"model error measured out of sample on {rec.error_bars.runs} H100 vLLM runs"
            )
            + "; predicted = worst fresh seed",
            *rec.error_bars.notes,
        ]
        if rec.error_bars is not None
        else []
    )
    return Table(
        key="error_bars", title="error bars (step-time model error)", columns=cols, rows=rows, notes=notes
    )


def error_bars_text(rec: SchedulerRecommendation) -> str | None:
    """One sentence: how likely the SLO holds once the model's own error is counted."""
    eb = rec.error_bars
    if eb is None or eb.probability_slo_holds is None:
        return None
    tight = [m for m in eb.metrics if m.cap is not None and m.max_predicted_for_90 is not None]
    need = "; ".join(
        f"{METRIC_NAMES.get(m.metric, m.metric)} must be predicted at most "
        f"{ms_unit(m.max_predicted_for_90 or 0)} (is {ms_unit(m.predicted)})"
        for m in tight
        if m.predicted > (m.max_predicted_for_90 or 0)
    )
    where = "" if eb.calibrated else " (uncalibrated timing: measured on GPUs without a calibrated profile)"
    text = (
        f"counting the step-time model's measured error{where}, the SLO holds with probability "
        f"{eb.probability_slo_holds:.0%}"
    )
    if eb.within_model_error:
        text += f": it is met only inside the model's error; for 90 %, {need}"
    elif need:
        text += f"; for 90 %, {need}"
    return text


def headline_text(rec: SchedulerRecommendation) -> str:
    """Size, load state and SLO verdict on the fresh seeds: never "stable" where the SLO fails."""
    from servesim.views.saturation import state_words

    verdict = {None: "no SLO given", True: "meets the SLO", False: "does NOT meet the SLO"}[rec.meets_slo]
    state = state_words(rec.status, rec.meets_slo)
    shown = "" if state == OVER_SLO else f"{state}; "
    return (
        f"{rec.replicas} replica(s) x {rec.deployment.parallelism} = {rec.gpus} GPU(s); "
        f"{shown}{verdict} on {len(rec.verification)} fresh seeds (requires human review)"
    )


def predicted_table(rec: SchedulerRecommendation) -> Table:
    """p50/p90/p99 of TTFT, TPOT and E2E at the target rate, mean [min-max] over fresh seeds."""
    cols = [Column(key="metric", label="metric", kind="str")] + [
        Column(key=k, label=k, unit="ms", kind="str") for k in ("p50", "p90", "p99")
    ]
    rows: list[list[Any]] = []
    for name, ls in (
        ("TTFT", rec.predicted_ttft_ms),
        ("TPOT", rec.predicted_tpot_ms),
        ("E2E", rec.predicted_e2e_ms),
    ):
        rows.append(
            [
                name,
                *(f"{ms_text(s.mean)} [{ms_text(s.min)}-{ms_text(s.max)}]" for s in (ls.p50, ls.p90, ls.p99)),
            ]
        )
    return Table(
        key="predicted",
        title=f"predicted at {rec.target_rate_rps:,.3g} req/s (mean [min-max] over fresh seeds)",
        columns=cols,
        rows=rows,
    )


def flags_table(rec: SchedulerRecommendation) -> Table:
    return Table(
        key="flags",
        title="recommended settings",
        columns=[
            Column(key="flag", label="flag", kind="str"),
            Column(key="value", label="value", kind="str"),
        ],
        rows=[
            [f"--{k.replace('_', '-')}", str(v)] for k, v in rec.deployment.vllm_args(rec.model, strict=False)
        ],
    )


def ablations_table(rec: SchedulerRecommendation) -> Table:
    return Table(
        key="ablations",
        title="one change at a time (fresh seed)",
        columns=[
            Column(key="change", label="change", kind="str"),
            Column(key="ttft_p99_ms", label="TTFT p99", unit="ms"),
            Column(key="tpot_p99_ms", label="TPOT p99", unit="ms"),
            Column(key="status", label="status", kind="str"),
            Column(key="slo_ok", label="SLO", kind="bool"),
        ],
        rows=[
            [a.change, a.ttft_p99_ms, a.tpot_p99_ms, a.status or (a.reason or "invalid"), a.slo_ok]
            for a in rec.ablations
        ],
    )


def recommendation_kpis(rec: SchedulerRecommendation) -> list[Kpi]:
    """GPUs, throughput, the unstable rate and the headroom to the SLO knee and to instability."""
    return [
        Kpi(key="gpus", label="GPUs", value=float(rec.gpus), unit=None, decimals=0),
        Kpi(
            key="throughput_rps",
            label="throughput",
            value=rec.predicted_throughput_rps.mean,
            unit="req/s",
            decimals=2,
            help=define("request_throughput"),
        ),
        Kpi(
            key="saturation_rps",
            label="saturation",
            value=rec.saturation_rps,
            unit="req/s",
            decimals=3,
            help=define("saturation_rps"),
        ),
        Kpi(
            key="knee_headroom",
            label="headroom to SLO knee",
            value=rec.knee_headroom,
            unit="%",
            decimals=0,
            help="goodput knee (highest rate where the SLO holds) / target rate - 1",
        ),
        Kpi(
            key="headroom",
            label="headroom to unstable",
            value=rec.headroom,
            unit="%",
            decimals=0,
            help="rate where the queue grows without bound / target rate - 1",
        ),
    ]


def recommendation_verdicts(rec: SchedulerRecommendation) -> list[Verdict]:
    """The headline, the verdict (with the one list of changes), the model error, the notes."""
    status = "info" if rec.meets_slo is None else ("pass" if rec.meets_slo else "fail")
    out = [
        Verdict(key="recommendation", label="recommendation", status=status, text=headline_text(rec)),
        Verdict(
            key="verdict",
            label="verdict",
            status="warn" if rec.verdict == "add_capacity" else "info",
            text=verdict_text(rec),
        ),
    ]
    if rec.selection is not None:  # how the fewest-changes rule chose it, right after the verdict
        out.append(
            Verdict(key="selection", label="fewest changes", status="info", text=chosen_line(rec.selection))
        )
    eb_text = error_bars_text(rec)
    if eb_text:
        warn = rec.error_bars is not None and rec.error_bars.within_model_error
        out.append(
            Verdict(key="error_bars", label="model error", status="warn" if warn else "info", text=eb_text)
        )
    return out + [Verdict(key="warning", label="note", status="warn", text=w) for w in rec.warnings]


def recommendation_view(rec: SchedulerRecommendation) -> Section:
    """The recommendation card: verdict, predicted percentiles, reasons, the vllm serve command
    (a table with no row, e.g. the capacity search of a run that needed none, is left out)."""
    tables = [
        predicted_table(rec),
        error_bars_table(rec),
        flags_table(rec),
        baseline_table(rec),
        *([changes_table(rec)] if rec.changes else []),
        capacity_table(rec),
        ablations_table(rec),
        *_selection_tables(rec),
    ]
    return Section(
        key="recommendation",
        title="recommendation",
        kpis=recommendation_kpis(rec),
        tables=[t for t in tables if t.rows],
        verdicts=recommendation_verdicts(rec),
        text=[
            *(reason_text(r) for r in rec.reasons),
            *([rule_line(rec.selection)] if rec.selection is not None else []),
            *(deploy_lines(rec.deploy) if rec.deploy is not None else [rec.vllm_serve_command]),
        ],
    )


def _selection_tables(rec: SchedulerRecommendation) -> list[Table]:
    """The candidates the fewest-changes rule weighed (none without the rule)."""
    view = selection_view(rec)
    return [] if view is None else list(view.tables)


_VERDICT = {
    "change": "change to these settings",
    "keep": "keep what you have: nothing tried beat your configuration at the target load",
    "add_capacity": "add capacity: no scheduler setting meets the SLO on the GPUs searched",
}


def baseline_name(rec: SchedulerRecommendation) -> str:
    """Whose configuration the recommendation was compared with."""
    if rec.source.get("baseline_origin") == "vllm defaults":
        return "vLLM defaults (baseline)"
    return "your configuration"


def change_list(rec: SchedulerRecommendation) -> list[str]:
    """The recommendation's changes from the baseline, one item per setting (replicas and the
    gateway timeout count as settings): ``--max-num-seqs 1024 -> 128``. The one list the CLI,
    the web, the report and the PDF say (``rec.changes``, each also measured alone)."""
    return [f"{c.flag} {value_text(c.baseline_value)} -> {value_text(c.value)}" for c in rec.changes]


def changes_text(rec: SchedulerRecommendation) -> str | None:
    """``3 changes from vLLM defaults (baseline): a, b, c`` (None: it changes nothing)."""
    items = change_list(rec)
    if not items:
        return None
    n = len(items)
    return f"{n} change{'s' if n > 1 else ''} from {baseline_name(rec)}: {', '.join(items)}"


def verdict_text(rec: SchedulerRecommendation) -> str:
    """The verdict with the margin a change had to beat, and the changes it makes."""
    text = _VERDICT[rec.verdict]
    if rec.verdict == "keep" and rec.source.get("baseline_origin") == "vllm defaults":
        text = "keep vllm serve's defaults: nothing tried beat them at the target load"
    if rec.verdict == "keep":
        return text + f" by more than the step-time model's measured error ({tolerance_text(rec.tolerance)})"
    changes = changes_text(rec)
    return f"{text}; {changes}" if changes else text


def lead_clauses(rec: SchedulerRecommendation) -> list[str]:
    """The verdict sentence's parts, in reading order: what to change (the same list as
    ``verdict_text``) or keep, the size, the headroom to the SLO knee, the probability the SLO
    holds. New recommendation fields (cost, per-flag effects) add a clause here."""
    base = baseline_name(rec)
    changes = changes_text(rec)
    if rec.verdict == "keep":
        kept = "vLLM's defaults" if base.startswith("vLLM") else "your current settings"
        what = f"Keep {kept}: nothing tried beat them"
    elif rec.verdict == "add_capacity":
        what = "Add capacity: no scheduler setting meets the SLO on the GPUs searched"
        what += f"; {changes}" if changes else ""
    elif changes:
        what = "Make " + changes
    else:
        what = "Run the settings below"
    slo = {None: "", True: " meets the SLO", False: " does NOT meet the SLO"}[rec.meets_slo]
    out = [
        what,
        f"{rec.replicas} replica(s) x {rec.deployment.parallelism} ({rec.gpus} GPU(s)){slo} "
        f"at {rate_text(rec.target_rate_rps)}",
    ]
    if rec.goodput_knee_rps is not None and rec.knee_headroom is not None:
        out.append(f"headroom to the SLO knee {rec.knee_headroom:+.0%} ({rate_text(rec.goodput_knee_rps)})")
    elif rec.slo is not None and rec.goodput_knee_rps is None:
        out.append("the SLO knee was not found")
    if rec.error_bars is not None and rec.error_bars.probability_slo_holds is not None:
        out.append(
            f"the SLO holds with probability {rec.error_bars.probability_slo_holds:.0%} "
            "counting the step-time model's measured error"
        )
    return out


def lead_sentence(rec: SchedulerRecommendation) -> str:
    """The one sentence a report opens with."""
    first, *rest = lead_clauses(rec)
    return f"{first}. " + "; ".join(rest) + "."


def recommendation_lines(rec: SchedulerRecommendation) -> list[str]:
    """The verdict, then one sentence per reason, in the recommendation's order."""
    return [verdict_text(rec), *selection_lines(rec), *(reason_text(r) for r in rec.reasons)]


__all__ = [
    "baseline_name",
    "baseline_table",
    "capacity_table",
    "change_list",
    "changes_text",
    "error_bars_table",
    "error_bars_text",
    "headline_text",
    "lead_clauses",
    "lead_sentence",
    "recommendation_lines",
    "recommendation_view",
    "verdict_text",
]
