"""The views of a cluster run: the single-run charts for the whole fleet and for each replica,
the failures and recoveries drawn on the time series, and what limits the fleet.

A pure function of the ``ClusterResult`` (``fleet_views``): the web page, ``servesim cluster
--json`` and ``servesim report`` of either draw the same sections.

- Each replica's view is ``simulation_view`` of that replica's own requests and steps (its
  latency histograms, time series, phase breakdown, tokens per step and its bottleneck).
- The fleet's histograms and phase breakdown pool every request (and every replica's ITL
  samples); its time series are time-weighted means per time bin of each replica's step series
  (a replica counts 0 while idle or down), summed over the replicas (KV usage: their mean), with
  each replica as a line of its own.
- Each failure is a shaded outage (down until it recovered, or to the end of the run) labelled
  with the replica, the recovery policy and the requests moved (by MIGRATE, which moved their
  KV, and RECOMPUTE, which restarted them cold), and a mark at its moment; a recovery (and an
  announced failure's warning) is a mark.
- The fleet's bottleneck (``fleet_bottleneck``) reads, in order: requests no replica was left to
  serve (every replica lost), one replica far hotter than the others while all were up (the
  router does not spread the load), the failure (the interrupted requests set the tail, or the
  survivors queued during the outage), then what limits most replicas by their busy time
  (``simulation.bottleneck_limit``: KV blocks, the token budget, max_num_seqs, queueing beyond
  the fleet's compute, or nothing: compute-bound at this load).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from servesim.engine.results import SimulationResult
from servesim.views.glossary import define
from servesim.views.model import (
    Column,
    Histogram,
    Line,
    Mark,
    Section,
    Series,
    Span,
    Table,
    Verdict,
    VerdictStatus,
)
from servesim.views.shape import MAX_POINTS, histogram, rounded, series
from servesim.views.simulation import (
    LATENCIES,
    LIMIT_ACTIONS,
    Limit,
    bottleneck_limit,
    config_table,
    itl_values,
    kpis,
    latency_split_series,
    latency_table,
    simulation_view,
    slo_of,
    slo_verdict,
    totals_table,
)

if TYPE_CHECKING:
    from servesim.cluster.results import ClusterResult

#: A replica is "hot" when its mean queue is at least this many times the others' mean ...
HOT_RATIO = 2.0
#: ... and at least this many requests longer (a queue of 0.2 against 0.05 is no imbalance).
HOT_MIN_QUEUE = 1.0
#: The failure limits the fleet when the interrupted requests' E2E p99 is this many times the
#: others', or the fleet's mean queue during the outages is this many times the rest of the run's.
FAILURE_RATIO = 1.5

#: The recovery strategies as the charts name them.
STRATEGY_WORDS = {"MIGRATE_STATE": "MIGRATE", "COLD_RESTART": "RECOMPUTE"}


def by_replica_name(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``frame``'s rows of each replica (its ``replica`` column), in their order; rows of no
    replica (a request no replica was left to serve) are in none."""
    if "replica" not in frame or not len(frame):
        return {}
    groups = frame.groupby("replica", sort=False).indices
    return {
        str(k): frame.take(np.asarray(v, dtype=np.int64)).reset_index(drop=True) for k, v in groups.items()
    }


def replica_results(result: ClusterResult) -> dict[str, SimulationResult]:
    """Each replica's run as a ``SimulationResult``: the requests it finished, its steps (every
    incarnation, in order), its preemptions, its summary, settings and ITL samples. Empty when
    the run kept no per-replica summaries."""
    out: dict[str, SimulationResult] = {}
    empty = pd.DataFrame({"time_s": pd.Series(dtype=np.float64), "req_id": pd.Series(dtype=object)})
    reqs, steps, pres = (by_replica_name(f) for f in (result.requests, result.steps, result.preemptions))
    for name, summary in result.summary.replicas.items():
        config = result.configs.get(name)
        if config is None:
            continue
        req = reqs.get(name, result.requests.iloc[0:0])
        st = steps.get(name, result.steps.iloc[0:0])
        pre = pres.get(name, result.preemptions.iloc[0:0])
        out[name] = SimulationResult(config, {}, summary, req, st, pre, empty, itl=result.itl.get(name))
    return out


@dataclass(frozen=True)
class Outage:
    """One failure as drawn: when the replica went down, when it came back (None: never), and the
    requests moved off it by strategy."""

    node: str
    down_s: float
    up_s: float | None
    warned_s: float | None
    moved: dict[str, int]

    @property
    def num_moved(self) -> int:
        return sum(self.moved.values())

    def label(self, policy: str | None) -> str:
        """What the outage's shading says: the replica, the recovery policy, the requests moved
        and how (``; `` parts: a renderer may break the line there)."""
        how = ", ".join(f"{STRATEGY_WORDS.get(k, k)} {n:,}" for k, n in sorted(self.moved.items()))
        n = self.num_moved
        return (
            f"{self.node} down"
            + (f" ({policy})" if policy else "")
            + f"; {n:,} request{'' if n == 1 else 's'} moved"
            + (f": {how}" if how else "")
        )


def outages(result: ClusterResult) -> list[Outage]:
    """Each injected failure with the moves off its replica made at its moment (until the
    replica's next failure)."""
    fails = sorted(result.failures, key=lambda f: (f.time_s, f.node))
    moves = result.moves
    out = []
    for i, f in enumerate(fails):
        nxt = next((g.time_s for g in fails[i + 1 :] if g.node == f.node), np.inf)
        mine = moves[(moves["from_node"] == f.node) & (moves["time_s"] >= f.time_s) & (moves["time_s"] < nxt)]
        counts = {str(k): int(v) for k, v in mine["strategy"].value_counts().items()}
        out.append(
            Outage(
                node=f.node,
                down_s=float(f.time_s),
                up_s=float(f.time_s + f.recover_after_s) if f.recover_after_s else None,
                warned_s=float(f.time_s - f.warning_s) if f.warning_s else None,
                moved=counts,
            )
        )
    return out


def run_end(result: ClusterResult) -> float:
    """When the run ends for its charts: its last step's end or its last arrival, the later (a
    failure after both changed nothing)."""
    st, req = result.steps, result.requests
    ends = [float((st["start_s"] + st["duration_s"]).max())] if len(st) else []
    if len(req) and "arrival_s" in req:
        ends.append(float(req["arrival_s"].max()))
    return max(ends, default=0.0)


def failure_marks(found: list[Outage], policy: str | None, end_s: float) -> dict[str, Any]:
    """The ``marks`` and ``spans`` that draw the failures on a time series (up to ``end_s``, the
    ``run_end``: an outage still on then is shaded to it)."""
    marks: list[Mark] = []
    spans: list[Span] = []
    for o in found:
        if o.down_s > end_s:  # after the run (``run_end``): it changed nothing, and is not drawn
            continue
        if o.warned_s is not None:
            marks.append(Mark(x=o.warned_s, label=f"{o.node} warned"))
        marks.append(Mark(x=o.down_s, label=f"{o.node} down at {o.down_s:g} s"))
        back = o.up_s is not None and o.up_s <= end_s
        up = o.up_s if back and o.up_s is not None else end_s
        spans.append(Span(x0=o.down_s, x1=up, label=o.label(policy)))
        if back:
            marks.append(Mark(x=up, label=f"{o.node} back (empty)"))
    return {"marks": marks, "spans": spans}


def _step_frames(result: ClusterResult, by_replica: dict[str, SimulationResult]) -> dict[str, pd.DataFrame]:
    """Each replica's steps (those of ``by_replica`` when given)."""
    if by_replica:
        return {k: r.steps for k, r in by_replica.items()}
    return by_replica_name(result.steps)


def _bin_means(steps: pd.DataFrame, column: str, grid: np.ndarray) -> np.ndarray:
    """The time-weighted mean of ``column`` over each bin of ``grid`` (each step's value holds
    while it runs; 0 between steps: idle, or the replica down)."""
    if not len(steps):
        return np.zeros(len(grid) - 1)
    s = steps["start_s"].to_numpy(dtype=np.float64)
    order = np.argsort(s, kind="stable")
    s = s[order]
    d = steps["duration_s"].to_numpy(dtype=np.float64)[order]
    v = steps[column].to_numpy(dtype=np.float64)[order]
    cum = np.concatenate([[0.0], np.cumsum(v * d)])
    j = np.searchsorted(s, grid, side="right") - 1  # the last step started at or before each edge
    jj = np.clip(j, 0, None)
    area = np.where(j >= 0, cum[jj] + v[jj] * np.clip(grid - s[jj], 0.0, d[jj]), 0.0)
    return np.diff(area) / np.diff(grid)


@dataclass(frozen=True)
class _Grid:
    edges: np.ndarray

    @property
    def x(self) -> np.ndarray:
        return self.edges[:-1]

    @property
    def width(self) -> float:
        return float(self.edges[1] - self.edges[0])


def _grid(steps: pd.DataFrame, max_points: int) -> _Grid | None:
    if not len(steps):
        return None
    t0 = float(steps["start_s"].min())
    t1 = float((steps["start_s"] + steps["duration_s"]).max())
    if t1 <= t0:
        t1 = t0 + 1.0
    bins = min(max(10, max_points // 3), max(1, len(steps)))
    return _Grid(np.linspace(t0, t1, bins + 1))


def _with_lines(s: Series, lines: dict[str, np.ndarray], name: str, extra: dict[str, Any]) -> Series:
    return s.model_copy(
        update={
            "name": name,
            "lines": [Line(label=k, y=rounded(y)) for k, y in lines.items()],
            **extra,
        }
    )


def _per_bin_series(
    st: pd.DataFrame, frames: dict[str, pd.DataFrame], grid: _Grid, points: int, drawn: dict[str, Any]
) -> list[Series]:
    """What happens at an instant rather than over time, counted per bin: preemptions by the
    step that preempted, output tokens by the step that finished them (as a rate), the fleet's
    sum with each replica a line."""
    out: list[Series] = []
    ends = {k: (f["start_s"] + f["duration_s"]).to_numpy(dtype=np.float64) for k, f in frames.items()}

    def binned(frame: pd.DataFrame, when: np.ndarray, column: str) -> np.ndarray:
        k = np.clip(np.searchsorted(grid.edges, when, side="right") - 1, 0, len(grid.x) - 1)
        return np.bincount(k, weights=frame[column].to_numpy(dtype=np.float64), minlength=len(grid.x))

    pre = {k: binned(f, f["start_s"].to_numpy(dtype=np.float64), "num_preempted") for k, f in frames.items()}
    total_pre = int(st["num_preempted"].sum())
    pre_s = series(
        "preemptions",
        f"preemptions per time bin, fleet ({total_pre:,} in all)",
        grid.x,
        np.sum(list(pre.values()), axis=0),
        y_label="preemptions",
        kind="bar",
        max_points=points,
        help=define("preemptions"),
    )
    out.append(pre_s.model_copy(update={"name": "fleet", **drawn}))
    toks = {k: binned(f, ends[k], "num_decodes") / grid.width for k, f in frames.items()}
    thr = series(
        "output_tokens_per_s",
        "output tokens per second, fleet",
        grid.x,
        np.sum(list(toks.values()), axis=0),
        y_label="tokens/s",
        y_unit="tok/s",
        max_points=points,
        help=define("output_token_throughput"),
    )
    out.append(_with_lines(thr, toks, "fleet", drawn))
    return out


def fleet_series(
    result: ClusterResult, by_replica: dict[str, SimulationResult], max_points: int = MAX_POINTS
) -> list[Series]:
    """The fleet's time series (each replica a line of its own) and its phase breakdown, with the
    failures drawn on every time series."""
    st = result.steps
    grid = _grid(st, max_points)
    out: list[Series] = []
    if grid is None:
        return out
    frames = _step_frames(result, by_replica)
    drawn = failure_marks(outages(result), result.recovery, run_end(result))
    n = len(frames)
    # Time series binned on one grid: never more points than bins, so no down-sampling either.
    points = len(grid.x) + 1

    def counted(key: str, column: str, title: str, y_label: str, help_key: str) -> Series:
        per = {k: _bin_means(f, column, grid.edges) for k, f in frames.items()}
        total = np.sum(list(per.values()), axis=0)
        base = series(
            key,
            f"{title}, fleet ({n} replicas summed)",
            grid.x,
            total,
            y_label=y_label,
            kind="step",
            max_points=points,
            help=(define(help_key) or "") + " Summed over the replicas: the time-weighted mean in each bin.",
        )
        return _with_lines(base, per, "fleet", drawn)

    out.append(counted("num_waiting", "num_waiting", "waiting queue", "requests waiting", "num_waiting"))
    out.append(counted("num_running", "num_running", "running batch", "requests running", "num_running"))
    per_kv = {k: _bin_means(f, "kv_usage", grid.edges) for k, f in frames.items()}
    kv = series(
        "kv_usage",
        f"KV-cache usage, mean over the {n} replicas",
        grid.x,
        np.mean(list(per_kv.values()), axis=0),
        y_label="share of blocks",
        kind="step",
        max_points=points,
        reference=1.0,
        reference_label="every usable block",
        help=(define("kv_usage") or "") + " Each replica's time-weighted mean per bin (0 while down).",
    )
    out.append(_with_lines(kv, per_kv, "fleet mean", drawn))
    out.extend(_per_bin_series(st, frames, grid, points, drawn))
    split = latency_split_series(result.requests)
    if split is not None:
        out.append(split)
    return out


def fleet_histograms(
    result: ClusterResult, by_replica: dict[str, SimulationResult], bins: int = 40
) -> list[Histogram]:
    """The latency histograms of every request of the fleet (SLO marked) and the fleet's tokens
    per step against the replicas' budget."""
    s = result.summary.cluster
    req = result.requests
    out = []
    for key, label, slo_field in LATENCIES:
        st = getattr(s, key)
        pct = (st.p50, st.p90, st.p99) if st.count else (None, None, None)
        weights: np.ndarray | None = None
        if key == "itl_ms":
            parts = [itl_values(r) for r in by_replica.values()]
            values = np.concatenate([v for v, _ in parts]) if parts else np.zeros(0)
            if parts and all(w is not None for _, w in parts):
                weights = np.concatenate([w for _, w in parts if w is not None])
        else:
            values = req[key].to_numpy(dtype=np.float64)
        out.append(
            histogram(
                key,
                f"{label} distribution, fleet",
                values,
                "ms",
                bins=bins,
                weights=weights,
                slo=slo_of(s.slo, slo_field),
                help=define(key),
                percentiles=pct,
                label=label,
                count_label="token gaps" if key == "itl_ms" else "requests",
            )
        )
    if len(result.steps) and result.configs:
        toks = result.steps["num_tokens"].to_numpy(dtype=np.float64)
        budget = max(int(c.max_num_batched_tokens) for c in result.configs.values())
        p50, p90, p99 = (float(np.percentile(toks, q)) for q in (50, 90, 99))
        out.append(
            histogram(
                "num_tokens",
                f"tokens per step, fleet: mean {float(toks.mean()):,.0f} of a {budget:,} budget",
                toks,
                "tokens",
                bins=bins,
                help=define("num_tokens"),
                percentiles=(p50, p90, p99),
                value_range=(0.0, max(float(budget), float(toks.max()))),
                label="step size",
                count_label="steps",
                reference=float(budget),
                reference_label=f"max_num_batched_tokens {budget:,}",
            )
        )
    return out


@dataclass(frozen=True)
class ReplicaLoad:
    """How loaded one replica was: its limit, busy share over the time it was up, and its mean
    queue while every replica was up (the router's doing, not a failure's)."""

    name: str
    limit: Limit
    finished: int
    up_s: float
    busy_share: float
    mean_waiting: float


def _inside(mid: np.ndarray, found: list[Outage]) -> np.ndarray:
    """Which bin centres fall in an outage."""
    inside = np.zeros(len(mid), dtype=bool)
    for o in found:
        inside |= (mid >= o.down_s) & (mid < (o.up_s if o.up_s is not None else np.inf))
    return inside


def replica_loads(result: ClusterResult, by_replica: dict[str, SimulationResult]) -> list[ReplicaLoad]:
    st = result.steps
    grid = _grid(st, 3 * MAX_POINTS)
    if grid is None:
        return []
    t0, t1 = float(grid.edges[0]), float(grid.edges[-1])
    found = outages(result)
    everyone_up = ~_inside(grid.x + grid.width / 2, found)
    out = []
    for name, r in by_replica.items():
        down = sum(
            max(0.0, min(o.up_s if o.up_s is not None else t1, t1) - max(o.down_s, t0))
            for o in found
            if o.node == name
        )
        up = max(t1 - t0 - down, 1e-9)
        waiting = _bin_means(r.steps, "num_waiting", grid.edges)
        out.append(
            ReplicaLoad(
                name=name,
                limit=bottleneck_limit(r),
                finished=r.summary.num_finished,
                up_s=up,
                busy_share=min(1.0, float(r.steps["duration_s"].sum()) / up),
                mean_waiting=float(waiting[everyone_up].mean() if everyone_up.any() else waiting.mean()),
            )
        )
    return out


def _limit_words(lim: Limit) -> str:
    if lim.name == "none":
        return "no limit (compute)"
    if lim.name in LIMIT_ACTIONS:
        return f"{lim.name} ({lim.share:.0%} of its waiting)"
    return lim.name


def load_table(loads: list[ReplicaLoad], by_replica: dict[str, SimulationResult]) -> Table:
    """Each replica's share of the work, how busy it was, its queue, tail latency and limit."""
    total = sum(x.finished for x in loads) or 1
    cols = [
        Column(key="replica", label="replica", kind="str"),
        Column(key="finished", label="finished", kind="int"),
        Column(key="share", label="share of requests", kind="pct"),
        Column(key="busy", label="busy while up", kind="pct", help="Step time over the time it was up."),
        Column(
            key="mean_waiting",
            label="mean queue",
            unit="requests",
            decimals=2,
            help="Requests waiting, time-weighted, while every replica was up.",
        ),
        Column(key="ttft_p99_ms", label="TTFT p99", unit="ms", help=define("ttft_ms")),
        Column(key="e2e_p99_ms", label="E2E p99", unit="ms", help=define("e2e_ms")),
        Column(key="limit", label="its bottleneck", kind="str"),
    ]
    rows: list[list[Any]] = []
    for x in loads:
        s = by_replica[x.name].summary
        rows.append(
            [
                x.name,
                x.finished,
                x.finished / total,
                x.busy_share,
                x.mean_waiting,
                s.ttft_ms.p99 if s.ttft_ms.count else None,
                s.e2e_ms.p99 if s.e2e_ms.count else None,
                _limit_words(x.limit),
            ]
        )
    return Table(key="replicas", title="load per replica", columns=cols, rows=rows)


def _outage_queue(
    result: ClusterResult, by_replica: dict[str, SimulationResult], found: list[Outage]
) -> tuple[float, float]:
    """The fleet's mean waiting queue during the outages and during the rest of the run."""
    grid = _grid(result.steps, 3 * MAX_POINTS)
    if grid is None or not found:
        return 0.0, 0.0
    frames = _step_frames(result, by_replica)
    total = np.sum([_bin_means(f, "num_waiting", grid.edges) for f in frames.values()], axis=0)
    inside = _inside(grid.x + grid.width / 2, found)
    during = float(total[inside].mean()) if inside.any() else 0.0
    rest = float(total[~inside].mean()) if (~inside).any() else 0.0
    return during, rest


def fleet_bottleneck(
    result: ClusterResult,
    by_replica: dict[str, SimulationResult],
    loads: list[ReplicaLoad] | None = None,
    router: str | None = None,
) -> Verdict:
    """What limits the fleet, from the data (see the module docstring for the order)."""
    loads = replica_loads(result, by_replica) if loads is None else loads
    if not by_replica and len(result.steps):
        return _bottleneck("info", "the run kept no per-replica figures to read it from")
    parked = result.summary.num_parked_unfinished
    if parked:
        lost = ", ".join(f"{o.node} at {o.down_s:g} s" for o in outages(result))
        return _bottleneck(
            "fail",
            f"the failure: no replica was left to serve {parked:,} requests (lost: {lost}); "
            "more replicas, or replicas that recover, serve them",
        )
    busy = [x for x in loads if x.limit.name != "idle"]
    if not busy:
        return _bottleneck("info", "no traffic: nothing limits the fleet")
    found = outages(result)
    hot = _hot_replica(loads, found, router) if len(loads) >= 2 else None
    if hot is not None:
        return hot
    failure = _failure_bottleneck(result, by_replica, found) if found else None
    if failure is not None:
        return failure
    return _binding_limit(busy, len(loads))


def _bottleneck(status: VerdictStatus, text: str) -> Verdict:
    """The fleet-bottleneck verdict: one key and label whichever rule found it."""
    return Verdict(key="fleet_bottleneck", label="fleet bottleneck", status=status, text=text)


def _hot_replica(loads: list[ReplicaLoad], found: list[Outage], router: str | None) -> Verdict | None:
    """One replica queueing far more than the others: the router, not the fleet's size, is what
    limits it (checked first, since adding replicas would not help); None when the load is even."""
    n = len(loads)
    total = sum(x.finished for x in loads) or 1
    hot = max(loads, key=lambda x: x.mean_waiting)
    others = [x for x in loads if x is not hot]
    rest = float(np.mean([x.mean_waiting for x in others]))
    if hot.mean_waiting >= HOT_MIN_QUEUE and hot.mean_waiting >= HOT_RATIO * rest + 1e-12:
        return _bottleneck(
            status="warn",
            text=f"one replica hot: {hot.name} held a mean queue of {hot.mean_waiting:,.1f} requests "
            f"against {rest:,.1f} on the other {len(others)}"
            + (" while every replica was up" if found else "")
            + f", busy {hot.busy_share:.0%} of its time "
            f"(the others {float(np.mean([x.busy_share for x in others])):.0%}), and finished "
            f"{hot.finished / total:.0%} of the requests (an even split is {1 / n:.0%}); "
            f"its own limit: {_limit_words(hot.limit)}. The router"
            + (f" ({router})" if router else "")
            + " does not spread the load to the replicas' capacity: try least_outstanding or least_kv",
        )
    return None


def _failure_bottleneck(
    result: ClusterResult, by_replica: dict[str, SimulationResult], found: list[Outage]
) -> Verdict | None:
    """The outages as the limit when they show: the interrupted requests' tail far above the
    others', or the survivors queueing during the outage; None when the fleet absorbed them."""
    impact = result.summary.impact
    inter, others_e2e = impact.interrupted_e2e_ms, impact.others_e2e_ms
    during, rest_q = _outage_queue(result, by_replica, found)
    tail = inter.count > 0 and others_e2e.count > 0 and inter.p99 >= FAILURE_RATIO * others_e2e.p99
    queued = during >= HOT_MIN_QUEUE and during >= FAILURE_RATIO * rest_q
    if tail or queued:
        moved = ", ".join(f"{o.node} at {o.down_s:g} s ({o.num_moved:,} moved)" for o in found)
        why = []
        if tail:
            why.append(
                f"the {inter.count:,} interrupted requests' E2E p99 is {inter.p99:,.0f} ms against "
                f"{others_e2e.p99:,.0f} ms for the others"
            )
        if queued:
            why.append(
                f"the survivors queued {during:,.1f} requests on average during the outage against "
                f"{rest_q:,.1f} the rest of the run"
            )
        return _bottleneck(
            status="warn",
            text=f"the failure: {moved}; "
            + " and ".join(why)
            + "; "
            + (
                "cheaper recovery (migrate KV, a faster link) shortens the interrupted requests' tail"
                if tail
                else "spare capacity on the survivors (another replica) absorbs the outage"
            ),
        )
    return None


def _binding_limit(busy: list[ReplicaLoad], n: int) -> Verdict:
    """The scheduler limit that bound for most of the busy replicas' time (weighted by busy time),
    or plain compute or queueing when none did, with the knob that relaxes it."""
    weights: dict[str, float] = {}
    for x in busy:
        weights[x.limit.name] = weights.get(x.limit.name, 0.0) + x.busy_share * x.up_s
    name = max(weights, key=lambda k: weights[k])
    which = [x for x in busy if x.limit.name == name]
    who = ", ".join(
        f"{x.name} {x.limit.share_queued:.0%}" for x in which
    )  # share of its busy time with a queue
    of = f"{len(which)} of {n} replicas"
    if name == "none":
        return _bottleneck(
            "pass",
            text=f"compute-bound, no scheduler limit: on {of} requests waited in under 5 % of the busy time "
            f"({who}); latency is the model's compute (a faster GPU or more TP lowers it)",
        )
    if name == "queueing":
        return _bottleneck(
            "warn",
            text=f"queueing: on {of} requests waited with no scheduler limit binding (share of the busy "
            f"time with a queue: {who}); the arrival rate is beyond the fleet's compute: add replicas",
        )
    return _bottleneck(
        status="warn",
        text=f"{'KV-bound' if name == 'KV cache' else name + '-bound'}: {name} was the binding limit on "
        f"{of} (share of the busy time with a queue: {who}); try {LIMIT_ACTIONS[name]}",
    )


def fleet_views(
    result: ClusterResult,
    *,
    title: str | None = None,
    router: str | None = None,
    bins: int = 40,
    max_points: int = MAX_POINTS,
    percentile: str = "p99",
) -> list[Section]:
    """The fleet's section (key ``fleet``: KPIs, tables, histograms, time series with the
    failures, the SLO verdict and ``fleet_bottleneck``) then one per replica (key
    ``replica.<name>``: its ``simulation_view`` with the failures drawn on its series).
    ``router``: the router's name the verdict cites (default: the one the run recorded)."""
    by_replica = replica_results(result)
    s = result.summary.cluster
    n = len(result.configs) or len(by_replica)
    loads = replica_loads(result, by_replica)
    config = next(iter(result.configs.values()), None)
    tables = [latency_table(s, "latency, fleet"), totals_table(s)]
    if by_replica:
        tables.append(load_table(loads, by_replica))
    if config is not None and all(c == config for c in result.configs.values()):
        tables.append(config_table(config, s.max_model_len))
    verdicts = [slo_verdict(s)] if s.slo is not None else []
    verdicts.append(fleet_bottleneck(result, by_replica, loads, router or result.router))
    fleet = Section(
        key="fleet",
        title=title or f"fleet of {n} replicas",
        kpis=kpis(s, percentile),
        tables=tables,
        histograms=fleet_histograms(result, by_replica, bins),
        series=fleet_series(result, by_replica, max_points),
        verdicts=verdicts,
        text=[] if s.num_requests else ["no requests: nothing to measure"],
    )
    out = [fleet]
    drawn = failure_marks(outages(result), result.recovery, run_end(result))
    # Many replicas: fewer points each, so the whole document stays small.
    per_points = max_points if len(by_replica) <= 4 else max(120, 4 * max_points // len(by_replica))
    for name, r in by_replica.items():
        view = simulation_view(r, title=f"replica {name}", bins=bins, max_points=per_points)
        marked = [
            x.model_copy(update=drawn) if x.x_label == "time" and x.key != "latency_split" else x
            for x in view.series
        ]
        out.append(view.model_copy(update={"key": f"replica.{name}", "series": marked}))
    return out


__all__ = [
    "Outage",
    "ReplicaLoad",
    "by_replica_name",
    "failure_marks",
    "fleet_bottleneck",
    "fleet_histograms",
    "fleet_series",
    "fleet_views",
    "load_table",
    "outages",
    "replica_loads",
    "replica_results",
    "run_end",
]


def fleet_sections(result: ClusterResult, replicas: int, recovery: str) -> list[Section]:
    """The fleet's and each replica's views of one run, titled as every interface titles them
    (``servesim cluster``, the dashboard and the web write the same ``sections``)."""
    how = "no failure" if recovery == "no failure" else f"{recovery} recovery"
    return fleet_views(result, title=f"fleet of {replicas} replicas, {how}")
