"""Views of a tuning study: its trials (the best, the Pareto front, a scatter), what the pruned
ones broke and, when no trial is feasible, how far each infeasible trial is from the SLO."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesim.tuning.study import TrialRecord, TuneResult
from servesim.views.glossary import define
from servesim.views.model import Column, Section, Series, Table
from servesim.views.reasons import ms_text

if TYPE_CHECKING:
    from servesim.tuning.recommend import SchedulerRecommendation

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
#: vLLM 0.33's 503 limits (none = off), shown when a study searched them.
QUEUE_COLUMNS = (
    ("max_num_queued_reqs", "queued reqs", "int"),
    ("max_num_queued_tokens", "queued tok", "int"),
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
    params: tuple[tuple[str, str, str], ...] = PARAM_COLUMNS
    outcomes = [by_number[n].outcome for n in numbers]
    if any(o is not None and o.params.get("num_speculative_tokens") for o in outcomes):
        params = (*params, SPEC_COLUMN)  # only a study that searched speculation shows k
    params = (
        *params,
        *(c for c in QUEUE_COLUMNS if any(o is not None and c[0] in o.params for o in outcomes)),
    )
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


def rungs_text(res: TuneResult) -> list[str]:
    """The search rungs (``--pruning rungs``): trials per rung, stops, the simulation saved."""
    rr = res.rungs
    if rr is None:
        return []
    parts = []
    for r in rr.rungs:
        what = f" (first {rr.prefix_requests:,} of {rr.full_requests:,} requests)" if r.rung == 1 else ""
        stop = f", {r.stopped} stopped" if r.name != "full" else ""
        if r.rung == 1 and rr.prefix_skipped:
            stop += f" ({rr.prefix_skipped} skipped it: too few trials missed the SLO for it to pay)"
        parts.append(f"{r.rung} {r.name}{what}: {r.entered} ran{stop}")
    out = ["search rungs: " + "; ".join(parts)]
    saved = (
        f"{rr.saved_fraction:.0%} saved"
        if rr.saved_fraction >= 0
        else f"the prefix runs cost {-rr.saved_fraction:.0%} more"
    )
    out.append(
        f"rungs simulated {rr.simulated_requests:,} requests where every trial in full needs "
        f"{rr.unpruned_requests:,} ({saved})"
    )
    examples: dict[int, str] = {}
    for t in res.trials:
        o = t.outcome
        if o is not None and o.rung is not None and not o.valid and o.reason:
            examples.setdefault(o.rung, f"trial {t.number}: {o.reason}")
    out += [examples[k] for k in sorted(examples)]
    return out


def trials_view(res: TuneResult, top: int = 8) -> Section:
    """The study: counts, why trials were pruned, the best trials, the Pareto front and a scatter."""
    stopped = res.rungs.stopped if res.rungs is not None else 0
    text = [
        f"study {res.study_name} ({res.storage or 'in memory'}): {res.n_trials} trials, "
        f"{res.n_complete} complete, "
        f"{res.n_pruned - stopped} pruned as invalid, "
        + (f"{stopped} stopped at a rung, " if res.rungs is not None else "")
        + f"{res.n_feasible} feasible; objective {res.objective} at {res.target_rate_rps:,.3g} req/s"
    ]
    text += [f"pruned {info.count}x [{rule}]: {info.example}" for rule, info in res.invalid_reasons.items()]
    text += rungs_text(res)
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
    tables = [
        trials_table(res, res.ranked[:top], "best_trials", "best feasible trials"),
        trials_table(res, front, "pareto_front", "Pareto front"),
        infeasibility_table(res),
    ]
    return Section(
        key="tuning",
        title="tuning study",
        tables=[t for t in tables if t.rows],  # no empty table: what has no row is not shown
        series=[scatter],
        text=text,
    )


def _is_deployment(record: TrialRecord, rec: SchedulerRecommendation) -> bool:
    """The trial ran the recommendation's deployment (with verdict keep: the baseline kept)."""
    return all(getattr(rec.deployment, k, v) == v for k, v in record.params.items())


def trial_choices(res: TuneResult, rec: SchedulerRecommendation | None) -> list[tuple[int, str]]:
    """The feasible trials an interface offers to try (top-ranked first), each named as the verdict
    reads: the trial that ran the recommended settings says "recommended" (with verdict keep: "kept");
    the top-ranked trial is "top-ranked in the search", never "best", and when the verdict keeps the
    baseline or adds capacity instead it says that it is not the one recommended."""
    by_number = {r.number: r for r in res.trials}
    front = {r.number for r in res.pareto_front}
    out: list[tuple[int, str]] = []
    for i, n in enumerate(m for m in res.ranked if m in by_number and by_number[m].feasible):
        record = by_number[n]
        tags = []
        if rec is not None and _is_deployment(record, rec):
            tags.append("kept: the verdict keeps these settings" if rec.verdict == "keep" else "recommended")
        elif i == 0:
            top = "top-ranked in the search"
            if rec is not None and rec.verdict == "keep":
                top += "; not recommended: the verdict keeps the baseline"
            elif rec is not None and rec.verdict == "add_capacity":
                top += "; not recommended: the verdict adds capacity"
            elif rec is not None:
                top += "; the recommendation is the fewest changes that do as well"
            tags.append(top)
        if n in front:
            tags.append("Pareto front")
        p = record.params
        shown = ", ".join(f"{k} {p[k]}" for k in ("max_num_seqs", "max_num_batched_tokens") if k in p)
        out.append((n, f"trial {n}" + "".join(f" ({t})" for t in tags) + (f": {shown}" if shown else "")))
    return out


def breach_text(constraint: str, measured: float, limit: float, excess: float) -> str:
    if constraint.endswith("_p99"):
        name = constraint.replace("_p99", "").upper() + " p99"
        return f"{name} {ms_text(measured)} ms > {ms_text(limit)} ms (+{excess:.0%})"
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


__all__ = [
    "PARAM_COLUMNS",
    "SPEC_COLUMN",
    "breach_text",
    "infeasibility_table",
    "scatter_trials",
    "trial_choices",
    "trials_table",
    "trials_view",
]
