"""``servesim cluster --prefill-replicas N --decode-replicas M``: a disaggregated run (prefill and
decode pools, KV transfers over a modelled link), printed with each leg's share of the time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from rich.console import Console

from servesim.cli.common import print_json
from servesim.cli.engine_flags import file_settings
from servesim.cluster.config import FailureEvent
from servesim.cluster.pd import RECOVERY_ACTIONS, DisaggSpec, PDCluster, link_preset, parse_pool_node
from servesim.cluster.pd_results import LEGS, PDResult, pd_result
from servesim.errors import InputError, InternalError, describe
from servesim.spec import ClusterSpec, DeploymentSpec, ResolvedDisaggregated, resolve_cluster
from servesim.traces.schema import Trace


def load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{path}: {e}") from e


def disagg_spec(
    cluster: Path | None,
    config: Path | None,
    n_prefill: int | None,
    n_decode: int | None,
    link: str | None,
    short: int | None,
    model: str | None,
    tp: int | None,
) -> DisaggSpec | None:
    """The disaggregated layout, if one is asked for: a cluster file with ``prefill``/``decode``
    pools, or the pool sizes on the command line (both pools with ``--config``'s keys)."""
    data: dict[str, Any] = {}
    if cluster is not None:
        raw = load_yaml(cluster)
        if isinstance(raw, dict) and ("prefill" in raw or "decode" in raw):
            data = dict(raw)
    if not data and n_prefill is None and n_decode is None:
        return None
    if (n_prefill is None) != (n_decode is None) and not data:
        raise InputError("--prefill-replicas and --decode-replicas go together")
    keys = file_settings(config)
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
        raise InputError(f"{cluster or 'disaggregated cluster'}: {describe(e)}") from None
    spec.context()  # an unknown link or model is refused before anything runs
    return spec


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
    named = []
    for f in listed:
        pool, k = parse_pool_node(f.node, n_p, n_d)
        named.append(f.model_copy(update={"node": f"{pool[0]}{k}"}))
    nodes = [f"p{i}" for i in range(n_p)] + [f"d{i}" for i in range(n_d)]
    try:
        return failure_events(named, nodes, tr, mtbf_s=mtbf_s, recover_after_s=recover_after_s, seed=seed)
    except ValidationError as e:  # the plan's own check (a node failing while down)
        raise InputError(f"--fail: {describe(e)}") from None
    except ValueError as e:
        raise InputError(f"--fail: {e}") from None


def pd_deployments(spec: DisaggSpec, gpu: str | None, timing: dict[str, Any]) -> dict[str, Any]:
    """A cluster file's (or the flags') pools as ``servesim.spec.DisaggregatedSpec``: each pool a
    ``DeploymentSpec`` of the served model on its GPU (the pool's, else ``--gpu``), its replica
    count and vLLM keys; ``timing``: ``--step-time-ms`` / ``--linear-step-time``."""
    pools: dict[str, Any] = {}
    for name, pool in (("prefill", spec.prefill), ("decode", spec.decode)):
        pools[name] = DeploymentSpec(
            model=spec.model,
            gpu=pool.gpu or gpu,
            tp=pool.tp,
            replicas=pool.replicas,
            engine={str(k).replace("-", "_"): v for k, v in pool.config.items()},
            **timing,
        )
    return {**pools, "link": spec.link, "short_prompt_tokens": spec.short_prompt_tokens}


def run_pd(tr: Trace, spec: ClusterSpec) -> tuple[PDResult, str]:
    """Resolve both pools (``servesim.spec.resolve_cluster``: vllm serve's defaults on their GPU,
    KV sized), run, sum up; and the pools' ``timed as``."""
    pd = resolve_cluster(spec, tr)
    if not isinstance(pd, ResolvedDisaggregated):
        raise InternalError("a disaggregated cluster resolved without its pools")
    ctx = pd.context
    run = PDCluster(
        tr, pd.prefill, pd.decode, ctx, short_prompt_tokens=pd.short_prompt_tokens, failures=spec.failures
    ).run()
    return pd_result(run, ctx.bytes_total(1)), pd.timed_as


def print_pd(
    res: PDResult, spec: DisaggSpec, title: str, timed_as: str, as_json: bool, run: ClusterSpec | None = None
) -> None:
    """The disaggregated run's summary; ``--json``: with the pools as given (``spec``) and the
    ``ClusterSpec`` it ran (``run``)."""
    if as_json:
        extra = {"run": run.model_dump(mode="json")} if run is not None else {}
        print_json({"spec": spec.model_dump(mode="json"), **extra, **res.model_dump(mode="json")})
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
    out.print(f"per leg over {s.num_disaggregated} disaggregated requests (mean / p50 / p99 ms):")
    for leg in LEGS:
        x = s.legs[leg]
        out.print(f"  {leg:<14} {x.mean_ms:10.1f} {x.p50_ms:10.1f} {x.p99_ms:10.1f}")
    out.print(f"  link wait p99 {s.link_wait_p99_ms:.1f} ms (part of transfer)")
    if res.failures:
        print_pd_failures(out, res)


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
    "disagg_spec",
    "load_yaml",
    "pd_deployments",
    "pd_failures",
    "print_pd",
    "print_pd_failures",
    "run_pd",
]
