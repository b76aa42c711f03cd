"""``servesim recover`` (plan the recovery of interrupted jobs) and ``servesim generate-failures``.

``recover`` reads one failure record or a list of them (a failure log), asks the recovery service
(``servesim.services.recovery``) to decide MIGRATE_STATE or COLD_RESTART for every valid job,
shows per-job progress and the decision table, and writes one hand-off manifest per target node
into ``--outbox`` (marked for human review; nothing is sent). ``--json`` prints only the document
(``servesim.report.documents.recover_document``): one record's plan, or ``{"plans": [...], ...}``.

``generate-failures`` writes a seeded synthetic failure log of the same shape. (It is a command
of its own: ``servesim generate`` takes a trace PRESET argument, so ``generate failures`` would
read ``failures`` as a preset name.)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from servesim.cli.common import emit, out_option, print_json, print_timed_as, said_written, write_text_atomic
from servesim.cli.engine_flags import hardware_flags
from servesim.paths import data_dir
from servesim.services.deployment import DeploymentSpec
from servesim.services.recovery import (
    MANIFEST_HEADER,
    RecoverAnswer,
    RecoverRequest,
    check_matrix_name,
    generate_failure_log,
    prepare,
    read_cluster,
    read_json,
)


def _ms(x: float | None) -> str:
    return "?" if x is None else f"{x:,.1f}"


def _opt(flag: str, help_text: str, *more: str, **kw: Any) -> Any:
    """An option for an ``Annotated`` alias (the default is the parameter's: ``= None``)."""
    return typer.Option(flag, *more, help=help_text, **kw)


# The context flags a user may set over every record's (None: the record's, else the default).
KvDtype = Annotated[str | None, _opt("--kv-dtype", "KV dtype (default auto).")]
Bandwidth = Annotated[
    float | None, _opt("--bandwidth-gbps", "Override every record's network_bandwidth_gbps.")
]
Efficiency = Annotated[float | None, _opt("--efficiency", "Link efficiency (default 0.9).")]
SetupMs = Annotated[float | None, _opt("--setup-latency-ms", "Per-transfer setup (default 10 ms).")]
NicPerRank = Annotated[
    bool | None,
    _opt(
        "--nic-per-rank/--shared-link",
        "Each TP rank has its own link of the bandwidth (default) or all share one.",
    ),
]
Survivors = Annotated[int | None, _opt("--survivors", "Idle survivors without --cluster (3).")]
BlockSize = Annotated[int | None, _opt("--block-size", "Tokens per KV block (16).")]
Budget = Annotated[int | None, _opt("--max-num-batched-tokens", "Token budget of one step (2048).")]
Seqs = Annotated[int | None, _opt("--max-num-seqs", "Sequence slots per replica (128).")]
ClusterFile = Annotated[
    Path | None, _opt("--cluster", "JSON survivors {targets: [...]} or a list (default: idle survivors).")
]
Catalog = Annotated[Path | None, _opt("--catalog", "Extra model/GPU catalog YAML.")]
Outbox = Annotated[
    Path | None,
    _opt(
        "--outbox",
        "Folder for hand-off manifests (default: recovery-outbox/ in servesim's data folder).",
        metavar="DIR",
    ),
]
Matrix = Annotated[Path | None, _opt("--matrix", "Export the decision matrix (.csv or .json).")]


@hardware_flags("model", "gpu", "tp")
def recover_cmd(
    events: Path = typer.Argument(..., help="JSON failure record, or a list of them (a failure log)."),
    cluster: ClusterFile = None,
    kv_dtype: KvDtype = None,
    bandwidth_gbps: Bandwidth = None,
    efficiency: Efficiency = None,
    setup_latency_ms: SetupMs = None,
    nic_per_rank: NicPerRank = None,
    survivors: Survivors = None,
    block_size: BlockSize = None,
    max_num_batched_tokens: Budget = None,
    max_num_seqs: Seqs = None,
    catalog: Catalog = None,
    outbox: Outbox = None,
    no_manifests: bool = typer.Option(False, "--no-manifests", help="Write no manifest."),
    matrix: Matrix = None,
    out: Path | None = out_option(),
    as_json: bool = typer.Option(False, "--json", help="Print only the plan(s) as JSON on stdout."),
    *,
    deployment: DeploymentSpec,
) -> None:
    """Plan the recovery of jobs interrupted by a node failure: MIGRATE_STATE or COLD_RESTART each."""
    if matrix is not None:
        check_matrix_name(matrix)  # a bad name fails before any planning or manifest
    context = {
        "model": deployment.model,
        "gpu": deployment.gpu,
        "tp": deployment.tp,
        "kv_dtype": kv_dtype,
        "transfer_efficiency": efficiency,
        "setup_latency_ms": setup_latency_ms,
        "nic_per_rank": nic_per_rank,
        "survivors": survivors,
        "block_size": block_size,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
    }
    request = RecoverRequest(
        events=read_json(events),
        context=context,
        bandwidth_gbps=bandwidth_gbps,
        cluster=read_cluster(cluster) if cluster is not None else None,
        catalog=catalog,
    )
    answer = _plan(request, as_json)
    folder = outbox if outbox is not None else data_dir() / "recovery-outbox"
    written = [[] for _ in answer.plans] if no_manifests else answer.write_manifests(folder)
    if matrix is not None:
        answer.export_matrix(matrix)
    _report(answer, written, as_json=as_json, out=out, manifests=not no_manifests)


def _plan(request: RecoverRequest, as_json: bool) -> RecoverAnswer:
    """The plans, with the timed-as line, a progress bar and one line per decision (not with --json)."""
    prepared = prepare(request)
    console = Console(stderr=as_json, quiet=as_json)
    if not as_json:
        print_timed_as(prepared.timed_as)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=console, disable=as_json
    ) as bar:
        task = bar.add_task("planning recovery", total=prepared.num_jobs)

        def step(_phase: str, _done: int, _total: int, d: Mapping[str, Any] | None = None, /) -> None:
            bar.advance(task)
            if d is None:
                return
            waits = ", waits for capacity" if d["waits_for_capacity"] else ""
            est = _ms(d["est_recovery_ms"])
            bar.console.print(f"  {d['job_id']}: {d['strategy']} -> {d['target']} (est {est} ms{waits})")

        return prepared.run(progress=step)


def _report(
    answer: RecoverAnswer, written: list[list[Path]], *, as_json: bool, out: Path | None, manifests: bool
) -> None:
    """The document (``--json``/``--out``), else each plan's decision table and its manifests."""
    from servesim.report.documents import recover_document

    if as_json or out is not None:
        if as_json:
            for path in (p for w in written for p in w):
                typer.echo(f"manifest written for review: {path}", err=True)
        if emit(recover_document(answer, written), as_json=as_json, out=out):
            return
    from servesim.cli.render import print_section
    from servesim.views.recovery import recovery_view

    console = Console()
    for plan, paths in zip(answer.plans, written, strict=True):
        print_section(recovery_view(plan), console)
        for m in paths:
            console.print(f"manifest (requires human review, not sent): {m}", highlight=False)
    if len(answer.plans) > 1:
        console.print(
            f"{len(answer.plans)} events: total_recompute_tokens {answer.total_recompute_tokens:,}, "
            f"{answer.num_invalid_jobs} invalid jobs"
        )
    if manifests:
        console.print(MANIFEST_HEADER)
    for a in answer.plans[0].assumptions:
        console.print(f"assumed: {a}")
    said_written(out)


def _num(default: Any, flag: str, help_text: str, *more: str) -> Any:
    return typer.Option(default, flag, *more, help=help_text)


def generate_failures_cmd(
    out: Path | None = _num(None, "--out", "Write the log here (default: stdout).", "-o"),
    seed: int = _num(0, "--seed", "Random seed: same seed, same bytes."),
    events: int = _num(10, "--events", "Failure events.", "-n"),
    nodes: int = _num(8, "--nodes", "Nodes in the cluster."),
    mtbf_hours: float = _num(24.0, "--mtbf-hours", "Mean time between failures per node."),
    start: str = _num("2025-01-01T00:00:00Z", "--start", "ISO-8601 start of the log."),
    warning_probability: float = _num(0.5, "--warning-probability", "Share of announced failures."),
    warning_lead_s: float = _num(30.0, "--warning-lead-s", "Mean notice before a failure."),
    jobs_mean: float = _num(6.0, "--jobs-mean", "Mean interrupted jobs per failure."),
    prompt_median: int = _num(1024, "--prompt-median", "Median prompt tokens (log-normal)."),
    prompt_sigma: float = _num(1.0, "--prompt-sigma", "σ of log prompt tokens."),
    generated_median: int = _num(128, "--generated-median", "Median generated tokens."),
    generated_sigma: float = _num(1.0, "--generated-sigma", "σ of log generated tokens."),
    max_model_len: int = _num(32768, "--max-model-len", "Cap on prompt + generated."),
    checkpoint_probability: float = _num(
        0.6, "--checkpoint-probability", "Share of jobs with a KV snapshot."
    ),
    checkpoint_interval_s: float = _num(30.0, "--checkpoint-interval-s", "Snapshot period (staleness)."),
    decode_tokens_per_s: float = _num(
        20.0, "--decode-tokens-per-s", "Per-job decode rate (tokens missing from a stale snapshot)."
    ),
    bandwidths: str = _num("1,10,25,100", "--bandwidths", "Link bandwidths to draw from, Gbps."),
    invalid_rate: float = _num(
        0.0, "--invalid-rate", "Share of jobs corrupted on purpose (validation tests)."
    ),
    as_json: bool = _num(False, "--json", "With --out: print a JSON summary only."),
) -> None:
    """Write a seeded synthetic failure log (input for `servesim recover`)."""
    settings = {
        "seed": seed,
        "num_events": events,
        "num_nodes": nodes,
        "mtbf_hours": mtbf_hours,
        "start": start,
        "warning_probability": warning_probability,
        "warning_lead_s": warning_lead_s,
        "jobs_mean": jobs_mean,
        "prompt_median": prompt_median,
        "prompt_sigma": prompt_sigma,
        "generated_median": generated_median,
        "generated_sigma": generated_sigma,
        "max_model_len": max_model_len,
        "checkpoint_probability": checkpoint_probability,
        "checkpoint_interval_s": checkpoint_interval_s,
        "decode_tokens_per_s": decode_tokens_per_s,
        "bandwidths_gbps": [float(x) for x in bandwidths.split(",") if x.strip()],
        "invalid_job_probability": invalid_rate,
    }
    log = generate_failure_log(settings)
    if out is None:
        typer.echo(log.text, nl=False)
        return
    write_text_atomic(out, log.text)
    if as_json:
        print_json({"path": str(out), "events": len(log.records), "jobs": log.num_jobs, "seed": seed})
    else:
        typer.echo(f"wrote {len(log.records)} failure events ({log.num_jobs} jobs, seed {seed}) to {out}")


def register(app: typer.Typer) -> None:
    app.command("recover")(recover_cmd)
    app.command("generate-failures")(generate_failures_cmd)
