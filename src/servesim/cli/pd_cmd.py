"""``servesim cluster --prefill-replicas N --decode-replicas M``: a disaggregated run (prefill and
decode pools, KV transfers over a modelled link), printed with each leg's share of the time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from rich.console import Console

from servesim.cli.common import emit, said_written
from servesim.cli.engine_flags import file_settings
from servesim.cli.render import print_section
from servesim.cluster.config import FailureEvent
from servesim.cluster.pd import RECOVERY_ACTIONS, DisaggSpec, link_preset
from servesim.cluster.pd_results import LEGS, PDResult, PDSummary
from servesim.errors import InputError, InternalError, describe
from servesim.report.documents import disaggregated_run_document
from servesim.spec import ClusterSpec, DisaggregatedSpec, ResolvedDisaggregated, resolve_cluster
from servesim.spec.cluster import pool_failures
from servesim.traces.schema import Trace, TraceProvenance
from servesim.views.disagg import disagg_view


def check_timing(
    step_time_ms: float | None, linear_step_time: bool, model: str | None, gpu: str | None
) -> None:
    """Roofline step times (a model on a GPU) or a fixed/linear step time, not both."""
    if (step_time_ms is not None or linear_step_time) and (model is not None or gpu is not None):
        raise InputError(
            "--model/--gpu choose roofline step times; --step-time-ms / --linear-step-time "
            "replace them: give one or the other"
        )


def disagg_spec(
    data: dict[str, Any],
    keys: dict[str, Any],
    n_prefill: int | None,
    n_decode: int | None,
    link: str | None,
    short: int | None,
    model: str | None,
    tp: int | None,
    where: object = "disaggregated cluster",
) -> DisaggSpec | None:
    """The disaggregated layout, if one is asked for: a cluster file's ``prefill``/``decode``
    pools (``data``; empty: none), or the pool sizes on the command line, both pools with the
    vLLM ``keys`` (``--config``'s; the dashboard's engine flags over them) where a pool sets none."""
    data = dict(data)
    if not data and n_prefill is None and n_decode is None:
        return None
    if (n_prefill is None) != (n_decode is None) and not data:
        raise InputError("--prefill-replicas and --decode-replicas go together")
    for pool, n in (("prefill", n_prefill), ("decode", n_decode)):
        p = dict(data.get(pool) or {})
        if n is not None:
            p["replicas"] = n
        if keys and "config" not in p:
            p["config"] = dict(keys)
        if tp is not None:
            p["tp"] = tp
        data[pool] = p
    for key, v in (("link", link), ("short_prompt_tokens", short), ("model", model)):
        if v is not None:
            data[key] = v
    try:
        spec = DisaggSpec.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{where}: {describe(e)}") from None
    spec.context()  # an unknown link or model is refused before anything runs
    return spec


def pd_cluster_spec(
    head: dict[str, Any],
    spec: DisaggSpec,
    gpu: str | None,
    timing: dict[str, Any],
    failures: list[FailureEvent],
    where: object,
    slo: Any = None,
) -> ClusterSpec:
    """The ``ClusterSpec`` a disaggregated run records (``head``: trace, num_requests, seed;
    ``slo``: the run's, or None); an error names the field."""
    data = {**head, "disaggregated": pd_deployments(spec, gpu, timing), "failures": failures, "slo": slo}
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{where}: {describe(e)}") from None


def load_yaml(path: Path) -> Any:
    """A YAML file the user gave (a cluster or failures file); unreadable: an error naming it."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{path}: {e}") from e


def disagg_from_files(
    cluster: Path | None,
    config: Path | None,
    n_prefill: int | None,
    n_decode: int | None,
    link: str | None,
    short: int | None,
    model: str | None,
    tp: int | None,
) -> DisaggSpec | None:
    """``disagg_spec`` of the command line: a ``--cluster`` file with ``prefill``/``decode`` pools,
    or the pool sizes, both pools with ``--config``'s keys (``servesim cluster``, ``emulate``)."""
    data: dict[str, Any] = {}
    if cluster is not None:
        raw = load_yaml(cluster)
        if isinstance(raw, dict) and ("prefill" in raw or "decode" in raw):
            data = dict(raw)
    if not data and n_prefill is None and n_decode is None:
        return None
    keys = file_settings(config)
    return disagg_spec(
        data, keys, n_prefill, n_decode, link, short, model, tp, cluster or "disaggregated cluster"
    )


def pd_failures(
    spec: DisaggSpec,
    listed: list[FailureEvent],
    tr: Trace,
    *,
    mtbf_s: float | None,
    warning_s: float,
    recover_after_s: float | None,
    seed: int,
) -> list[FailureEvent]:
    """``--fail`` / ``--failures`` / ``--mtbf-s`` for the pools: nodes named ``p0``/``d1`` or
    ``prefill:0``/``decode:1`` (normalised to the replica names), checked as one plan."""
    from servesim.cluster.compare import failure_events

    if warning_s > 0 or any(f.warning_s > 0 for f in listed):
        raise InputError("--warning-s: announced failures are not modelled for prefill/decode pools")
    n_p, n_d = spec.prefill.replicas, spec.decode.replicas
    named = pool_failures(listed, n_p, n_d)
    nodes = [f"p{i}" for i in range(n_p)] + [f"d{i}" for i in range(n_d)]
    try:
        return failure_events(named, nodes, tr, mtbf_s=mtbf_s, recover_after_s=recover_after_s, seed=seed)
    except ValidationError as e:  # the plan's own check (a node failing while down)
        raise InputError(f"--fail: {describe(e)}") from None
    except ValueError as e:
        raise InputError(f"--fail: {e}") from None


def pd_deployments(spec: DisaggSpec, gpu: str | None, timing: dict[str, Any]) -> DisaggregatedSpec:
    """A cluster file's (or the flags') pools as ``servesim.spec.DisaggregatedSpec``
    (``DisaggregatedSpec.of_pools``, as the web states them); ``timing``: ``--step-time-ms`` /
    ``--linear-step-time``."""
    return DisaggregatedSpec.of_pools(spec, gpu, timing)


def run_pd(tr: Trace, spec: ClusterSpec) -> tuple[PDResult, str]:
    """Resolve both pools (``servesim.spec.resolve_cluster``: vllm serve's defaults on their GPU,
    KV sized), run, sum up (``ResolvedDisaggregated.run``); and the pools' ``timed as``."""
    pd = resolve_cluster(spec, tr)
    if not isinstance(pd, ResolvedDisaggregated):
        raise InternalError("a disaggregated cluster resolved without its pools")
    return pd.run(tr), pd.timed_as


def print_pd(
    res: PDResult,
    spec: DisaggSpec,
    title: str,
    timed_as: str,
    as_json: bool,
    run: ClusterSpec,
    provenance: TraceProvenance | None = None,
    written: Path | None = None,
) -> None:
    """The disaggregated run's summary; ``--json`` (and ``--out``): its ``disaggregated`` document
    (``report.documents.disaggregated_run_document``: the pools as given, the ``ClusterSpec`` it
    ran, the result and its view), the one the web writes for the same run; ``written``: the
    ``--out`` file."""
    if as_json or written is not None:
        doc = disaggregated_run_document(res, spec, run, provenance, title)
        if emit(doc, as_json=as_json, out=written):
            return
    s = res.summary
    link = link_preset(spec.link)
    out = Console(highlight=False)
    out.print(title)
    out.print(f"timed as: {timed_as}")
    short = (
        f"short prompts (< {spec.short_prompt_tokens} tokens) prefilled on the decode replica: {s.num_local}"
        if spec.short_prompt_tokens
        else "short-prompt threshold off"
        + (f" ({s.num_local} prefilled on a decode replica after a loss)" if s.num_local else "")
    )
    out.print(
        f"{spec.prefill.replicas}P{spec.decode.replicas}D, link {spec.link} "
        f"({link.bandwidth_gbps:g} Gbit/s per TP rank, {link.setup_latency_ms:g} ms setup), {short}"
    )
    if not s.num_requests:  # as simulate says it: no latency of nobody, no "pass"
        why = (
            f"{s.num_rejected} rejected, {s.num_unfinished} never decoded"
            if s.num_rejected or s.num_unfinished
            else "no requests"
        )
        out.print(f"no request was served ({why}): nothing to measure (--json gives the empty report)")
        if res.failures:
            print_pd_failures(out, res)
        said_written(written)
        return
    tpot50 = f"{s.tpot_p50_ms:.1f}" if s.tpot_p50_ms is not None else "-"
    tpot99 = f"{s.tpot_p99_ms:.1f}" if s.tpot_p99_ms is not None else "-"
    out.print(f"TTFT p50/p99 {s.ttft_p50_ms:.1f} / {s.ttft_p99_ms:.1f} ms")
    out.print(f"TPOT p50/p99 {tpot50} / {tpot99} ms")
    out.print(f"E2E  p50/p99 {s.e2e_p50_ms:.1f} / {s.e2e_p99_ms:.1f} ms")
    out.print(f"output tokens/s {s.output_tokens_per_s:.1f}; KV moved {s.transfer_gb:.3f} GB")
    if s.num_rejected:
        out.print(
            f"rejected (not in the latencies): {s.num_rejected} of "
            f"{s.num_requests + s.num_rejected + s.num_unfinished}"
        )
    for line in slo_lines(s):
        out.print(line)
    out.print(f"per leg over {s.num_disaggregated} disaggregated requests (mean / p50 / p99 ms):")
    for leg in LEGS:
        x = s.legs[leg]
        out.print(f"  {leg:<14} {x.mean_ms:10.1f} {x.p50_ms:10.1f} {x.p99_ms:10.1f}")
    out.print(f"  link wait p99 {s.link_wait_p99_ms:.1f} ms (part of transfer)")
    if res.failures:
        print_pd_failures(out, res)
    print_section(disagg_view(res, spec, title=title), out, tables=["pools"], verdicts=False, text=False)
    said_written(written)


def slo_lines(s: PDSummary) -> list[str]:
    """The SLO's verdict, as ``simulate`` words it: each p99 against its cap, then the goodput
    and how many requests were good (nothing without an SLO)."""
    if s.slo is None or s.num_good is None or s.goodput is None:
        return []
    p99 = {"ttft_ms": s.ttft_p99_ms, "tpot_ms": s.tpot_p99_ms, "e2e_ms": s.e2e_p99_ms}
    parts = []
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "E2E")):
        cap = getattr(s.slo, key)
        if cap is None:
            continue
        got = p99[key]
        verdict = "n/a" if got is None else ("pass" if got <= cap else "FAIL")
        shown_p99 = "-" if got is None else f"{got:.1f}"
        parts.append(f"{label} p99 {shown_p99} ms vs {cap:g} ms {verdict}")
    total = s.num_requests + s.num_unfinished
    return [
        "SLO: " + "; ".join(parts),
        f"goodput {s.goodput:.2f} req/s ({s.num_good:,} of {total:,} requests meet the SLO, "
        f"{(s.good_fraction or 0.0):.1%})",
    ]


def print_pd_failures(out: Console, res: PDResult) -> None:
    """What failed, and what became of the requests it held."""
    s = res.summary
    out.print("failures:")
    for f in res.failures:
        back = f", back after {f.recover_after_s:g} s" if f.recover_after_s is not None else ", not back"
        out.print(f"  {f.node} ({f.pool}) lost at {f.time_s:g} s{back}: {f.requests} requests touched")
    out.print("recovered (requests):")
    for action, what in RECOVERY_ACTIONS.items():
        n = s.recoveries.get(action, 0)
        if n:
            out.print(f"  {action:<17} {n:6d}  {what}")
    if not s.recoveries:
        out.print("  none: no request was on a lost replica")
    out.print(
        f"transfers: {s.transfer_legs} legs, {s.cut_transfers} cut off by a loss; "
        f"unfinished (no decode replica came back): {s.num_unfinished}"
    )


__all__ = [
    "check_timing",
    "disagg_from_files",
    "disagg_spec",
    "load_yaml",
    "pd_cluster_spec",
    "pd_deployments",
    "pd_failures",
    "print_pd",
    "print_pd_failures",
    "run_pd",
    "slo_lines",
]
