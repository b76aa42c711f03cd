"""Views of a tuning study (trials, the Pareto front, what infeasible trials broke) and of its
recommendation: the verdict, the baseline comparison, the capacity search, and every structured
``Reason`` worded as one English sentence (``reason_text``) -- the tuner measures, this module words
it, so the CLI, the web workbench, the TUI and the report say the same thing."""

from __future__ import annotations

from typing import Any

from servesim.tuning.reasons import Effect, Reason
from servesim.tuning.recommend import SchedulerRecommendation
from servesim.tuning.search import TrialRecord, TuneResult
from servesim.views.deploy import changes_table, deploy_lines, tolerance_text, value_text
from servesim.views.glossary import define
from servesim.views.model import Column, Kpi, Section, Series, Table, Verdict

PARAM_COLUMNS = (
    ("max_num_seqs", "seqs", "int"),
    ("max_num_batched_tokens", "tokens", "int"),
    ("enable_chunked_prefill", "chunk", "bool"),
    ("long_prefill_token_threshold", "thr", "int"),
    ("enable_prefix_caching", "prefix", "bool"),
    ("block_size", "block", "int"),
    ("gpu_memory_utilization", "mem", "float"),
    ("tensor_parallel_size", "TP", "int"),
    ("replicas", "replicas", "int"),
    ("queue_timeout_s", "timeout", "float"),
)
#: Speculative decoding's k (0 = off), shown when a study searched it.
SPEC_COLUMN = ("num_speculative_tokens", "spec k", "int")


def trials_table(res: TuneResult, numbers: list[int], key: str, title: str) -> Table:
    by_number = {r.number: r for r in res.trials}
    cols = [
        Column(key="trial", label="trial", kind="int"),
        Column(key="gpus", label="GPUs", kind="int"),
        Column(key="goodput_per_gpu", label="goodput/GPU", unit="req/s", decimals=3, help=define("goodput")),
        Column(key="ttft_p99_ms", label="TTFT p99", unit="ms", help=define("ttft_ms")),
        Column(key="tpot_p99_ms", label="TPOT p99", unit="ms", help=define("tpot_ms")),
    ]
    params: tuple[tuple[str, str, str], ...] = PARAM_COLUMNS
    outcomes = [by_number[n].outcome for n in numbers]
    if any(o is not None and o.params.get("num_speculative_tokens") for o in outcomes):
        params = (*PARAM_COLUMNS, SPEC_COLUMN)  # only a study that searched speculation shows k
    cols += [Column(key=k, label=label, kind=kind, decimals=2) for k, label, kind in params]
    rows: list[list[Any]] = []
    for n in numbers:
        o = by_number[n].outcome
        if o is None:
            continue
        p = o.params
        rows.append(
            [
                n,
                o.gpus,
                o.goodput_per_gpu,
                o.ttft_p99_ms.max if o.ttft_p99_ms else None,
                o.tpot_p99_ms.max if o.tpot_p99_ms else None,
                *(p.get(k, 0 if k == SPEC_COLUMN[0] else None) for k, _, _ in params),
            ]
        )
    return Table(key=key, title=title, columns=cols, rows=rows)


def scatter_trials(res: TuneResult) -> list[TrialRecord]:
    """The trials the scatter draws, in its point order (an interface maps a clicked point back)."""
    return [r for r in res.trials if r.outcome is not None and r.outcome.ttft_p99_ms is not None]


def trials_view(res: TuneResult, top: int = 8) -> Section:
    """The study: counts, why trials were pruned, the best trials, the Pareto front and a scatter."""
    text = [
        f"study {res.study_name} ({res.storage or 'in memory'}): {res.n_trials} trials, "
        f"{res.n_complete} complete, "
        f"{res.n_pruned} pruned as invalid, {res.n_feasible} feasible; objective {res.objective} at "
        f"{res.target_rate_rps:,.3g} req/s"
    ]
    text += [f"pruned {info.count}x [{rule}]: {info.example}" for rule, info in res.invalid_reasons.items()]
    text += res.budget_notes
    seeded = [f"{s.role} = trial {s.number}" for s in res.seeded if s.number is not None]
    if seeded:
        text.append("evaluated before sampling: " + ", ".join(seeded))
    text += [f"{s.role} not evaluated: {s.note}" for s in res.seeded if s.number is None and s.role != "grid"]
    if res.reused:
        text.append(f"{res.reused} trial(s) repeated an evaluated combination and were not simulated again")
    if res.nearest_miss is not None:
        m = res.nearest_miss
        text.append(
            f"no feasible trial: the nearest miss is trial {m.number} on {m.gpus} GPU(s), "
            + "; ".join(breach_text(b.constraint, b.measured, b.limit, b.excess) for b in m.breaches)
        )
    done = scatter_trials(res)
    scatter = Series(
        key="trials",
        title="trials: goodput per GPU against TTFT p99",
        x_label="TTFT p99",
        x_unit="ms",
        y_label="goodput per GPU",
        y_unit="req/s",
        x=[r.outcome.ttft_p99_ms.max for r in done if r.outcome and r.outcome.ttft_p99_ms],
        y=[r.outcome.goodput_per_gpu for r in done if r.outcome],
        kind="scatter",
    )
    front = [r.number for r in res.pareto_front]
    return Section(
        key="tuning",
        title="tuning study",
        tables=[
            trials_table(res, res.ranked[:top], "best_trials", "best feasible trials"),
            trials_table(res, front, "pareto_front", "Pareto front"),
            infeasibility_table(res),
        ],
        series=[scatter],
        text=text,
    )


def breach_text(constraint: str, measured: float, limit: float, excess: float) -> str:
    if constraint.endswith("_p99"):
        name = constraint.replace("_p99", "").upper() + " p99"
        return f"{name} {_ms(measured)} ms > {_ms(limit)} ms (+{excess:.0%})"
    if constraint == "good_fraction":
        return f"good fraction {measured:.1%} < {limit:.1%}"
    if constraint == "queue_saturated":
        return f"queue saturated on {measured:g} seed(s)"
    return f"{measured:.3f} preemptions per request > {limit:g} (KV thrashing)"


def infeasibility_table(res: TuneResult) -> Table:
    """Which constraint each trial broke and by how much (nearest to feasible first)."""
    names = res.constraint_names
    cols = [
        Column(key="trial", label="trial", kind="int"),
        Column(key="gpus", label="GPUs", kind="int"),
        Column(key="distance", label="worst excess", kind="pct", decimals=0),
        *(Column(key=n, label=f"{n} over", kind="pct", decimals=0) for n in names),
        *(Column(key=k, label=label, kind=kind, decimals=2) for k, label, kind in PARAM_COLUMNS),
    ]
    rows: list[list[Any]] = []
    for row in res.infeasible:
        over: dict[str, float] = {b.constraint: b.excess for b in row.breaches}
        rows.append(
            [
                row.number,
                row.gpus,
                row.distance,
                *(over.get(n) for n in names),
                *(row.params.get(k) for k, _, _ in PARAM_COLUMNS),
            ]
        )
    notes = ["excess: how far beyond the limit (p99 / cap - 1; share of seeds saturated)"] if rows else []
    return Table(
        key="infeasible",
        title="what each trial broke (no feasible trial)",
        columns=cols,
        rows=rows,
        notes=notes,
    )


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
                _METRIC.get(m.metric, m.metric),
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
            f"model error measured out of sample on {rec.error_bars.runs} H100 vLLM runs (docs/perf.md); "
            "predicted = worst fresh seed",
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
        f"{_METRIC.get(m.metric, m.metric)} must be predicted at most "
        f"{_ms_unit(m.max_predicted_for_90 or 0)} (is {_ms_unit(m.predicted)})"
        for m in tight
        if m.predicted > (m.max_predicted_for_90 or 0)
    )
    text = (
        f"counting the step-time model's measured error, the SLO holds with probability "
        f"{eb.probability_slo_holds:.0%}"
    )
    if eb.within_model_error:
        text += f": it is met only inside the model's error; for 90 %, {need}"
    elif need:
        text += f"; for 90 %, {need}"
    return text


def recommendation_view(rec: SchedulerRecommendation) -> Section:
    """The recommendation card: verdict, predicted percentiles, reasons, the vllm serve command."""
    verdict = {None: "no SLO given", True: "meets the SLO", False: "does NOT meet the SLO"}[rec.meets_slo]
    headline = (
        f"{rec.replicas} replica(s) x TP {rec.deployment.tensor_parallel_size} = {rec.gpus} GPU(s); "
        f"{rec.status}; "
        f"{verdict} on {len(rec.verification)} fresh seeds (requires human review)"
    )
    cols = [Column(key="metric", label="metric", kind="str")] + [
        Column(key=k, label=k, unit="ms", kind="str") for k in ("p50", "p90", "p99")
    ]
    rows: list[list[Any]] = []
    for name, ls in (
        ("TTFT", rec.predicted_ttft_ms),
        ("TPOT", rec.predicted_tpot_ms),
        ("E2E", rec.predicted_e2e_ms),
    ):
        rows.append([name, *(f"{_ms(s.mean)} [{_ms(s.min)}-{_ms(s.max)}]" for s in (ls.p50, ls.p90, ls.p99))])
    predicted = Table(
        key="predicted",
        title=f"predicted at {rec.target_rate_rps:,.3g} req/s (mean [min-max] over fresh seeds)",
        columns=cols,
        rows=rows,
    )
    flags = Table(
        key="flags",
        title="recommended settings",
        columns=[
            Column(key="flag", label="flag", kind="str"),
            Column(key="value", label="value", kind="str"),
        ],
        rows=[[f"--{k.replace('_', '-')}", str(v)] for k, v in rec.deployment.vllm_args()],
    )
    ablations = Table(
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
    kpis = [
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
    status = "info" if rec.meets_slo is None else ("pass" if rec.meets_slo else "fail")
    return Section(
        key="recommendation",
        title="recommendation",
        kpis=kpis,
        tables=[
            predicted,
            error_bars_table(rec),
            flags,
            baseline_table(rec),
            *([changes_table(rec)] if rec.changes else []),
            capacity_table(rec),
            ablations,
        ],
        verdicts=[
            Verdict(key="recommendation", label="recommendation", status=status, text=headline),
            Verdict(
                key="verdict",
                label="verdict",
                status="warn" if rec.verdict == "add_capacity" else "info",
                text=verdict_text(rec),
            ),
        ]
        + (
            [
                Verdict(
                    key="error_bars",
                    label="model error",
                    status="warn" if rec.error_bars and rec.error_bars.within_model_error else "info",
                    text=eb_text,
                )
            ]
            if (eb_text := error_bars_text(rec))
            else []
        )
        + [Verdict(key="warning", label="note", status="warn", text=w) for w in rec.warnings],
        text=[
            *(reason_text(r) for r in rec.reasons),
            *(deploy_lines(rec.deploy) if rec.deploy is not None else [rec.vllm_serve_command]),
        ],
    )


def _ms(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


_METRIC = {
    "ttft_p99_ms": "TTFT p99",
    "tpot_p99_ms": "TPOT p99",
    "e2e_p99_ms": "E2E p99",
    "good_fraction": "good fraction",
    "gpus": "GPUs",
}


def _ms_unit(x: float) -> str:
    return f"{_ms(x)} ms"


def _rate(x: float) -> str:
    return f"{x:,.3g} req/s"


def _value(metric: str, x: float) -> str:
    if metric.endswith("_ms"):
        return _ms_unit(x)
    if metric == "good_fraction":
        return f"{x:.1%}"
    if metric == "gpus":
        return f"{x:g}"
    return f"{x:,.3g}"


def effect_text(e: Effect) -> str:
    """'TTFT p99 rises from 120 ms to 180 ms' (from the recommendation to the alternative)."""
    name = _METRIC.get(e.metric, e.metric)
    if e.recommended is None or e.alternative is None:
        return f"{name} not measured"
    if e.verdict == "same":
        return f"{name} stays at about {_value(e.metric, e.recommended)}"
    word = "rises" if e.alternative > e.recommended else "falls"
    return f"{name} {word} from {_value(e.metric, e.recommended)} to {_value(e.metric, e.alternative)}"


def _effects(r: Reason, metrics: tuple[str, ...]) -> str:
    found = [effect_text(e) for m in metrics for e in r.effects if e.metric == m]
    return " and ".join(found)


def _verdict(r: Reason) -> str:
    parts = []
    if r.alternative_slo_ok is not None:
        parts.append("still within the SLO" if r.alternative_slo_ok else "missing the SLO")
    if r.alternative_status is not None and r.alternative_status != "STABLE":
        parts.append(r.alternative_status)
    return f" ({', '.join(parts)})" if parts else ""


def _onoff(v: Any) -> str:
    return "on" if v else "off"


def _ablation(r: Reason) -> str:
    f = r.facts
    k = r.knob
    if k == "enable_chunked_prefill" and r.value:
        prompts = (
            f"prompts of up to {f.get('prompt_max', 0):,} tokens (p99 {f.get('prompt_p99', 0):,.0f}, "
            f"median {f.get('prompt_p50', 0):,.0f})"
        )
        tpot = next((e for e in r.effects if e.metric == "tpot_p99_ms"), None)
        what = (
            "decodes no longer wait behind whole prompts"
            if tpot is not None and tpot.verdict == "worse"
            else "decodes are not held up by it at this load"
        )
        return (
            f"chunked prefill at {f.get('max_num_batched_tokens', 0):,} tokens per step splits {prompts}, so "
            f"{what}: without it {_effects(r, ('tpot_p99_ms', 'ttft_p99_ms'))}{_verdict(r)}"
        )
    if k == "enable_chunked_prefill":
        return (
            f"chunked prefill off: the {f.get('max_num_batched_tokens', 0):,}-token budget (>= max_model_len "
            f"{f.get('max_model_len', 0):,}) prefills every prompt in one step; with chunking on "
            f"{_effects(r, ('ttft_p99_ms', 'tpot_p99_ms'))}{_verdict(r)}"
        )
    if k == "long_prefill_token_threshold":
        return (
            f"long_prefill_token_threshold {r.value:,} caps one prompt's share of a step; without the cap "
            f"{_effects(r, ('ttft_p99_ms',))}{_verdict(r)}"
        )
    if k == "max_num_seqs":
        line = (
            f"max_num_seqs {r.value}: the batch held {f.get('mean_running', 0):,.1f} requests on average; at "
            f"{r.alternative} {_effects(r, ('ttft_p99_ms', 'e2e_p99_ms'))}{_verdict(r)}"
        )
        if f.get("ttft_p99_tolerance") is not None:
            line += (
                f" (the fewest sequences whose TTFT p99 is within {_f(f, 'ttft_p99_tolerance'):.0%} of the "
                f"default's, at most {_ms_unit(_f(f, 'ttft_p99_allowed_ms'))}: the step-time model's "
                f"measured TTFT p99 error; sweep {f.get('sweep')})"
            )
        return line
    if k == "max_num_batched_tokens":
        return (
            f"max_num_batched_tokens {r.value:,}: at half the budget "
            f"{_effects(r, ('ttft_p99_ms', 'tpot_p99_ms'))}{_verdict(r)}"
        )
    if k == "enable_prefix_caching":
        share = f.get("prefix_reuse_ratio") or 0.0
        return (
            f"{share:.0%} of prompt tokens repeat earlier prefixes; with prefix caching "
            f"{_onoff(r.alternative)} {_effects(r, ('ttft_p99_ms',))}{_verdict(r)}"
        )
    if k == "replicas":
        return f"with {r.alternative} replica(s) {_effects(r, ('ttft_p99_ms',))}{_verdict(r)}"
    return f"{k} {r.alternative}: {_effects(r, ('ttft_p99_ms', 'tpot_p99_ms', 'e2e_p99_ms'))}{_verdict(r)}"


def _comparison(r: Reason) -> str:
    f = r.facts
    changes = ", ".join(f"{c.knob} {c.alternative} -> {c.recommended}" for c in r.changes) or "no setting"
    if r.against == "baseline":
        head = f"against the baseline ({changes} changed)"
        ok = r.alternative_slo_ok
        state = "" if ok is None else (" which meets the SLO" if ok else " which misses the SLO")
        miss = f": {f['alternative_violations']}" if (ok is False and f.get("alternative_violations")) else ""
        return f"{head}{state}{miss}; with the recommendation " + "; ".join(
            _flip(e) for e in r.effects if e.metric != "gpus" or e.verdict != "same"
        )
    return (
        "keep what you have: the best candidate found ("
        + ", ".join(f"{c.knob} {c.recommended} -> {c.alternative}" for c in r.changes)
        + ") does not beat it at the target load: "
        + "; ".join(effect_text(e) for e in r.effects)
        + _verdict(r)
    )


def _flip(e: Effect) -> str:
    """An effect read from the alternative (the baseline) to the recommendation."""
    swapped = Effect.of(
        e.metric, e.alternative, e.recommended, higher_is_better=e.metric in ("good_fraction",)
    )
    return effect_text(swapped)


def _f(facts: dict[str, Any], key: str) -> float:
    v = facts.get(key)
    return float(v) if isinstance(v, int | float) else 0.0


def reason_text(r: Reason) -> str:
    """One reason as one sentence."""
    f = r.facts
    if r.kind == "prediction":
        line = (
            f"at {_rate(_f(f, 'rate_rps'))} on {f['replicas']} replica(s) x TP "
            f"{f['tensor_parallel_size']} = {f['gpus']} GPU(s): TTFT p99 {_ms_unit(_f(f, 'ttft_p99_ms'))}, "
            f"TPOT p99 {_ms_unit(_f(f, 'tpot_p99_ms'))}, E2E p99 {_ms_unit(_f(f, 'e2e_p99_ms'))} "
            f"(worst of {f['seeds']} fresh seeds)"
        )
        if f.get("slo"):
            bad = f.get("slo_violations")
            line += f"; misses the SLO: {bad}" if bad else f"; within the SLO {f['slo']}"
        return line
    if r.kind == "headroom":
        if f.get("saturation_rps") is not None and f.get("headroom") is not None:
            return (
                f"the queue stays stable up to {_rate(_f(f, 'max_stable_rps'))} and grows without "
                f"bound from {_rate(_f(f, 'saturation_rps'))}: {_f(f, 'headroom'):+.0%} "
                "headroom over the target"
            )
        top = _rate(_f(f, "highest_rate_tried_rps"))
        return f"the queue stayed stable at every rate tried, up to {top}"
    if r.kind == "slo_knee":
        return (
            f"the SLOs hold up to {_rate(float(f['knee_rps'] or 0))} "
            f"({float(f.get('knee_headroom') or 0):+.0%} over the target)"
        )
    if r.kind == "versus_baseline":
        return _comparison(r)
    if r.kind == "capacity":
        if not f.get("found"):
            return (
                f"no scheduler setting meets the SLO on {f['flags_gpus']} GPU(s), and neither do up to "
                f"{f['max_replicas']} replicas of these flags (tried {f['tried']})"
            )
        goal = str(f.get("criterion") or "meet the SLO")
        line = (
            f"the target load is beyond any scheduler setting on {f['flags_gpus']} GPU(s) "
            f"({r.alternative} replica(s)): capacity is what is missing; {r.value} replicas "
            f"({f['gpus']} GPUs) {goal} (replicas tried: {f['tried']})"
        )
        if f.get("service_rps") is not None and f.get("rate_rps") is not None:
            line += (
                f"; one replica completes {_f(f, 'service_rps'):,.3g} req/s of the {_f(f, 'rate_rps'):,.3g} "
                "arriving"
            )
        if f.get("kv_blocks_needed") is not None:
            line += (
                f"; or one replica with {int(_f(f, 'kv_blocks_needed')):,} KV blocks "
                f"(given {int(_f(f, 'kv_blocks_given')):,})"
            )
        return line
    if r.kind == "ablation":
        return _ablation(r)
    if r.kind == "refused":
        if r.knob == "enable_chunked_prefill":
            return (
                f"chunked prefill must stay on: with it off vLLM needs max_num_batched_tokens "
                f"({f.get('max_num_batched_tokens', 0):,}) >= max_model_len ({f.get('max_model_len', 0):,}) "
                f"for prompts of up to {f.get('prompt_max', 0):,} tokens"
            )
        return f"{r.knob} {r.alternative} is not possible here: {f.get('refused_because')}"
    if r.kind == "kv_cache":
        origin = (
            f"{f['model']} on {f['tensor_parallel_size']} x {f['gpu']} at gpu_memory_utilization "
            f"{f['gpu_memory_utilization']:g}"
            if f.get("model")
            else "as given by the hardware context"
        )
        return (
            f"KV cache: {int(f['blocks'] or 0):,} blocks of {f['block_size']} tokens per replica "
            f"({int(f['tokens'] or 0):,} tokens, {origin}); peak use {float(f['peak_use'] or 0):.0%}, "
            f"{float(f['preemptions_per_request'] or 0):.3f} preemptions per request, "
            f"{float(f['kv_exhaustion_events'] or 0):.1f} KV-exhaustion events per run"
        )
    if r.kind == "prefix_sharing":
        return (
            "the traffic shares no prompt prefixes, so prefix caching neither helps nor hurts here "
            f"(left {_onoff(r.value)})"
        )
    if r.kind == "gateway":
        return (
            f"queue_timeout_s {r.value:g} is not a vLLM flag: enforce it in the gateway or client "
            f"(at the target rate it rejected {float(f.get('shed_fraction') or 0):.2%} of requests)"
        )
    return f"{r.kind}: {r.facts}"


_VERDICT = {
    "change": "change to these settings",
    "keep": "keep what you have: nothing tried beat your configuration at the target load",
    "add_capacity": "add capacity: no scheduler setting meets the SLO on the GPUs searched",
}


def verdict_text(rec: SchedulerRecommendation) -> str:
    """The verdict with the margin a change had to beat, and how many flags it changes."""
    text = _VERDICT[rec.verdict]
    if rec.verdict == "keep" and rec.source.get("baseline_origin") == "vllm defaults":
        text = "keep vllm serve's defaults: nothing tried beat them at the target load"
    if rec.verdict == "keep":
        text += f" by more than the step-time model's measured error ({tolerance_text(rec.tolerance)})"
    elif rec.changes:
        names = ", ".join(
            f"{c.flag} {value_text(c.baseline_value)} -> {value_text(c.value)}" for c in rec.changes
        )
        text += f": {len(rec.changes)} change(s) from your configuration ({names})"
    return text


def _flag(knob: str, value: Any) -> str:
    flag = f"--{knob.replace('_', '-')}"
    if isinstance(value, bool):
        return flag if value else f"--no-{knob.replace('_', '-')}"
    return f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"


def baseline_name(rec: SchedulerRecommendation) -> str:
    """Whose configuration the recommendation was compared with."""
    if rec.source.get("baseline_origin") == "vllm defaults":
        return "vLLM defaults (baseline)"
    return "your configuration"


def lead_clauses(rec: SchedulerRecommendation) -> list[str]:
    """The verdict sentence's parts, in reading order: what to change (or keep), the size, the
    headroom to the SLO knee, the probability the SLO holds. New recommendation fields (cost,
    per-flag effects) add a clause here."""
    versus = next((r for r in rec.reasons if r.kind == "versus_baseline" and r.against == "baseline"), None)
    changes = [
        _flag(c.knob, c.recommended)
        for c in (versus.changes if versus else [])
        if c.knob not in ("queue_timeout_s", "replicas", "tensor_parallel_size")
    ]
    base = baseline_name(rec)
    if rec.verdict == "keep":
        what = (
            f"Keep {'vLLM' if base.startswith('vLLM') else 'your'} current settings: nothing tried beat them"
        )
    elif rec.verdict == "add_capacity":
        what = "Add capacity: no scheduler setting meets the SLO on the GPUs searched"
    elif changes:
        n = len(changes)
        what = f"Change {n} flag{'s' if n > 1 else ''} from {base}: {', '.join(changes)}"
    else:
        what = "Run the settings below"
    slo = {None: "", True: " meets the SLO", False: " does NOT meet the SLO"}[rec.meets_slo]
    out = [
        what,
        f"{rec.replicas} replica(s) x TP {rec.deployment.tensor_parallel_size} ({rec.gpus} GPU(s)){slo} "
        f"at {_rate(rec.target_rate_rps)}",
    ]
    if rec.goodput_knee_rps is not None and rec.knee_headroom is not None:
        out.append(f"headroom to the SLO knee {rec.knee_headroom:+.0%} ({_rate(rec.goodput_knee_rps)})")
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
    return [verdict_text(rec), *(reason_text(r) for r in rec.reasons)]


__all__ = [
    "baseline_name",
    "effect_text",
    "infeasibility_table",
    "lead_clauses",
    "lead_sentence",
    "reason_text",
    "recommendation_lines",
    "recommendation_view",
    "scatter_trials",
    "trials_table",
    "trials_view",
    "verdict_text",
]
