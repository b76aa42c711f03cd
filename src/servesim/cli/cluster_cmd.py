"""``servesim cluster``: a trace over several replicas with injected node failures, comparing how
interrupted requests are recovered (always migrate, always restart, or the planner per job)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from servesim.bounds import MAX_REPLICAS
from servesim.cli.cluster_output import parse_fail, print_cluster
from servesim.cli.common import cli_slo, out_option, request_slo
from servesim.cli.engine_flags import file_settings
from servesim.cli.pd_cmd import (
    check_timing,
    disagg_from_files,
    load_yaml,
    pd_cluster_spec,
    pd_failures,
    print_pd,
    run_pd,
)
from servesim.cli.simulate_cmd import TRACE_HELP
from servesim.cli.trace_input import hash_block_size_option, read_trace, strict_option
from servesim.cluster import POLICIES, FailureEvent, RouterSpec
from servesim.cluster.compare import ClusterFile, LinkSpec
from servesim.errors import InputError, describe, shown
from servesim.perf.setup import DEFAULT_GPU
from servesim.report.documents import disaggregated_title
from servesim.services.cluster import ClusterRequest, prepare_aggregated
from servesim.services.inputs import TraceInput
from servesim.spec import ClusterSpec, DeploymentSpec


def register(app: typer.Typer) -> None:
    @app.command("cluster")
    def cluster_cmd(
        trace: str = typer.Argument(..., help=TRACE_HELP),
        replicas: int | None = typer.Option(
            None, "--replicas", min=1, max=MAX_REPLICAS, help="Identical replicas n0..n{N-1} (default 2)."
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
        out: Path | None = out_option(),
        as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON only."),
        prefill_replicas: int | None = typer.Option(
            None, min=1, max=64, help="Disaggregated: replicas of the prefill pool (with --decode-replicas)."
        ),
        decode_replicas: int | None = typer.Option(
            None, min=1, max=64, help="Disaggregated: decode pool size."
        ),
        link_name: str | None = typer.Option(
            None, "--link", help="Disaggregated: KV-transfer link preset (default rdma-400g)."
        ),
        short_prompt_tokens: int | None = typer.Option(
            None, min=0, help="Disaggregated: prompts shorter than this prefill on the decode replica."
        ),
    ) -> None:
        """Run a trace on a cluster with node failures; compare recovery strategies on p99 TTFT/E2E.
        With prefill and decode pools (--prefill-replicas/--decode-replicas, or a cluster file with
        ``prefill`` and ``decode``), run it disaggregated instead and split each request's time by leg."""
        tr = read_trace(
            trace, seed=seed, num_requests=num_requests, strict=strict, hash_block_size=hash_block_size
        )
        check_timing(step_time_ms, linear_step_time, model, gpu)
        timing: dict[str, Any] = {"step_time_ms": step_time_ms, "linear_step_time": linear_step_time}
        head: dict[str, Any] = {"trace": trace, "num_requests": num_requests, "seed": seed}
        disagg = disagg_from_files(
            cluster, config, prefill_replicas, decode_replicas, link_name, short_prompt_tokens, model, tp
        )
        if disagg is not None:
            for flag, given in (
                ("--replicas", replicas is not None),
                ("--router", router is not None),
                ("--recovery", recovery != "compare"),
                ("--kv-checkpointing", kv_checkpointing is not None),
                ("--bandwidth-gbps", bandwidth_gbps is not None),
            ):
                if given:  # an aggregated cluster's flag: refused, not silently dropped
                    raise InputError(
                        f"{flag} is for an aggregated cluster; a disaggregated one routes and recovers "
                        "as deployed and moves KV over --link (docs/cluster.md): leave it out"
                    )
            goal = request_slo(slo)  # the same --slo as simulate's: good= refused for one run
            pd_events = pd_failures(  # the pools' failures, MTBF draws included, as listed events
                disagg,
                [parse_fail(x) for x in fail_at] + _failure_file(failures),
                tr,
                mtbf_s=mtbf_s,
                warning_s=warning_s,
                recover_after_s=recover_after_s,
                seed=seed,
            )
            spec = pd_cluster_spec(
                head,
                disagg,
                gpu,
                timing,
                pd_events,
                cluster or "disaggregated cluster",
                slo=cli_slo(slo) if goal is not None else None,
            )
            res, timed = run_pd(tr, spec)
            title = disaggregated_title(trace, len(tr))
            print_pd(res, disagg, title, timed, as_json, spec, tr.provenance, out)
            return
        if recovery != "compare" and recovery not in POLICIES:
            raise InputError(
                f"unknown recovery {shown(recovery)}; use compare or one of {', '.join(POLICIES)}"
            )
        reps_keys, route, link = _cluster_setup(cluster, config, 2 if replicas is None else replicas)
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
        asked = link.model_fields_set | set(updates)  # the served model and TP, where given
        link = LinkSpec.model_validate({**link.model_dump(), **updates})
        goal = request_slo(slo)  # --slo's wording, and good= refused for a single run
        spec = _spec(
            {
                **head,
                "deployment": DeploymentSpec(
                    model=link.model if "model" in asked else None,
                    gpu=gpu,
                    tp=link.tp if "tp" in asked else None,
                    replicas=len(reps_keys),
                    router=route.policy,
                    engine={} if cluster is not None else reps_keys[0][1],
                    **timing,
                ),
                "replicas": [{"name": n, "engine": k} for n, k in reps_keys] if cluster is not None else None,
                # the router's settings where they are not its policy's defaults
                "router": route if route != RouterSpec(policy=route.policy) else None,
                "link": link.model_dump(exclude={"model", "tp"}),
                "failures": [parse_fail(x) for x in fail_at] + _failure_file(failures),
                "mtbf_s": mtbf_s,
                "warning_s": warning_s,
                "recover_after_s": recover_after_s,
                "recovery": recovery,
                "slo": cli_slo(slo) if goal is not None else None,
            },
            cluster or "the cluster",
        )
        # servesim.services.cluster: each replica through servesim.spec.resolve (vllm serve's
        # defaults on the GPU, KV sized), the strategies compared, the run whose charts are shown
        source = TraceInput(
            source=trace, num_requests=num_requests, seed=seed, strict=strict, hash_block_size=hash_block_size
        )
        prepared = prepare_aggregated(ClusterRequest(spec=spec, trace=source), trace=tr)
        for note in prepared.resolved.notes:  # once the input is known good
            typer.echo(f"warning: {note}", err=True)
        answer = prepared.run()
        if not as_json:
            for line in prepared.header:
                typer.echo(line)
        print_cluster(answer, as_json, out)


def _spec(data: dict[str, Any], where: object) -> ClusterSpec:
    """The ``ClusterSpec`` of the flags and files; an error names the field."""
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{where}: {describe(e)}") from None


def _cluster_setup(
    cluster: Path | None, config: Path | None, n: int
) -> tuple[list[tuple[str, dict[str, Any]]], RouterSpec, LinkSpec]:
    """Each replica's name and the vLLM keys it sets (a ``--cluster`` file's, else ``--config``'s
    for ``n`` identical replicas), the router and the link."""
    if cluster is not None:
        spec = ClusterFile.model_validate(load_yaml(cluster))
        return spec.replica_keys(str(cluster)), spec.router, spec.link
    keys = file_settings(config)
    return [(f"n{i}", dict(keys)) for i in range(n)], RouterSpec(), LinkSpec()


def _failure_file(path: Path | None) -> list[FailureEvent]:
    """``--failures FILE``: a list of failure events, or a mapping with ``events``."""
    if path is None:
        return []
    data = load_yaml(path)
    items = data.get("events", data) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InputError(f"{path}: expected a list of failure events")
    return [FailureEvent.model_validate(x) for x in items]
