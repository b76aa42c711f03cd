"""``servesim cluster``: a trace over several replicas with injected node failures, comparing how
interrupted requests are recovered (always migrate, always restart, or the planner per job)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console
from rich.markup import escape

from servesim.bounds import MAX_REPLICAS
from servesim.cli.common import print_json, request_slo
from servesim.cli.engine_flags import file_settings
from servesim.cli.simulate_cmd import TRACE_HELP
from servesim.cli.trace_input import hash_block_size_option, provenance_json, read_trace, strict_option
from servesim.cluster import (
    POLICIES,
    ClusterResult,
    FailureEvent,
    FailurePlan,
    KVCheckpointing,
    RecoveryContext,
    Replica,
    RouterSpec,
    failure_schedule,
    simulate_cluster,
)
from servesim.errors import ConfigError, InputError, describe, shown
from servesim.perf import load_catalog
from servesim.perf.catalog import resolve_model
from servesim.perf.setup import DEFAULT_GPU
from servesim.report.documents import stamped
from servesim.spec import DeploymentSpec, resolve
from servesim.traces import Trace
from servesim.traces.schema import TraceProvenance


class LinkSpec(BaseModel):
    """What moving KV costs: the served model (its KV bytes per token) and the network."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = Field("llama-3.1-8b", description="Catalog name of the served model.")
    tp: int = Field(1, ge=1, description="Tensor-parallel degree of a replica.")
    bandwidth_gbps: float = Field(10.0, gt=0, description="Link per TP rank between replicas, Gbit/s.")
    transfer_efficiency: float = Field(0.9, gt=0, le=1)
    setup_latency_ms: float = Field(10.0, ge=0)
    kv_checkpointing: KVCheckpointing = "continuous"

    def context(self) -> RecoveryContext:
        return RecoveryContext(
            model=resolve_model(self.model, load_catalog()),
            tp=self.tp,
            bandwidth_gbps=self.bandwidth_gbps,
            transfer_efficiency=self.transfer_efficiency,
            setup_latency_s=self.setup_latency_ms / 1000.0,
        )


class ClusterFile(BaseModel):
    """``--cluster FILE``: replicas (vLLM keys each), router, and the link for KV migration."""

    model_config = ConfigDict(extra="forbid")
    replicas: list[dict[str, Any]] = Field(
        min_length=1, max_length=MAX_REPLICAS, description="Each: name, and vLLM keys (config)."
    )
    router: RouterSpec = Field(default_factory=RouterSpec)
    link: LinkSpec = Field(default_factory=LinkSpec)


class StrategyOutcome(BaseModel):
    """One recovery strategy's results, for the comparison table and ``--json``."""

    strategy: str
    num_finished: int
    num_unfinished: int
    ttft_p99_ms: float
    e2e_p99_ms: float
    interrupted: int
    interrupted_e2e_p99_ms: float
    migrated: int
    restarted: int
    tokens_recomputed: int
    gb_moved: float


def parse_fail(text: str) -> FailureEvent:
    """``NODE@TIME`` or ``NODE@TIME+RECOVER_AFTER`` (seconds)."""
    node, sep, rest = text.partition("@")
    if not sep or not node:
        raise InputError(f"--fail {shown(text)}: use NODE@TIME or NODE@TIME+RECOVER_AFTER (seconds)")
    when, plus, back = rest.partition("+")
    try:
        return FailureEvent(node=node, time_s=float(when), recover_after_s=float(back) if plus else None)
    except ValueError as e:
        raise InputError(f"--fail {shown(text)}: {e}") from None


def outcome(name: str, result: ClusterResult, ctx: RecoveryContext) -> StrategyOutcome:
    """One row of the comparison (GB moved: the KV-bytes formula over all TP ranks)."""
    s = result.summary
    return StrategyOutcome(
        strategy=name,
        num_finished=s.cluster.num_finished,
        num_unfinished=s.cluster.num_unfinished,
        ttft_p99_ms=s.cluster.ttft_ms.p99,
        e2e_p99_ms=s.cluster.e2e_ms.p99,
        interrupted=s.impact.num_interrupted,
        interrupted_e2e_p99_ms=s.impact.interrupted_e2e_ms.p99,
        migrated=s.impact.num_migrated,
        restarted=s.impact.num_restarted,
        tokens_recomputed=s.impact.tokens_recomputed,
        gb_moved=ctx.bytes_total(s.impact.tokens_moved) / 1e9,
    )


def cluster_document(
    events: list[FailureEvent],
    link: LinkSpec,
    route: RouterSpec,
    rows: list[StrategyOutcome],
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``servesim cluster --json``: the failures, link, router and one row per strategy (plus
    optional sections such as the planner's per-request ``decisions``)."""
    return {
        "failures": [e.model_dump(mode="json") for e in events],
        "link": link.model_dump(mode="json"),
        "router": route.model_dump(mode="json"),
        "strategies": [r.model_dump(mode="json") for r in rows],
        **(extra or {}),
    }


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{path}: {e}") from e


def register(app: typer.Typer) -> None:
    @app.command("cluster")
    def cluster_cmd(
        trace: str = typer.Argument(..., help=TRACE_HELP),
        replicas: int = typer.Option(
            2, "--replicas", min=1, max=MAX_REPLICAS, help="Identical replicas n0..n{N-1}."
        ),
        config: Path | None = typer.Option(None, "--config", "-c", help="vLLM keys for every replica."),
        cluster: Path | None = typer.Option(None, help="YAML/JSON with replicas, router and context."),
        router: str | None = typer.Option(None, help="Router policy (default least_outstanding)."),
        failures: Path | None = typer.Option(None, help="JSON/YAML list of failure events."),
        fail_at: list[str] = typer.Option([], "--fail", help="NODE@TIME[+RECOVER_AFTER], repeatable."),
        mtbf_s: float | None = typer.Option(None, help="Random failures per node with this MTBF (seconds)."),
        warning_s: float = typer.Option(0.0, help="Failures are announced this long before (MTBF mode)."),
        recover_after_s: float | None = typer.Option(None, help="Failed nodes come back after (MTBF mode)."),
        recovery: str = typer.Option(
            "compare", help=f"compare (baseline and every strategy), or one of: {', '.join(POLICIES)}."
        ),
        kv_checkpointing: str | None = typer.Option(None, help="none | on_warning | continuous."),
        model: str | None = typer.Option(
            None, help="Served model: its KV size, and with it roofline step times and KV blocks per replica."
        ),
        gpu: str | None = typer.Option(None, help=f"GPU of every replica; default {DEFAULT_GPU}."),
        tp: int | None = typer.Option(None, help="Tensor-parallel degree of a replica."),
        bandwidth_gbps: float | None = typer.Option(None, help="Link per TP rank between replicas, Gbit/s."),
        step_time_ms: float | None = typer.Option(
            None, help="Every step takes this long instead of the model's roofline step times."
        ),
        linear_step_time: bool = typer.Option(
            False, help="servesim's linear step model (uncalibrated) instead of the model's."
        ),
        slo: str | None = typer.Option(
            None, help="p99 caps, also per-request goodput thresholds: ttft_p99_ms=500,tpot_p99_ms=50."
        ),
        seed: int = typer.Option(0, help="Seed for generated traces, random routers and MTBF failures."),
        num_requests: int | None = typer.Option(None, "--num-requests", "-n", help="Requests (presets)."),
        strict: bool = strict_option(),
        hash_block_size: int | None = hash_block_size_option(),
        as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON only."),
    ) -> None:
        """Run a trace on a cluster with node failures; compare recovery strategies on p99 TTFT/E2E."""
        tr = read_trace(
            trace, seed=seed, num_requests=num_requests, strict=strict, hash_block_size=hash_block_size
        )
        reps_keys, route, link = _cluster_setup(cluster, config, replicas)
        if router is not None:
            route = RouterSpec.model_validate({**route.model_dump(), "policy": router, "seed": seed})
        updates = {
            k: v
            for k, v in (
                ("kv_checkpointing", kv_checkpointing),
                ("model", model),
                ("tp", tp),
                ("bandwidth_gbps", bandwidth_gbps),
            )
            if v is not None
        }
        link = LinkSpec.model_validate({**link.model_dump(), **updates})
        ctx = link.context()
        if (step_time_ms is not None or linear_step_time) and (model is not None or gpu is not None):
            raise InputError(
                "--model/--gpu choose roofline step times; --step-time-ms / --linear-step-time "
                "replace them: give one or the other"
            )
        # Each replica through servesim.spec.resolve: vllm serve's defaults on the GPU, KV sized.
        hardware = DeploymentSpec(
            model=None if step_time_ms is not None or linear_step_time else link.model,
            gpu=gpu,
            tp=None if step_time_ms is not None or linear_step_time else link.tp,
            step_time_ms=step_time_ms,
            linear_step_time=linear_step_time,
        )
        setups = [_resolve_replica(hardware, name, keys, tr) for name, keys in reps_keys]
        reps = [Replica(name, s.config, s.step_time) for (name, _), s in zip(reps_keys, setups, strict=True)]
        timed_as = setups[0].timed_as + ("" if len(setups) == 1 else " (each replica)")
        defaults_line = setups[0].defaults_line
        events = _failure_events(failures, fail_at, mtbf_s, warning_s, recover_after_s, seed, reps, tr)
        goal = request_slo(slo)
        if recovery != "compare" and recovery not in POLICIES:
            raise InputError(
                f"unknown recovery {shown(recovery)}; use compare or one of {', '.join(POLICIES)}"
            )
        for note in dict.fromkeys(n for s in setups for n in s.notes):  # once the input is known good
            typer.echo(f"warning: {note}", err=True)
        names = list(POLICIES) if recovery == "compare" else [recovery]
        rows: list[StrategyOutcome] = []
        common: dict[str, Any] = {"context": ctx, "kv_checkpointing": link.kv_checkpointing, "slo": goal}
        if recovery == "compare":
            rows.append(outcome("no failure", simulate_cluster(tr, reps, route, (), **common), ctx))
        for name in names:
            rows.append(
                outcome(name, simulate_cluster(tr, reps, route, events, recovery=name, **common), ctx)
            )
        if not as_json:
            typer.echo(f"timed as: {timed_as}")
            if defaults_line:
                typer.echo(defaults_line)
        print_comparison(
            rows,
            events,
            link,
            route,
            as_json,
            f"{trace}: {len(tr):,} requests on {len(reps)} replicas",
            tr.provenance,
        )


def print_comparison(
    rows: list[StrategyOutcome],
    events: list[FailureEvent],
    link: LinkSpec,
    route: RouterSpec,
    as_json: bool,
    title: str,
    provenance: TraceProvenance | None = None,
) -> None:
    """The strategies' outcomes: the table, or with ``--json`` the comparison alone on stdout
    (with the trace's provenance: every row dropped while reading it)."""
    if as_json:
        doc = {**cluster_document(events, link, route, rows), "trace_provenance": provenance_json(provenance)}
        print_json(stamped("cluster", doc))
        return
    from servesim.cli.render import print_section
    from servesim.views.cluster import cluster_view

    console = Console()
    console.print(escape(title), highlight=False)
    print_section(cluster_view(cluster_document(events, link, route, rows)), console)


def _resolve_replica(hardware: DeploymentSpec, name: str, keys: dict[str, Any], trace: Trace) -> Any:
    """One replica through ``servesim.spec.resolve`` (an error names the replica)."""
    try:
        spec = DeploymentSpec.model_validate({**hardware.model_dump(), "engine": keys})
        return resolve(spec, max_model_len=trace.default_max_model_len())
    except (ConfigError, ValidationError) as e:
        raise ConfigError(f"replica {shown(name)}: {describe(e)}") from None


def _cluster_setup(
    cluster: Path | None, config: Path | None, n: int
) -> tuple[list[tuple[str, dict[str, Any]]], RouterSpec, LinkSpec]:
    """Each replica's name and the vLLM keys it sets (a ``--cluster`` file's, else ``--config``'s
    for ``n`` identical replicas), the router and the link."""
    if cluster is not None:
        spec = ClusterFile.model_validate(_load_yaml(cluster))
        reps = []
        for i, r in enumerate(spec.replicas):
            keys = dict(r)
            name = str(keys.pop("name", f"n{i}"))
            settings = keys.get("config", keys)
            if not isinstance(settings, dict):
                raise InputError(f"{cluster}: replica {shown(name)}: config must be a mapping of vLLM keys")
            reps.append((name, {str(k).replace("-", "_"): v for k, v in settings.items()}))
        return reps, spec.router, spec.link
    keys = file_settings(config)
    return [(f"n{i}", dict(keys)) for i in range(n)], RouterSpec(), LinkSpec()


def _failure_events(
    path: Path | None,
    fail_at: list[str],
    mtbf_s: float | None,
    warning_s: float,
    recover_after_s: float | None,
    seed: int,
    reps: list[Replica],
    trace: Trace,
) -> list[FailureEvent]:
    events = [parse_fail(x) for x in fail_at]
    if path is not None:
        data = _load_yaml(path)
        items = data.get("events", data) if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise InputError(f"{path}: expected a list of failure events")
        events += [FailureEvent.model_validate(x) for x in items]
    if mtbf_s is not None:
        horizon = float(trace.df["arrival_time_s"].max()) if len(trace) else 0.0
        events += failure_schedule(
            [r.name for r in reps],
            horizon,
            mtbf_s,
            warning_s=warning_s,
            recover_after_s=recover_after_s,
            seed=seed,
        )
    events.sort(key=lambda e: (e.time_s, e.node))
    FailurePlan(events=events)
    return events
