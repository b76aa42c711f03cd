"""Views of a tuning study (trials, the Pareto front) and of its recommendation (with reasons)."""

from __future__ import annotations

from typing import Any

from servesim.tuning.recommend import SchedulerRecommendation
from servesim.tuning.search import TuneResult
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


def trials_table(res: TuneResult, numbers: list[int], key: str, title: str) -> Table:
    by_number = {r.number: r for r in res.trials}
    cols = [
        Column(key="trial", label="trial", kind="int"),
        Column(key="gpus", label="GPUs", kind="int"),
        Column(key="goodput_per_gpu", label="goodput/GPU", unit="req/s", decimals=3, help=define("goodput")),
        Column(key="ttft_p99_ms", label="TTFT p99", unit="ms", help=define("ttft_ms")),
        Column(key="tpot_p99_ms", label="TPOT p99", unit="ms", help=define("tpot_ms")),
    ]
    cols += [Column(key=k, label=label, kind=kind, decimals=2) for k, label, kind in PARAM_COLUMNS]
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
                *(p.get(k) for k, _, _ in PARAM_COLUMNS),
            ]
        )
    return Table(key=key, title=title, columns=cols, rows=rows)


def trials_view(res: TuneResult, top: int = 8) -> Section:
    """The study: counts, why trials were pruned, the best trials, the Pareto front and a scatter."""
    text = [
        f"study {res.study_name} ({res.storage or 'in memory'}): {res.n_trials} trials, "
        f"{res.n_complete} complete, "
        f"{res.n_pruned} pruned as invalid, {res.n_feasible} feasible; objective {res.objective} at "
        f"{res.target_rate_rps:,.3g} req/s"
    ]
    text += [f"pruned {info.count}x [{rule}]: {info.example}" for rule, info in res.invalid_reasons.items()]
    done = [r for r in res.trials if r.outcome is not None and r.outcome.ttft_p99_ms is not None]
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
        ],
        series=[scatter],
        text=text,
    )


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
        Kpi(key="headroom", label="headroom", value=rec.headroom, unit="%", decimals=0),
    ]
    status = "info" if rec.meets_slo is None else ("pass" if rec.meets_slo else "fail")
    return Section(
        key="recommendation",
        title="recommendation",
        kpis=kpis,
        tables=[predicted, flags, ablations],
        verdicts=[Verdict(key="recommendation", label="recommendation", status=status, text=headline)]
        + [Verdict(key="warning", label="note", status="warn", text=w) for w in rec.warnings],
        text=[*rec.rationale, rec.vllm_serve_command],
    )


def _ms(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


__all__ = ["recommendation_view", "trials_table", "trials_view"]
