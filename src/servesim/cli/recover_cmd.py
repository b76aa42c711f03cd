"""``servesim recover`` (plan the recovery of interrupted jobs) and ``servesim generate-failures``.

``recover`` reads one failure record or a list of them (a failure log), decides MIGRATE_STATE or
COLD_RESTART for every valid job, shows per-job progress and the decision table, and writes one
hand-off manifest per target node into ``--outbox`` (marked for human review; nothing is sent).
``--json`` prints only the plan (one record) or ``{"plans": [...], ...}`` (a list) on stdout.

``generate-failures`` writes a seeded synthetic failure log of the same shape. (It is a command
of its own: ``servesim generate`` takes a trace PRESET argument, so ``generate failures`` would
read ``failures`` as a preset name.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from servesim.cli.common import emit, out_option, print_json, print_timed_as, said_written, write_text_atomic
from servesim.cluster.recovery import (
    MANIFEST_HEADER,
    ClusterSpec,
    FailureLogSpec,
    JobDecision,
    RecoveryPlan,
    TargetSpec,
    export_decision_matrix,
    failure_log_json,
    generate_failures,
    manifest_paths,
    parse_events,
    plan_recovery,
    write_manifests,
)
from servesim.errors import InputError
from servesim.paths import data_dir
from servesim.perf import load_catalog


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def _read_cluster(path: Path) -> list[TargetSpec]:
    data = _read_json(path)
    if isinstance(data, list):
        data = {"targets": data}
    try:
        return ClusterSpec.model_validate(data).targets
    except ValidationError as exc:
        msg = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'cluster'}: {e['msg']}" for e in exc.errors())
        raise InputError(f"{path}: {msg}") from None


def _ms(x: float | None) -> str:
    return "?" if x is None else f"{x:,.1f}"


def _show_plan(console: Console, plan: RecoveryPlan, manifests: list[Path]) -> None:
    from servesim.cli.render import print_section
    from servesim.views.recovery import recovery_view

    print_section(recovery_view(plan), console)
    for m in manifests:
        console.print(f"manifest (requires human review, not sent): {m}", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command("recover")
    def recover_cmd(
        events: Path = typer.Argument(..., help="JSON failure record, or a list of them (a failure log)."),
        cluster: Path | None = typer.Option(
            None, "--cluster", help="JSON survivors {targets: [...]} or a list (default: idle survivors)."
        ),
        model: str | None = typer.Option(None, "--model", help="Served model (default llama-3.1-8b)."),
        gpu: str | None = typer.Option(None, "--gpu", help="GPU of every replica (default h100)."),
        tp: int | None = typer.Option(None, "--tp", help="Tensor-parallel degree (default 1)."),
        kv_dtype: str | None = typer.Option(None, "--kv-dtype", help="KV dtype (default auto)."),
        bandwidth_gbps: float | None = typer.Option(
            None, "--bandwidth-gbps", help="Override every record's network_bandwidth_gbps."
        ),
        efficiency: float | None = typer.Option(None, "--efficiency", help="Link efficiency (default 0.9)."),
        setup_latency_ms: float | None = typer.Option(
            None, "--setup-latency-ms", help="Per-transfer setup (default 10 ms)."
        ),
        nic_per_rank: bool | None = typer.Option(
            None,
            "--nic-per-rank/--shared-link",
            help="Each TP rank has its own link of the bandwidth (default) or all share one.",
        ),
        survivors: int | None = typer.Option(
            None, "--survivors", help="Idle survivors without --cluster (3)."
        ),
        block_size: int | None = typer.Option(None, "--block-size", help="Tokens per KV block (16)."),
        max_num_batched_tokens: int | None = typer.Option(
            None, "--max-num-batched-tokens", help="Token budget of one step (2048)."
        ),
        max_num_seqs: int | None = typer.Option(
            None, "--max-num-seqs", help="Sequence slots per replica (128)."
        ),
        catalog: Path | None = typer.Option(None, "--catalog", help="Extra model/GPU catalog YAML."),
        outbox: Path | None = typer.Option(
            None,
            "--outbox",
            metavar="DIR",
            help="Folder for hand-off manifests (default: recovery-outbox/ in servesim's data folder).",
        ),
        no_manifests: bool = typer.Option(False, "--no-manifests", help="Write no manifest."),
        matrix: Path | None = typer.Option(
            None, "--matrix", help="Export the decision matrix (.csv or .json)."
        ),
        out: Path | None = out_option(),
        as_json: bool = typer.Option(False, "--json", help="Print only the plan(s) as JSON on stdout."),
    ) -> None:
        """Plan the recovery of jobs interrupted by a node failure: MIGRATE_STATE or COLD_RESTART each."""
        from servesim.cluster.recovery.manifests import matrix_format

        if matrix is not None:
            matrix_format(matrix)  # a bad name fails before any planning or manifest
        context = {
            "model": model,
            "gpu": gpu,
            "tp": tp,
            "kv_dtype": kv_dtype,
            "transfer_efficiency": efficiency,
            "setup_latency_ms": setup_latency_ms,
            "nic_per_rank": nic_per_rank,
            "survivors": survivors,
            "block_size": block_size,
            "max_num_batched_tokens": max_num_batched_tokens,
            "max_num_seqs": max_num_seqs,
        }
        cat = load_catalog(catalog) if catalog is not None else load_catalog()
        data = _read_json(events)
        single = not isinstance(data, list)
        overrides: dict[str, Any] = {"context": context, "network_bandwidth_gbps": bandwidth_gbps}
        if cluster is not None:
            overrides["cluster"] = _read_cluster(cluster)
        inputs = parse_events(data, **overrides)
        num_jobs = sum(len(i.active_jobs) for i in inputs)
        console = Console(stderr=as_json, quiet=as_json)
        if not as_json:
            c = inputs[0].context
            print_timed_as(f"{c.model} on {c.tp} x {c.gpu}, roofline step times")
        plans: list[RecoveryPlan] = []
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console,
            disable=as_json,
        ) as progress:
            task = progress.add_task("planning recovery", total=num_jobs)

            def step(d: JobDecision) -> None:
                progress.advance(task)
                waits = ", waits for capacity" if d.waits_for_capacity else ""
                progress.console.print(
                    f"  {d.job_id}: {d.strategy.value} -> {d.target} (est {_ms(d.est_recovery_ms)} ms{waits})"
                )

            for inp in inputs:
                plans.append(plan_recovery(inp, catalog=cat, on_decision=step))
        if outbox is None:
            outbox = data_dir() / "recovery-outbox"
        if not no_manifests:
            manifest_paths(plans, outbox)  # refuses two events that would share a file name
        written: list[list[Path]] = [[] if no_manifests else write_manifests(p, outbox) for p in plans]
        if matrix is not None:
            export_decision_matrix(plans[0] if single else plans, matrix)
        if as_json or out is not None:
            if as_json:
                for path in (p for w in written for p in w):
                    typer.echo(f"manifest written for review: {path}", err=True)
            if single:
                doc: dict[str, Any] = plans[0].model_dump(mode="json")
                doc["manifests"] = [str(p) for p in written[0]]
            else:
                doc = {
                    "num_events": len(plans),
                    "total_recompute_tokens": sum(p.total_recompute_tokens for p in plans),
                    "total_bytes_to_move": sum(p.total_bytes_to_move for p in plans),
                    "num_invalid_jobs": sum(len(p.invalid_jobs) for p in plans),
                    "requires_human_review": True,
                    "plans": [p.model_dump(mode="json") for p in plans],
                    "manifests": [str(p) for w in written for p in w],
                }
            if emit(doc, as_json=as_json, out=out):
                return
        for plan, w in zip(plans, written, strict=True):
            _show_plan(console, plan, w)
        if len(plans) > 1:
            console.print(
                f"{len(plans)} events: total_recompute_tokens "
                f"{sum(p.total_recompute_tokens for p in plans):,}, "
                f"{sum(len(p.invalid_jobs) for p in plans)} invalid jobs"
            )
        if not no_manifests:
            console.print(MANIFEST_HEADER)
        for a in plans[0].assumptions:
            console.print(f"assumed: {a}")
        said_written(out)

    @app.command("generate-failures")
    def generate_failures_cmd(
        out: Path | None = typer.Option(None, "--out", "-o", help="Write the log here (default: stdout)."),
        seed: int = typer.Option(0, "--seed", help="Random seed: same seed, same bytes."),
        events: int = typer.Option(10, "--events", "-n", help="Failure events."),
        nodes: int = typer.Option(8, "--nodes", help="Nodes in the cluster."),
        mtbf_hours: float = typer.Option(24.0, "--mtbf-hours", help="Mean time between failures per node."),
        start: str = typer.Option("2025-01-01T00:00:00Z", "--start", help="ISO-8601 start of the log."),
        warning_probability: float = typer.Option(
            0.5, "--warning-probability", help="Share of announced failures."
        ),
        warning_lead_s: float = typer.Option(30.0, "--warning-lead-s", help="Mean notice before a failure."),
        jobs_mean: float = typer.Option(6.0, "--jobs-mean", help="Mean interrupted jobs per failure."),
        prompt_median: int = typer.Option(1024, "--prompt-median", help="Median prompt tokens (log-normal)."),
        prompt_sigma: float = typer.Option(1.0, "--prompt-sigma", help="σ of log prompt tokens."),
        generated_median: int = typer.Option(128, "--generated-median", help="Median generated tokens."),
        generated_sigma: float = typer.Option(1.0, "--generated-sigma", help="σ of log generated tokens."),
        max_model_len: int = typer.Option(32768, "--max-model-len", help="Cap on prompt + generated."),
        checkpoint_probability: float = typer.Option(
            0.6, "--checkpoint-probability", help="Share of jobs with a KV snapshot."
        ),
        checkpoint_interval_s: float = typer.Option(
            30.0, "--checkpoint-interval-s", help="Snapshot period (staleness)."
        ),
        decode_tokens_per_s: float = typer.Option(
            20.0, "--decode-tokens-per-s", help="Per-job decode rate (tokens missing from a stale snapshot)."
        ),
        bandwidths: str = typer.Option(
            "1,10,25,100", "--bandwidths", help="Link bandwidths to draw from, Gbps."
        ),
        invalid_rate: float = typer.Option(
            0.0, "--invalid-rate", help="Share of jobs corrupted on purpose (validation tests)."
        ),
        as_json: bool = typer.Option(False, "--json", help="With --out: print a JSON summary only."),
    ) -> None:
        """Write a seeded synthetic failure log (input for `servesim recover`)."""
        bws = [float(x) for x in bandwidths.split(",") if x.strip()]
        spec = FailureLogSpec(
            seed=seed,
            num_events=events,
            num_nodes=nodes,
            mtbf_hours=mtbf_hours,
            start=start,
            warning_probability=warning_probability,
            warning_lead_s=warning_lead_s,
            jobs_mean=jobs_mean,
            prompt_median=prompt_median,
            prompt_sigma=prompt_sigma,
            generated_median=generated_median,
            generated_sigma=generated_sigma,
            max_model_len=max_model_len,
            checkpoint_probability=checkpoint_probability,
            checkpoint_interval_s=checkpoint_interval_s,
            decode_tokens_per_s=decode_tokens_per_s,
            bandwidths_gbps=bws,
            invalid_job_probability=invalid_rate,
        )
        records = generate_failures(spec)
        text = failure_log_json(records)
        if out is not None:
            write_text_atomic(out, text)
        if out is None:
            typer.echo(text, nl=False)
            return
        jobs = sum(len(r["active_jobs"]) for r in records)
        summary = {"path": str(out), "events": len(records), "jobs": jobs, "seed": seed}
        if as_json:
            print_json(summary)
        else:
            typer.echo(f"wrote {len(records)} failure events ({jobs} jobs, seed {seed}) to {out}")
