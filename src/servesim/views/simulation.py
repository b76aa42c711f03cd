"""The views of one replica's simulation: headline KPIs, percentile tables, histograms, time series.

``summary_view`` needs only the validated summary (so it also renders a saved ``--json`` report);
``simulation_view`` adds the charts drawn from the per-request and per-step frames.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from servesim.engine.config import EngineConfig
from servesim.engine.results import (
    KV_GROUP_COLUMN,
    SLO,
    ClassMetrics,
    LatencyStats,
    LoRASummary,
    OffloadSummary,
    SimulationResult,
    SimulationSummary,
    SpeculativeSummary,
    tokens_per_verifying_step,
)
from servesim.views.glossary import define
from servesim.views.model import Column, Histogram, Kpi, Line, Section, Series, Table, Verdict
from servesim.views.shape import MAX_POINTS, Part, downsample, pooled_histogram, series, time_binned

#: The latency metrics of every run, in display order: (key, label, SLO field).
LATENCIES = (
    ("ttft_ms", "TTFT", "ttft_ms"),
    ("tpot_ms", "TPOT", "tpot_ms"),
    ("itl_ms", "ITL", None),
    ("e2e_ms", "E2E", "e2e_ms"),
    ("queue_ms", "queue", None),
)
STAT_COLUMNS = ("mean", "p50", "p90", "p99", "max")


def slo_of(slo: SLO | None, field: str | None) -> float | None:
    return getattr(slo, field) if slo is not None and field is not None else None


def latency_table(summary: SimulationSummary, title: str = "latency") -> Table:
    """metric × mean/p50/p90/p99/max in ms, with the SLO column when one is given."""
    cols = [Column(key="metric", label="metric", kind="str")]
    cols += [Column(key=c, label=c, unit="ms", kind="float") for c in STAT_COLUMNS]
    has_slo = summary.slo is not None
    if has_slo:
        cols.append(Column(key="slo", label="SLO", unit="ms", kind="float", help="The run's objective."))
    rows: list[list[Any]] = []
    for key, label, slo_field in LATENCIES:
        st: LatencyStats = getattr(summary, key)
        row: list[Any] = [label] + [None if st.count == 0 else getattr(st, c) for c in STAT_COLUMNS]
        if has_slo:
            row.append(slo_of(summary.slo, slo_field))
        rows.append(row)
    notes = [] if summary.num_finished else ["no finished requests: nothing to measure"]
    return Table(key="latency", title=title, columns=cols, rows=rows, notes=notes)


def kpis(summary: SimulationSummary, percentile: str = "p99") -> list[Kpi]:
    """Headline figures: the latency percentile against its SLO, goodput and throughput."""
    out: list[Kpi] = []
    for key, label, slo_field in LATENCIES[:4]:
        st: LatencyStats = getattr(summary, key)
        value = None if st.count == 0 else float(getattr(st, percentile))
        cap = slo_of(summary.slo, slo_field)
        verdict = "none" if cap is None or value is None else ("pass" if value <= cap else "fail")
        out.append(
            Kpi(
                key=f"{key}_{percentile}",
                label=f"{label} {percentile}",
                value=value,
                unit="ms",
                slo=cap,
                verdict=verdict,
                help=define(key),
            )
        )
    n = summary.num_requests
    out.append(
        Kpi(
            key="goodput",
            label="goodput",
            value=summary.goodput if summary.slo is not None else None,
            unit="req/s",
            decimals=2,
            help=define("goodput"),
        )
    )
    out.append(
        Kpi(
            key="good_fraction",
            label="SLO attainment",
            value=(summary.num_good / n if n else None) if summary.slo is not None else None,
            unit="%",
            decimals=1,
            help=define("good_fraction"),
        )
    )
    for key, unit, dec in (("output_token_throughput", "tok/s", 0), ("request_throughput", "req/s", 2)):
        out.append(
            Kpi(
                key=key,
                label=key.replace("_", " "),
                value=getattr(summary, key),
                unit=unit,
                decimals=dec,
                help=define(key),
            )
        )
    sp = summary.speculative
    if sp is not None:
        out.append(
            Kpi(
                key="accepted_tokens_per_step",
                label=f"accepted tokens per step (k = {sp.num_speculative_tokens})",
                value=sp.mean_acceptance_length,
                unit="tokens",
                decimals=2,
                help=define("accepted_tokens_per_step"),
            )
        )
        out.append(
            Kpi(
                key="spec_acceptance_rate",
                label="draft acceptance rate",
                value=sp.acceptance_rate,
                unit="%",
                decimals=1,
                help=define("spec_acceptance_rate"),
            )
        )
    return out


def totals_table(summary: SimulationSummary) -> Table:
    """The run's counts and rates as (figure, value) rows, worded once for every interface."""
    s = summary
    adm = s.admission
    rejected = s.num_rejected_prompt_too_long + s.num_rejected_queue_timeout
    rejected += adm.num_rejected if adm is not None else 0
    rows: list[list[Any]] = [
        [
            "requests",
            f"{s.num_requests:,} ({s.num_finished:,} finished, {s.num_length_capped:,} capped by "
            f"max_model_len, {rejected:,} rejected, {s.num_unfinished:,} unfinished)",
        ],
        ["duration", f"{s.duration_s:,.1f} s in {s.num_steps:,} engine steps (busy {s.busy_s:,.1f} s)"],
        [
            "throughput",
            f"{s.request_throughput:,.2f} req/s, {s.output_token_throughput:,.0f} output tok/s, "
            f"{s.total_token_throughput:,.0f} total tok/s",
        ],
    ]
    if adm is not None:  # vLLM's API server's 503s (max_num_queued_reqs / max_num_queued_tokens)
        when = (
            ""
            if adm.first_rejection_s is None
            else f", {adm.first_rejection_s:,.1f}-{adm.last_rejection_s:,.1f} s"
        )
        rows.append(
            [
                "HTTP 503",
                f"{adm.num_rejected:,} ({adm.rejection_rate:.1%}: {adm.num_rejected_queued_reqs:,} by "
                f"max_num_queued_reqs, {adm.num_rejected_queued_tokens:,} by max_num_queued_tokens{when})",
            ]
        )
    if s.slo is not None:
        rows.append(
            ["goodput", f"{s.goodput:,.2f} req/s ({s.num_good:,} of {s.num_requests:,} meet the SLO)"]
        )
    rows += [
        [
            "batch",
            f"mean {s.mean_running:,.1f} running (max {s.max_running:,}), {s.mean_batch_tokens:,.0f} "
            f"tokens/step; mean {s.mean_waiting:,.1f} waiting (max {s.max_waiting:,})",
        ],
        ["KV cache", f"mean {s.mean_kv_usage:.1%} used, max {s.max_kv_usage:.1%}"],
        *([["KV cache groups", kv_groups_text(s)]] if s.kv_usage_by_group else []),
        [
            "preemptions",
            f"{s.num_preemptions:,} ({s.num_preempted_requests:,} requests, at most "
            f"{s.max_preemptions_per_request:,} each); {s.recomputed_tokens:,} tokens recomputed, "
            f"{s.reused_tokens:,} reused from the cache",
        ],
    ]
    if s.num_starved:
        rows.append(["starvation", f"{s.num_starved:,} requests STARVED (see the per-class figures)"])
    if s.prefix_cache_hit_rate is not None:
        rows.append(["prefix cache", f"hit rate {s.prefix_cache_hit_rate:.1%}"])
    if s.lora is not None:
        rows.append(["LoRA", lora_words(s.lora)])
    return Table.figures("totals", "totals", rows)


def lora_words(lo: LoRASummary) -> str:
    """The LoRA row: slot waits, then the adapters brought to the GPU and what they cost."""
    text = (
        f"max_loras {lo.max_loras}: {lo.skipped_request_steps:,} request-steps left waiting for an adapter "
        "slot"
    )
    if lo.gpu_loads is None:
        return text + "; adapter loads not timed (fixed step time)"
    return (
        f"{text}; {lo.gpu_loads:,} adapters copied to the GPU, {lo.disk_reads:,} read from disk first "
        f"(host cache of {lo.max_cpu_loras}): {lo.load_s or 0.0:,.2f} s of step time"
    )


def kv_groups_text(s: SimulationSummary) -> str:
    """A hybrid model's KV usage split by KV cache group kind, each kind's share of the one
    pool (the kinds' means add up to the run's): ``full: mean 0.3%, max 0.9%; sliding_window(128):
    mean 0.1%, max 0.3%``."""
    return "; ".join(
        f"{g.group}: mean {g.mean_usage:.1%}, max {g.max_usage:.1%}" for g in s.kv_usage_by_group or ()
    )


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def speculative_table(sp: SpeculativeSummary) -> Table:
    """Speculative decoding (``--speculative-config``): drafts verified, accepted, and the tokens
    each verifying request emits per step, as vLLM's spec-decode metrics count them."""
    rows: list[list[Any]] = [
        ["drafter", f"{sp.method}, k = {sp.num_speculative_tokens}"],
        ["draft tokens verified", f"{sp.draft_tokens:,} in {sp.verifications:,} request-steps"],
        ["accepted", f"{sp.accepted_tokens:,} ({_rate(sp.acceptance_rate)})"],
        [
            "accepted tokens per step",
            "n/a"
            if sp.mean_acceptance_length is None
            else f"{sp.mean_acceptance_length:.2f} per request (1 + accepted drafts)",
        ],
        ["draft time", f"{sp.draft_time_s:.2f} s of the drafter's passes"],
    ]
    return Table.figures(
        "speculative",
        "speculative decoding",
        rows,
        [
            "Acceptance comes from the acceptance model (per-position rates, seeded); TPOT and ITL "
            "above already count every accepted token."
        ],
    )


def offload_table(off: OffloadSummary) -> Table:
    """The CPU offload tier (``--kv-offloading-size``): where prompt tokens came from and what
    moved over the host link, as vLLM's OffloadingConnector counts them."""
    rows: list[list[Any]] = [
        ["GPU prefix-hit rate", _rate(off.gpu_hit_rate)],
        ["CPU prefix-hit rate", _rate(off.cpu_hit_rate)],
        ["tokens loaded from CPU", f"{off.loaded_tokens:,} ({off.load_jobs:,} loads)"],
        [
            "tokens stored to CPU",
            f"{off.stored_tokens:,} ({off.store_jobs:,} stores, {off.store_failures:,} refused)",
        ],
        ["tokens recomputed", f"{off.recomputed_tokens:,} (after preemptions)"],
        [
            "CPU tier",
            f"{off.cpu_chunks:,} chunks of {off.blocks_per_chunk} block(s); {off.cpu_chunks_stored_at_end:,} "
            f"held at the end, {off.chunks_evicted:,} evicted",
        ],
    ]
    return Table.figures(
        "offload",
        "CPU offload tier",
        rows,
        [
            "GPU hit rate: prompt tokens found in the GPU prefix cache; CPU hit rate: of the tokens "
            "beyond the GPU hit, those the CPU tier supplied (first admissions, as vLLM)."
        ],
    )


def class_table(label: str, classes: dict[str, ClassMetrics]) -> Table:
    """How each priority class or tenant fared."""
    cols = [
        Column(key="class", label=label, kind="str"),
        Column(key="requests", label="requests", kind="int"),
        Column(key="finished", label="finished", kind="int"),
        Column(key="preemptions", label="preemptions", kind="int", help=define("preemptions")),
        Column(key="max_preemptions", label="max/request", kind="int"),
        Column(key="starved", label="starved", kind="int", help=define("starved")),
        Column(
            key="sla_misses", label="SLA misses", kind="int", help="Not good: missed an SLO or unfinished."
        ),
        Column(key="ttft_p99_ms", label="TTFT p99", unit="ms", kind="float", help=define("ttft_ms")),
        Column(key="recomputed", label="recomputed", unit="tokens", kind="int"),
        Column(key="reused", label="reused", unit="tokens", kind="int"),
    ]
    rows: list[list[Any]] = [
        [
            name,
            c.num_requests,
            c.num_finished,
            c.num_preemptions,
            c.max_preemptions_per_request,
            c.num_starved,
            c.sla_violations,
            c.ttft_p99_ms,
            c.recomputed_tokens,
            c.reused_tokens,
        ]
        for name, c in classes.items()
    ]
    return Table(key=f"by_{label}", title=f"by {label}", columns=cols, rows=rows)


def config_table(config: EngineConfig, max_model_len: int | None = None) -> Table:
    """The engine settings under vLLM's names; an unset max_model_len shows the value the run used
    (the trace's longest request), as the ``vllm serve`` command pins it."""
    rows: list[list[Any]] = [
        [k, _cell(v)]
        if not (k == "max_model_len" and v is None and max_model_len)
        else [k, f"{max_model_len:,} (the trace's longest request)"]
        for k, v in config.model_dump(mode="json").items()
    ]
    return Table(
        key="config",
        title="engine settings",
        columns=[
            Column(key="flag", label="setting", kind="str"),
            Column(key="value", label="value", kind="str"),
        ],
        rows=rows,
    )


def summary_view(
    summary: SimulationSummary,
    config: EngineConfig | None = None,
    *,
    title: str = "simulation",
    percentile: str = "p99",
) -> Section:
    """KPIs, tables and verdicts from the summary alone (a saved report renders too)."""
    tables = [latency_table(summary, title), totals_table(summary)]
    if summary.offload is not None:
        tables.append(offload_table(summary.offload))
    if summary.speculative is not None:
        tables.append(speculative_table(summary.speculative))
    for label, classes in (("priority", summary.by_priority), ("tenant", summary.by_tenant)):
        if len(classes) > 1:
            tables.append(class_table(label, classes))
    if config is not None:
        tables.append(config_table(config, summary.max_model_len))
    verdicts = [slo_verdict(summary)] if summary.slo is not None else []
    text = [] if summary.num_requests else ["no requests: nothing to measure"]
    return Section(
        key="simulation",
        title=title,
        kpis=kpis(summary, percentile),
        tables=tables,
        verdicts=verdicts,
        text=text,
    )


def slo_verdict(summary: SimulationSummary) -> Verdict:
    n = summary.num_requests
    share = summary.num_good / n if n else 0.0
    status = "pass" if n and summary.num_good == n else ("warn" if share >= 0.99 else "fail")
    return Verdict(
        key="slo",
        label="SLO attainment",
        status=status,
        text=f"{summary.num_good:,} of {n:,} requests ({share:.1%}) finished within every SLO",
    )


def simulation_view(
    result: SimulationResult,
    *,
    title: str = "simulation",
    bins: int = 40,
    max_points: int = MAX_POINTS,
    percentile: str = "p99",
) -> Section:
    """Everything about one run: ``summary_view`` plus histograms, time series and the bottleneck."""
    base = summary_view(result.summary, result.config, title=title, percentile=percentile)
    step_hist = [tokens_per_step_histogram(result, bins)] if len(result.steps) else []
    return base.model_copy(
        update={
            "histograms": latency_histograms(result, bins) + step_hist,
            "series": time_series(result, max_points),
            "verdicts": [*base.verdicts, bottleneck(result)],
        }
    )


def latency_histograms(result: SimulationResult, bins: int = 40) -> list[Histogram]:
    s = result.summary
    req = result.requests
    out = []
    for key, label, slo_field in LATENCIES:
        st: LatencyStats = getattr(s, key)
        pct = (st.p50, st.p90, st.p99) if st.count else (None, None, None)
        out.append(
            pooled_histogram(
                key,
                f"{label} distribution",
                itl_parts(result) if key == "itl_ms" else [(req[key].to_numpy(dtype=np.float64), None, None)],
                "ms",
                bins=bins,
                slo=slo_of(s.slo, slo_field),
                help=define(key),
                percentiles=pct,
                label=label,
                count_label="token gaps" if key == "itl_ms" else "requests",
            )
        )
    return out


def tokens_per_step_histogram(result: SimulationResult, bins: int = 40) -> Histogram:
    """How full the steps are: tokens per step as a distribution on 0..the budget, the budget marked
    (a line over time reads as a wall at the budget when a few prefill steps fill it)."""
    toks = result.steps["num_tokens"].to_numpy(dtype=np.float64)
    budget = int(result.config.max_num_batched_tokens)
    top = max(float(budget), float(toks.max()))
    mean = float(toks.mean())  # before the percentiles reorder toks (a sum depends on the order)
    # One partition of the copy in place: the same order statistics as three copies partitioned.
    p50, p90, p99 = (float(p) for p in np.percentile(toks, (50, 90, 99), overwrite_input=True))
    return pooled_histogram(
        "num_tokens",
        f"tokens per step: mean {mean:,.0f} of a {budget:,} budget",
        [(toks, None, None)],
        "tokens",
        bins=bins,
        help=define("num_tokens"),
        percentiles=(p50, p90, p99),
        value_range=(0.0, top),
        label="step size",
        count_label="steps",
        reference=float(budget),
        reference_label=f"max_num_batched_tokens {budget:,}",
    )


def itl_parts(result: SimulationResult) -> list[Part]:
    """``itl_values`` as ``pooled_histogram`` parts (no concatenated copy of millions of steps)."""
    dur = result.steps["duration_s"].to_numpy(dtype=np.float64)
    if result.itl is None:
        return [(dur, None, 1e3)]
    weights, gaps = result.itl
    return [(dur, np.asarray(weights), 1e3), (np.asarray(gaps, dtype=np.float64), np.ones(len(gaps)), 1e3)]


def itl_values(result: SimulationResult) -> tuple[np.ndarray, np.ndarray | None]:
    """The pooled ITL sample as (values in ms, weights): step durations stand for their gaps."""
    dur_ms = result.steps["duration_s"].to_numpy(dtype=np.float64) * 1e3
    if result.itl is None:
        return dur_ms, None
    weights, gaps = result.itl
    values = np.concatenate([dur_ms, np.asarray(gaps, dtype=np.float64) * 1e3])
    w = np.concatenate([np.asarray(weights, dtype=np.float64), np.ones(len(gaps))])
    return values, w


def time_series(result: SimulationResult, max_points: int = MAX_POINTS) -> list[Series]:
    """Queue, batch, KV usage, tokens per step (with the budget), preemptions and throughput."""
    st = result.steps
    if not len(st):
        return []
    t = st["start_s"].to_numpy(dtype=np.float64)
    dur = st["duration_s"].to_numpy(dtype=np.float64)  # each step ends at t + dur (never all at once)
    out = [
        series(
            "num_waiting",
            "waiting queue",
            t,
            st["num_waiting"].to_numpy(),
            y_label="requests",
            kind="step",
            max_points=max_points,
            help=define("num_waiting"),
        ),
        series(
            "num_running",
            "running batch",
            t,
            st["num_running"].to_numpy(),
            y_label="requests",
            kind="step",
            max_points=max_points,
            reference=float(result.config.max_num_seqs),
            reference_label="max_num_seqs",
            help=define("num_running"),
        ),
        series(
            "kv_usage",
            "KV-cache usage",
            t,
            st["kv_usage"].to_numpy(),
            y_label="share of blocks",
            kind="step",
            max_points=max_points,
            reference=1.0,
            reference_label="every usable block",
            help=define("kv_usage"),
        ),
    ]
    groups = kv_group_lines(st, t, max_points)
    if groups:  # a hybrid model: each KV cache group kind's share beside the total
        more = (
            " A line per KV cache group kind: its groups' blocks / usable blocks (they add up to the total)."
        )
        out[-1] = out[-1].model_copy(
            update={"lines": groups, "name": "all groups", "help": (define("kv_usage") or "") + more}
        )
    bins = min(max(10, max_points // 4), max(1, len(st)))
    t0, t1 = float(t[0]), float(t[-1] + dur[-1])
    width = (t1 - t0) / bins if t1 > t0 else 1.0
    x, pre = time_binned(t, st["num_preempted"].to_numpy(), t0, t1, bins)
    total = int(st["num_preempted"].sum())
    out.append(
        series(
            "preemptions",
            f"preemptions per time bin ({total:,} in all)",
            x,
            pre,
            y_label="preemptions",
            kind="bar",
            max_points=max_points,
            help=define("preemptions"),
        )
    )
    emitted = st["num_decodes"].to_numpy()
    if "spec_rows" in st:  # a verifying request emits 1 + its accepted drafts (its step is a chunk)
        emitted = emitted + st["spec_rows"].to_numpy() + st["spec_accepted"].to_numpy()
    x, toks = time_binned(t, emitted, t0, t1, bins, plus=dur)
    out.append(
        series(
            "output_tokens_per_s",
            "output tokens per second",
            x,
            toks / width,
            y_label="tokens/s",
            y_unit="tok/s",
            max_points=max_points,
            help=define("output_token_throughput"),
        )
    )
    del emitted  # with drafts, a count per step: gone before the spec and latency-split temporaries
    spec = spec_series(result, t0, t1, bins, max_points)
    if spec is not None:
        out.append(spec)
    split = latency_split_series(result.requests)
    if split is not None:
        out.append(split)
    return out


def kv_group_lines(st: Any, t: np.ndarray, max_points: int) -> list[Line]:
    """A hybrid model's KV usage per KV cache group kind over time (the steps' ``kv_usage:<kind>``
    columns), one line per kind on its own down-sampled x; [] for one block table."""
    out = []
    for col in st.columns:
        if isinstance(col, str) and col.startswith(KV_GROUP_COLUMN):
            xs, ys = downsample(t, st[col].to_numpy(dtype=np.float64), max_points)
            out.append(Line(label=col.removeprefix(KV_GROUP_COLUMN), x=xs, y=ys))
    return out


def spec_series(result: SimulationResult, t0: float, t1: float, bins: int, max_points: int) -> Series | None:
    """Speculative decoding: accepted tokens per verifying step over time, each time bin's
    accepted drafts over its verifications (``tokens_per_verifying_step``, the summary's formula);
    bins without a verification are left out. None when the run does not speculate."""
    st = result.steps
    sp = result.summary.speculative
    if sp is None or "spec_verifications" not in st:
        return None
    t = st["start_s"].to_numpy(dtype=np.float64) + st["duration_s"].to_numpy(dtype=np.float64)
    x, ver = time_binned(t, st["spec_verifications"].to_numpy(), t0, t1, bins)
    _, acc = time_binned(t, st["spec_accepted"].to_numpy(), t0, t1, bins)
    pts = [
        (float(xi), v)
        for xi, a, n in zip(x, acc, ver, strict=True)
        if (v := tokens_per_verifying_step(int(a), int(n))) is not None
    ]
    if not pts:
        return None
    k = sp.num_speculative_tokens
    run = "-" if sp.mean_acceptance_length is None else f"{sp.mean_acceptance_length:.2f}"
    return series(
        "accepted_tokens_per_step",
        f"accepted tokens per verifying step (run {run}, k = {k})",
        np.asarray([p[0] for p in pts]),
        np.asarray([p[1] for p in pts]),
        y_label="tokens per step",
        y_unit="tokens",
        max_points=max_points,
        reference=float(k + 1),
        reference_label=f"every draft accepted (k + 1 = {k + 1})",
        help=define("accepted_tokens_per_step"),
    )


def latency_split_series(requests: Any) -> Series | None:
    """The phase breakdown chart (``latency_split``) of these requests; None when none finished."""
    split = latency_split(requests)
    if not split:
        return None
    done = f"{split['count'][0]:,.0f} finished"
    return Series(
        key="latency_split",
        title=f"where a request's time goes: p50 and p99 per phase ({done})",
        x_label="phase",
        x_unit=None,
        y_label="time in the phase",
        y_unit="ms",
        x=[0.0, 1.0, 2.0],
        y=split["p50"],
        kind="bar",
        categories=list(PHASES),
        name="p50",
        lines=[Line(label="p99", y=split["p99"]), Line(label="mean", y=split["mean"])],
        help="queue = first scheduled - arrival; prefill = first token - first scheduled; "
        "decode = last token - first token (finished requests).",
    )


#: The phases of a finished request, in order (``latency_split``).
PHASES = ("queue", "prefill", "decode")


def latency_split(requests: Any) -> dict[str, list[float]]:
    """p50, p99 and mean of the queue, prefill and decode time (ms) of the finished requests, in
    ``PHASES`` order, and their ``count``; empty when none finished (nothing to draw)."""
    fin = requests["finish_s"].notna().to_numpy()
    if not fin.any():
        return {}
    arr = requests["arrival_s"].to_numpy(dtype=np.float64)[fin]
    sch = requests["first_scheduled_s"].to_numpy(dtype=np.float64)[fin]
    ft = requests["first_token_s"].to_numpy(dtype=np.float64)[fin]
    end = requests["finish_s"].to_numpy(dtype=np.float64)[fin]
    phases = [(sch - arr) * 1e3, (ft - sch) * 1e3, (end - ft) * 1e3]
    return {
        "p50": [round(float(np.percentile(x, 50)), 3) for x in phases],
        "p99": [round(float(np.percentile(x, 99)), 3) for x in phases],
        "mean": [round(float(np.mean(x)), 3) for x in phases],
        "count": [float(fin.sum())],
    }


def binding_limits(steps: Any, config: EngineConfig) -> dict[str, np.ndarray]:
    """Per step, whether each scheduler limit was binding (the bottleneck's rule): ``max_num_seqs``
    when the batch is full, ``token_budget`` when the step used >= 95 % of max_num_batched_tokens,
    ``kv_cache`` when >= 95 % of the KV blocks were in use or the step preempted a request, and with
    LoRA ``max_loras`` when the step left a waiting request behind because its adapter would have
    exceeded max_loras (vLLM's skip; the engine records it per step)."""
    limits = {
        "max_num_seqs": steps["num_running"].to_numpy() >= config.max_num_seqs,
        "token_budget": steps["num_tokens"].to_numpy() >= 0.95 * config.max_num_batched_tokens,
        "kv_cache": (steps["kv_usage"].to_numpy() >= 0.95) | (steps["num_preempted"].to_numpy() > 0),
    }
    if "lora_skipped" in steps:
        limits["max_loras"] = steps["lora_skipped"].to_numpy() > 0
    return limits


#: Why requests wait, in the order a step's waiting queue is attributed (first binding limit wins).
QUEUE_REASONS = (
    ("kv_cache", "KV blocks"),
    ("max_num_seqs", "max_num_seqs"),
    ("token_budget", "token budget"),
    ("other", "no limit binding (arrived during the step)"),
)

#: With LoRA, requests left behind for their adapter (after KV blocks: a step that stops at a full
#: batch never reaches the adapter check); only for runs in which a step skipped one.
LORA_REASON = ("max_loras", "LoRA adapter slots (max_loras)")


def queue_by_reason(result: SimulationResult, max_points: int = MAX_POINTS) -> list[Series]:
    """The waiting queue over time split by why it waits, derived from the step records (the engine
    records no reason): a step's ``num_waiting`` goes to its first binding limit in
    ``QUEUE_REASONS`` order (``binding_limits``: KV blocks, then with LoRA the adapter slots, then
    max_num_seqs, then the token budget), else to "other" (the queue was not held back by a limit:
    requests that arrived while the step ran and join the next one). One series per reason (key
    ``queue_by_reason.<reason>``), the mean queue per time bin; the series add up to the binned
    ``num_waiting``."""
    st = result.steps
    if not len(st):
        return []
    t = st["start_s"].to_numpy(dtype=np.float64)
    end = t + st["duration_s"].to_numpy(dtype=np.float64)
    waiting = st["num_waiting"].to_numpy(dtype=np.float64)
    limits = binding_limits(st, result.config)
    left = np.ones(len(st), dtype=bool)
    bins = min(max(10, max_points // 4), max(1, len(st)))
    out = []
    reasons = (
        QUEUE_REASONS if "max_loras" not in limits else (QUEUE_REASONS[0], LORA_REASON, *QUEUE_REASONS[1:])
    )
    for key, label in reasons:
        mine = left & limits[key] if key in limits else left
        left &= ~mine
        x, y = time_binned(t, np.where(mine, waiting, 0.0), float(t[0]), float(end[-1]), bins, how="mean")
        out.append(
            series(
                f"queue_by_reason.{key}",
                f"waiting queue by reason: {label}",
                x,
                y,
                y_label="requests waiting (mean per bin)",
                kind="step",
                max_points=max_points,
                help=f"Requests waiting while {label} held them back (views.simulation.queue_by_reason).",
            )
        )
    return out


#: What ``bottleneck_limit`` can name: no traffic, no limit (compute at this load), queueing with no
#: scheduler limit binding, or the scheduler limit binding most while requests waited.
LimitName = Literal[
    "idle", "none", "queueing", "KV cache", "max_num_batched_tokens", "max_num_seqs", "max_loras"
]

#: What to try for each scheduler limit (the bottleneck verdicts' advice).
LIMIT_ACTIONS = {
    "KV cache": "more KV blocks (higher --gpu-memory-utilization, more TP, FP8 KV) or fewer sequences",
    "max_num_batched_tokens": "a larger --max-num-batched-tokens (longer steps, fewer of them)",
    "max_num_seqs": "a larger --max-num-seqs if the KV cache has room",
    "max_loras": "a larger --max-loras (more adapters per batch), or with replicas --router lora_aware "
    "(each adapter kept on the replicas already running it)",
}


@dataclass(frozen=True)
class Limit:
    """What limits one replica (``bottleneck_limit``): ``name``, the share of the busy time in
    which requests waited (``share_queued``) and, of that, the share in which ``name`` was the
    binding limit (``share``; 0 unless a scheduler limit)."""

    name: LimitName
    share_queued: float = 0.0
    share: float = 0.0


def bottleneck_limit(result: SimulationResult) -> Limit:
    """The rule behind ``bottleneck``, as data: no traffic (idle); requests waited in under 5 %
    of the busy time (none: compute-bound at this load); else the scheduler limit binding in the
    largest share of the waiting time, when that share is at least half (else queueing)."""
    s = result.summary
    st = result.steps
    if not len(st) or s.busy_s <= 0:
        return Limit("idle")
    dur = st["duration_s"].to_numpy(dtype=np.float64)
    queued = st["num_waiting"].to_numpy() > 0
    share_queued = float(dur[queued].sum() / s.busy_s)
    if share_queued < 0.05:
        return Limit("none", share_queued)
    limits = binding_limits(st, result.config)
    at_seqs, at_budget, at_kv = (queued & limits[k] for k in ("max_num_seqs", "token_budget", "kv_cache"))
    queued_s = float(dur[queued].sum())
    shares: dict[LimitName, float] = {  # of the time requests waited, the share each limit was binding
        "KV cache": float(dur[at_kv].sum() / queued_s),
        "max_num_batched_tokens": float(dur[at_budget].sum() / queued_s),
        "max_num_seqs": float(dur[at_seqs].sum() / queued_s),
    }
    if "max_loras" in limits:
        shares["max_loras"] = float(dur[queued & limits["max_loras"]].sum() / queued_s)
    name, share = max(shares.items(), key=lambda kv: kv[1])
    if share < 0.5:
        return Limit("queueing", share_queued)
    return Limit(name, share_queued, share)


def bottleneck(result: SimulationResult) -> Verdict:
    """What limits this run, from the step series: KV blocks, the token budget, max_num_seqs,
    queueing from a rate beyond capacity, or nothing (compute-bound at this load)."""
    lim = bottleneck_limit(result)
    if lim.name == "idle":
        return Verdict(
            key="bottleneck", label="bottleneck", status="info", text="no traffic: nothing limits it"
        )
    if lim.name == "none":
        return Verdict(
            key="bottleneck",
            label="bottleneck",
            status="pass",
            text=f"none at this load: requests waited in only {lim.share_queued:.1%} of the busy time; "
            "latency is the model's compute (a faster GPU or more TP lowers it)",
        )
    if lim.name == "queueing":
        return Verdict(
            key="bottleneck",
            label="bottleneck",
            status="warn",
            text=f"queueing: requests waited in {lim.share_queued:.1%} of the busy time with no scheduler "
            "limit binding; the arrival rate is beyond this replica's compute: add replicas or GPUs",
        )
    return Verdict(
        key="bottleneck",
        label="bottleneck",
        status="warn",
        text=f"{lim.name}: requests waited in {lim.share_queued:.1%} of the busy time, and {lim.name} was "
        f"the binding limit in {lim.share:.0%} of that; try {LIMIT_ACTIONS[lim.name]}",
    )


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return "-" if v is None else str(v)


__all__ = [
    "LATENCIES",
    "LIMIT_ACTIONS",
    "LORA_REASON",
    "QUEUE_REASONS",
    "Limit",
    "LimitName",
    "binding_limits",
    "bottleneck",
    "bottleneck_limit",
    "class_table",
    "config_table",
    "itl_values",
    "kpis",
    "latency_histograms",
    "latency_split",
    "latency_split_series",
    "latency_table",
    "queue_by_reason",
    "simulation_view",
    "summary_view",
    "time_series",
    "tokens_per_step_histogram",
    "totals_table",
]


def prefix_cache_kpi(summary: SimulationSummary) -> Kpi | None:
    """The prefix-cache hit rate tile (vLLM's figure: hits / queries at first admission); None
    when the run had prefix caching off."""
    if summary.prefix_cache_hit_rate is None:
        return None
    return Kpi(
        key="prefix_cache_hit_rate",
        label="prefix cache hit rate",
        value=summary.prefix_cache_hit_rate,
        unit="%",
        decimals=1,
        help=define("prefix_cache_hit_rate"),
    )


def prefix_hit_bins(result: SimulationResult, bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prefix-cache hits and queries (prompt tokens) binned by when each request was first
    admitted, over the run's steps: the bins' left edges, hits and queries. The engine counts a
    request's hit at its first admission and its whole prompt as the query, so the hits over the
    queries of all bins are the summary's ``prefix_cache_hit_rate``."""
    req = result.requests
    st = result.steps
    t = st["start_s"].to_numpy(dtype=np.float64)
    end = t + st["duration_s"].to_numpy(dtype=np.float64)
    first = req["first_scheduled_s"].to_numpy(dtype=np.float64)
    admitted = ~np.isnan(first)
    at = first[admitted]
    t0, t1 = float(t[0]), float(end[-1])
    x, hits = time_binned(at, req["prefix_hit_tokens"].to_numpy(dtype=np.float64)[admitted], t0, t1, bins)
    _, queries = time_binned(at, req["prompt_len"].to_numpy(dtype=np.float64)[admitted], t0, t1, bins)
    return x, hits, queries


def prefix_hit_series(result: SimulationResult, max_points: int = MAX_POINTS) -> Series | None:
    """The prefix-cache hit rate per time bin (the bins of ``time_series``), as a share of the
    prompt tokens of the requests first admitted in the bin; bins where none was admitted are
    left out (no rate to show). None when prefix caching was off or nothing ran."""
    rate = result.summary.prefix_cache_hit_rate
    st = result.steps
    if rate is None or not len(st) or not result.requests["first_scheduled_s"].notna().any():
        return None
    bins = min(max(10, max_points // 4), max(1, len(st)))
    x, hits, queries = prefix_hit_bins(result, bins)
    some = queries > 0
    return series(
        "prefix_hit_rate",
        f"prefix-cache hit rate per time bin (whole run {rate:.1%})",
        x[some],
        hits[some] / queries[some] * 100.0,
        x_label="time (first admission)",
        y_label="hit rate",
        y_unit="%",
        kind="bar",
        max_points=max_points,
        reference=rate * 100.0,
        reference_label="whole run",
        help="Prompt tokens found in the prefix cache / prompt tokens of the requests first "
        "admitted in the bin.",
    )
