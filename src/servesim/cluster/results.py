"""Cluster results: the whole cluster's figures, each replica's, the moves and their impact."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from servesim.cluster.config import FailureEvent
from servesim.cluster.simulate import ClusterRun
from servesim.engine.admission import admission_summary
from servesim.engine.config import EngineConfig
from servesim.engine.kv_connector import OffloadingConnector
from servesim.engine.pooled import merged_runs, sorted_runs
from servesim.engine.results import (
    SLO,
    LatencyStats,
    LoRASummary,
    OffloadSummary,
    SimulationSummary,
    summarize,
)
from servesim.engine.simulate import (
    event_frame,
    itl_samples,
    lora_summary,
    offload_summary,
    requests_frame,
    steps_frame,
)


class FailureImpact(BaseModel):
    """What failures did to latency: requests that were interrupted vs the others."""

    num_interrupted: int
    num_migrated: int
    num_restarted: int
    tokens_moved: int
    tokens_recomputed: int = Field(description="Tokens the interrupted requests computed again.")
    interrupted_e2e_ms: LatencyStats
    others_e2e_ms: LatencyStats
    interrupted_ttft_ms: LatencyStats


class ClusterSummary(BaseModel):
    cluster: SimulationSummary = Field(description="All requests; step figures averaged over replica steps.")
    replicas: dict[str, SimulationSummary] = Field(description="Requests each replica finished, its steps.")
    impact: FailureImpact
    num_failures: int
    num_parked_unfinished: int = Field(description="Requests no replica was left to serve.")
    offload: ClusterOffload | None = Field(
        None, description="The replicas' CPU offload tiers (``kv_offloading_size``); None without one."
    )
    lora: ClusterLoRA | None = Field(
        None, description="The replicas' LoRA adapters (``enable_lora``); None when none serves any."
    )


class ClusterLoRA(BaseModel):
    """What serving LoRA adapters did over the fleet: each replica's figures (``LoRASummary``:
    its ``max_loras`` skips and adapter loads, every incarnation of it summed) and the fleet's,
    their sums. Each replica applies its own ``max_loras`` and caches its own adapters, so the
    fleet's ``max_loras`` / ``max_cpu_loras`` are the largest replica's, not a sum of slots."""

    fleet: LoRASummary
    replicas: dict[str, LoRASummary] = Field(description="Replicas serving adapters, by name.")


class ClusterOffload(BaseModel):
    """What the replicas' CPU tiers did: the fleet's figures (every tier summed; hit rates over
    the fleet's first admissions) and each replica's (``OffloadSummary`` each)."""

    fleet: OffloadSummary
    replicas: dict[str, OffloadSummary] = Field(description="Replicas with a CPU tier, by name.")


ClusterSummary.model_rebuild()


class ClusterResult:
    """``summary`` (validated), ``requests`` (with the replica that finished each, and how often
    it was moved), ``steps`` (with the replica of each step), ``moves`` and ``preemptions``; for
    the views (``servesim.views.fleet``): each replica's ``configs``, the ``failures`` injected,
    each replica's pooled ITL samples (``itl``: weights, gaps in s, as ``SimulationResult.itl``)
    and the names of the ``recovery`` policy and the ``router`` policy."""

    def __init__(
        self,
        summary: ClusterSummary,
        requests: pd.DataFrame,
        steps: pd.DataFrame,
        moves: pd.DataFrame,
        preemptions: pd.DataFrame,
        *,
        configs: dict[str, EngineConfig] | None = None,
        failures: list[FailureEvent] | None = None,
        itl: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
        recovery: str | None = None,
        router: str | None = None,
    ) -> None:
        self.summary = summary
        self.requests = requests
        self.steps = steps
        self.moves = moves
        self.preemptions = preemptions
        self.configs = dict(configs or {})
        self.failures = list(failures or [])
        self.itl = dict(itl or {})
        self.recovery = recovery
        self.router = router

    def to_pandas(self) -> pd.DataFrame:
        return self.requests


def build_cluster_result(
    run: ClusterRun,
    slo: SLO | None,
    *,
    pooled_itl: bool = True,
    replica_summaries: bool = True,
    recovery: str | None = None,
    router: str | None = None,
) -> ClusterResult:
    """The fleet's result (the two switches: see ``simulate_cluster``; ``recovery``, ``router``:
    the policies' names, for the views)."""
    engines = run.engines
    names = [run.replicas[k].name for k in run.engine_replica]
    requests = requests_frame(engines, run.trace, slo)
    replica_of = (
        requests["replica"].to_numpy() if "replica" in requests else np.zeros(len(requests), np.int64)
    )
    closed_by = np.asarray(replica_of, dtype=np.int64)  # the engine that closed each request, -1: none
    requests["replica"] = pd.Series([names[k] if k >= 0 else None for k in replica_of], dtype=object)
    moves = _moves_frame(run)
    counts = moves["req_id"].value_counts()
    requests["num_moves"] = requests["req_id"].map(counts).fillna(0).astype(np.int64)
    per_engine = _EngineFrames.of(run, names)
    requests["starved"] = requests["req_id"].isin(per_engine.starved)
    steps = pd.concat(per_engine.steps, ignore_index=True)
    preemptions = pd.concat(per_engine.preemptions, ignore_index=True)
    queries = sum(e.rec.prefix_queries for e in engines)
    hits = sum(e.rec.prefix_hits for e in engines)
    caching = any(r.config.enable_prefix_caching for r in run.replicas)
    mml = max(e.max_model_len for e in engines)
    if pooled_itl:
        per_engine.sort_itl()
    cluster = summarize(
        requests,
        steps,
        np.concatenate(per_engine.weights),
        np.concatenate(per_engine.gaps),
        slo,
        queries,
        hits,
        caching,
        mml,
        per_engine.itl(range(len(engines))),
    )
    per_replica = _replica_summaries(run, requests, per_engine, slo, closed_by) if replica_summaries else {}
    gated = [r.config for r in run.replicas if r.config.max_num_queued_reqs is not None]
    gated += [r.config for r in run.replicas if r.config.max_num_queued_tokens is not None]
    if gated:  # each replica's API server answers its own 503s; the fleet's counted together
        cfg = gated[0]
        cluster.admission = admission_summary(requests, cfg.max_num_queued_reqs, cfg.max_num_queued_tokens)
    offload, lora = _offload(run, cluster, requests), _lora(run)
    for key, part in (("offload", offload), ("lora", lora)):  # the fleet's figures, each replica's
        if part is not None:
            setattr(cluster, key, part.fleet)
            for name, figures in part.replicas.items():
                if name in per_replica:
                    setattr(per_replica[name], key, figures)
    summary = ClusterSummary(
        cluster=cluster,
        replicas=per_replica,
        impact=_failure_impact(requests, moves),
        num_failures=len(run.failures),
        num_parked_unfinished=run.parked_at_end,
        offload=offload,
        lora=lora,
    )
    return ClusterResult(
        summary,
        requests,
        steps,
        moves,
        preemptions,
        configs={r.name: r.config for r in run.replicas},
        failures=list(run.failures),
        itl=_replica_itl(run, per_engine) if replica_summaries else {},  # the views' (the tuner reads none)
        recovery=recovery,
        router=router,
    )


def _moves_frame(run: ClusterRun) -> pd.DataFrame:
    """Every move of an interrupted request, one row each, with its columns even when nothing
    moved (the impact and the views count on them)."""
    return pd.DataFrame(
        [m.__dict__ for m in run.moves],
        columns=[
            "req_id",
            "time_s",
            "from_node",
            "to_node",
            "strategy",
            "tokens_moved",
            "recompute_tokens",
            "delay_s",
        ],
    )


class _EngineFrames:
    """Each engine's steps, ITL samples and preemptions tagged with its replica's name, kept per
    engine so the fleet's figures and each replica's are summarized from the same frames."""

    def __init__(self) -> None:
        self.steps: list[pd.DataFrame] = []
        self.weights: list[np.ndarray] = []
        self.gaps: list[np.ndarray] = []
        self.preemptions: list[pd.DataFrame] = []
        self.starved: set[str] = set()
        self.itl_runs: list[tuple[np.ndarray, np.ndarray, int]] = []  # ``sort_itl``'s

    def sort_itl(self) -> None:
        """Each engine's pooled ITL sample in sorted runs (``pooled.sorted_runs``), which the
        fleet's and each replica's pooled ITL then merge (``itl``)."""
        self.itl_runs = [
            sorted_runs(st["duration_s"].to_numpy(dtype=np.float64), w, g)
            for st, w, g in zip(self.steps, self.weights, self.gaps, strict=True)
        ]

    def itl(self, engines: Iterable[int]) -> LatencyStats:
        """The pooled ITL of these engines' steps and gaps: the figures ``itl_stats`` gives on
        their concatenation, from their sorted runs (``pooled.merged_runs``: the fleet's whole
        sample is never sorted at once); empty before ``sort_itl`` (the pooled ITL left out)."""
        if not self.itl_runs:
            return LatencyStats()
        return LatencyStats.of_positive_weights(*merged_runs([self.itl_runs[i] for i in engines]))

    @classmethod
    def of(cls, run: ClusterRun, names: list[str]) -> _EngineFrames:
        out = cls()
        for engine, name in zip(run.engines, names, strict=True):
            st = steps_frame(engine)
            st.insert(0, "replica", name)
            out.steps.append(st)
            w, g = itl_samples(engine)
            out.weights.append(w)
            out.gaps.append(g)
            ev = event_frame(engine.rec.preemption_events, engine.trace)
            ev.insert(0, "replica", name)
            out.preemptions.append(ev)
            out.starved |= set(event_frame(engine.rec.starvation_events, engine.trace)["req_id"])
        return out


def _replica_summaries(
    run: ClusterRun,
    requests: pd.DataFrame,
    per_engine: _EngineFrames,
    slo: SLO | None,
    closed_by: np.ndarray,
) -> dict[str, SimulationSummary]:
    """Each replica's summary over the requests it finished and the steps of its engines (a
    replica restarted after a failure has more than one)."""
    engines = run.engines
    per_replica: dict[str, SimulationSummary] = {}
    # Each row's replica slot (-1: none), from the engine that closed it: a replica's rows are
    # then found by comparing integers, not its name against every row's.
    slot_of_engine = np.asarray([*run.engine_replica, -1], dtype=np.int64)
    slots = slot_of_engine[closed_by] if len(requests) else np.zeros(0, dtype=np.int64)
    for k, spec in enumerate(run.replicas):
        mine = [i for i, kk in enumerate(run.engine_replica) if kk == k]
        per_replica[spec.name] = summarize(
            requests.take(np.flatnonzero(slots == k)).reset_index(drop=True),
            pd.concat([per_engine.steps[i] for i in mine], ignore_index=True),
            np.concatenate([per_engine.weights[i] for i in mine]),
            np.concatenate([per_engine.gaps[i] for i in mine]),
            slo,
            sum(engines[i].rec.prefix_queries for i in mine),
            sum(engines[i].rec.prefix_hits for i in mine),
            spec.config.enable_prefix_caching,
            max(engines[i].max_model_len for i in mine),
            per_engine.itl(mine),
        )
    return per_replica


def _failure_impact(requests: pd.DataFrame, moves: pd.DataFrame) -> FailureImpact:
    """The interrupted requests against the others: what the failures cost, and how the moves
    split between migrated state and cold restarts."""
    moved = requests["num_moves"] > 0
    return FailureImpact(
        num_interrupted=int(moved.sum()),
        num_migrated=int((moves["strategy"] == "MIGRATE_STATE").sum()),
        num_restarted=int((moves["strategy"] == "COLD_RESTART").sum()),
        tokens_moved=int(moves["tokens_moved"].sum()),
        tokens_recomputed=int(requests.loc[moved, "recomputed_tokens"].sum()),
        interrupted_e2e_ms=LatencyStats.of(requests.loc[moved, "e2e_ms"].to_numpy(dtype=np.float64)),
        others_e2e_ms=LatencyStats.of(requests.loc[~moved, "e2e_ms"].to_numpy(dtype=np.float64)),
        interrupted_ttft_ms=LatencyStats.of(requests.loc[moved, "ttft_ms"].to_numpy(dtype=np.float64)),
    )


def _replica_itl(run: ClusterRun, per_engine: _EngineFrames) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each replica's ITL samples (weights, gaps) over its engines, for the views' per-replica
    distributions; a replica that never got an engine has none."""
    return {
        spec.name: (
            np.concatenate([per_engine.weights[i] for i, kk in enumerate(run.engine_replica) if kk == k]),
            np.concatenate([per_engine.gaps[i] for i, kk in enumerate(run.engine_replica) if kk == k]),
        )
        for k, spec in enumerate(run.replicas)
        if k in run.engine_replica
    }


def _lora(run: ClusterRun) -> ClusterLoRA | None:
    """The adapters' figures, per replica (its engines': a restarted replica starts with an empty
    adapter cache, so its loads add up) and the fleet's (None when no replica enables LoRA)."""
    parts: list[list[LoRASummary]] = [[] for _ in run.replicas]
    for engine, k in zip(run.engines, run.engine_replica, strict=True):
        lo = lora_summary(engine)
        if lo is not None:
            parts[k].append(lo)
    per = {spec.name: _summed(parts[k]) for k, spec in enumerate(run.replicas) if parts[k]}
    if not per:
        return None
    return ClusterLoRA(fleet=_summed(list(per.values())), replicas=per)


def _summed(parts: list[LoRASummary]) -> LoRASummary:
    """Several runs' adapter figures as one: skips, loads, reads and their time summed (loads
    None when any part's step time is fixed: nothing timed them), the slots the largest part's."""

    def total(key: str) -> int | None:
        vals = [getattr(p, key) for p in parts]
        return None if any(v is None for v in vals) else int(sum(vals))

    seconds = [p.load_s for p in parts]
    return LoRASummary(
        max_loras=max(p.max_loras for p in parts),
        max_cpu_loras=max(p.max_cpu_loras for p in parts),
        skipped_request_steps=sum(p.skipped_request_steps for p in parts),
        gpu_loads=total("gpu_loads"),
        disk_reads=total("disk_reads"),
        load_s=None if any(v is None for v in seconds) else float(sum(v for v in seconds if v is not None)),
    )


def _offload(run: ClusterRun, cluster: SimulationSummary, requests: pd.DataFrame) -> ClusterOffload | None:
    """The CPU tiers' figures, fleet and per replica (None when no replica has a tier). A
    replica's GPU hit rate counts the first admissions on its engines, its recomputed tokens
    those of the requests it finished (as its summary does)."""
    tiers: list[list[OffloadingConnector]] = [[] for _ in run.replicas]
    queries = [0] * len(run.replicas)
    hits = [0] * len(run.replicas)
    for engine, k in zip(run.engines, run.engine_replica, strict=True):
        queries[k] += engine.rec.prefix_queries
        hits[k] += engine.rec.prefix_hits
        if isinstance(engine.kv_connector, OffloadingConnector):
            tiers[k].append(engine.kv_connector)
    fleet = offload_summary(tiers, cluster.prefix_cache_hit_rate, cluster.recomputed_tokens)
    if fleet is None:
        return None
    recomputed = requests.groupby("replica")["recomputed_tokens"].sum() if len(requests) else None
    per: dict[str, OffloadSummary] = {}
    for k, spec in enumerate(run.replicas):
        caching = spec.config.enable_prefix_caching
        gpu_rate = (hits[k] / queries[k] if queries[k] else 0.0) if caching else None  # as summarize()
        rec = int(recomputed.get(spec.name, 0)) if recomputed is not None else 0
        off = offload_summary([tiers[k]], gpu_rate, rec)
        if off is not None:
            per[spec.name] = off
    return ClusterOffload(fleet=fleet, replicas=per)
