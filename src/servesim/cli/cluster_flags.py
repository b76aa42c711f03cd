"""A cluster's flags and files, stated as the one ``servesim.spec.ClusterSpec`` a run records.

Why: ``servesim cluster``, ``servesim dashboard`` and ``servesim emulate`` take the same fleet
flags (``--replicas``, ``--router``, ``--fail NODE@TIME[+BACK]``, ``--failures FILE``, MTBF,
recovery, checkpointing, the migration link, the prefill/decode pools, a ``--cluster`` file).
This module reads them once: ``fleet_options`` declares them (bounds from the spec's fields,
named by flag), ``cluster_spec`` turns them with the deployment and engine flags into the
``ClusterSpec`` that ``servesim.services.cluster`` answers. Nothing runs here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import typer
import yaml
from pydantic import TypeAdapter, ValidationError

from servesim.bounds import MAX_POOL_REPLICAS, MAX_REPLICAS
from servesim.cli.engine_flags import annotated, file_settings, with_options
from servesim.errors import InputError, describe, shown
from servesim.services.cluster import POLICIES, ClusterFile, DisaggSpec, FailureEvent, LinkSpec, RouterSpec
from servesim.services.deployment import (
    ClusterSpec,
    DeploymentSpec,
    DisaggregatedSpec,
    MigrationLink,
    PercentileSLO,
)

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class FleetFlags:
    """The fleet as the flags state it (None: not given)."""

    replicas: int | None = None
    cluster: Path | None = None
    router: str | None = None
    failures: Path | None = None
    fail: tuple[str, ...] = ()
    mtbf_s: float | None = None
    warning_s: float = 0.0
    recover_after_s: float | None = None
    recovery: str | None = None
    kv_checkpointing: str | None = None
    bandwidth_gbps: float | None = None
    prefill_replicas: int | None = None
    decode_replicas: int | None = None
    link: str | None = None
    short_prompt_tokens: int | None = None

    @property
    def pools_asked(self) -> bool:
        return self.prefill_replicas is not None or self.decode_replicas is not None

    @property
    def fleet_asked(self) -> bool:
        """Any flag beyond one replica: replicas, a cluster file, a router, failures, recovery,
        pools, a link. A command whose default is one engine runs a fleet when this is true."""
        return (self.replicas or 1) > 1 or any(
            v not in (None, (), 0.0) for k, v in vars(self).items() if k != "replicas"
        )

    def listed_failures(self) -> list[FailureEvent]:
        """``--fail`` and ``--failures FILE``, in that order."""
        return [parse_fail(x) for x in self.fail] + failure_file(self.failures)


#: Each fleet flag whose value a ``ClusterSpec`` (or its link) field bounds: checked by that field.
_BOUNDED = {
    "mtbf_s": ClusterSpec.model_fields["mtbf_s"],
    "warning_s": ClusterSpec.model_fields["warning_s"],
    "recover_after_s": ClusterSpec.model_fields["recover_after_s"],
    "bandwidth_gbps": MigrationLink.model_fields["bandwidth_gbps"],
}


def _checked(values: dict[str, Any]) -> FleetFlags:
    """The fleet flags, each bounded one checked by its spec field, named by its flag."""
    for key, field in _BOUNDED.items():
        value = values.get(key)
        if value is None:
            continue
        try:
            TypeAdapter(annotated(field)).validate_python(value)
        except ValidationError as e:
            msg = str(e.errors()[0]["msg"]).removeprefix("Value error, ")
            raise InputError(f"--{key.replace('_', '-')}: {msg}") from None
    return FleetFlags(**{**values, "fail": tuple(values["fail"])})


def fleet_options(*, replicas_help: str, recovery_help: str) -> Callable[[F], F]:
    """The fleet flags, handed to the command as ``fleet: FleetFlags``; ``replicas_help`` and
    ``recovery_help`` say each command's default."""
    pools = f"Disaggregated: replicas of the %s pool (1..{MAX_POOL_REPLICAS})."
    options: dict[str, tuple[Any, Any]] = {
        "replicas": (int | None, typer.Option(None, min=1, max=MAX_REPLICAS, help=replicas_help)),
        "cluster": (
            Path | None,
            typer.Option(None, help="YAML/JSON with replicas, router and link, or pools."),
        ),
        "router": (str | None, typer.Option(None, help="Router policy (default least_outstanding).")),
        "failures": (Path | None, typer.Option(None, help="JSON/YAML list of failure events.")),
        "fail": (list[str], typer.Option([], "--fail", help="NODE@TIME[+RECOVER_AFTER], repeatable.")),
        "mtbf_s": (float | None, typer.Option(None, help="Random failures per node with this MTBF (s).")),
        "warning_s": (float, typer.Option(0.0, help="Failures are announced this long before (MTBF mode).")),
        "recover_after_s": (
            float | None,
            typer.Option(None, help="Failed nodes come back after (MTBF mode)."),
        ),
        "recovery": (str | None, typer.Option(None, help=recovery_help)),
        "kv_checkpointing": (str | None, typer.Option(None, help="none | on_warning | continuous.")),
        "bandwidth_gbps": (
            float | None,
            typer.Option(None, help="Link per TP rank between replicas, Gbit/s."),
        ),
        "prefill_replicas": (
            int | None,
            typer.Option(None, min=1, max=MAX_POOL_REPLICAS, help=pools % "prefill"),
        ),
        "decode_replicas": (
            int | None,
            typer.Option(None, min=1, max=MAX_POOL_REPLICAS, help=pools % "decode"),
        ),
        "link": (
            str | None,
            typer.Option(None, "--link", help="Disaggregated: KV-transfer link preset (default rdma-400g)."),
        ),
        "short_prompt_tokens": (
            int | None,
            typer.Option(
                None, min=0, help="Disaggregated: prompts shorter than this prefill on the decode replica."
            ),
        ),
    }

    def decorate(func: F) -> F:
        return with_options(func, options, "fleet", _checked, "config")

    return decorate


# ------------------------------------------------------------------------------ files and --fail
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


def load_yaml(path: Path) -> Any:
    """A YAML file the user gave (a cluster or failures file); unreadable: an error naming it."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        raise InputError(f"{path}: {e}") from e


def failure_file(path: Path | None) -> list[FailureEvent]:
    """``--failures FILE``: a list of failure events, or a mapping with ``events``."""
    if path is None:
        return []
    data = load_yaml(path)
    items = data.get("events", data) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InputError(f"{path}: expected a list of failure events")
    try:
        return [FailureEvent.model_validate(x) for x in items]
    except ValidationError as e:
        raise InputError(f"{path}: {describe(e)}") from None


def check_timing(deployment: DeploymentSpec) -> None:
    """Roofline step times (a model on a GPU) or a fixed/linear step time, not both."""
    if deployment.fixed_timing and (deployment.model is not None or deployment.gpu is not None):
        raise InputError(
            "--model/--gpu choose roofline step times; --step-time-ms / --linear-step-time "
            "replace them: give one or the other"
        )


# ------------------------------------------------------------------------------ the pools
def disagg_spec(
    data: dict[str, Any],
    keys: dict[str, Any],
    fleet: FleetFlags,
    deployment: DeploymentSpec,
    where: object = "disaggregated cluster",
) -> DisaggSpec | None:
    """The disaggregated layout, if one is asked for: a cluster file's ``prefill``/``decode``
    pools (``data``; empty: none), or the pool sizes on the command line, both pools with the
    vLLM ``keys`` (``--config``'s, the engine flags over them) where a pool sets none."""
    data = dict(data)
    n_prefill, n_decode = fleet.prefill_replicas, fleet.decode_replicas
    if not data and not fleet.pools_asked:
        return None
    if (n_prefill is None) != (n_decode is None) and not data:
        raise InputError("--prefill-replicas and --decode-replicas go together")
    for pool, n in (("prefill", n_prefill), ("decode", n_decode)):
        p = dict(data.get(pool) or {})
        if n is not None:
            p["replicas"] = n
        if keys and "config" not in p:
            p["config"] = dict(keys)
        if deployment.tp is not None:
            p["tp"] = deployment.tp
        data[pool] = p
    for key, v in (("link", fleet.link), ("short_prompt_tokens", fleet.short_prompt_tokens)):
        if v is not None:
            data[key] = v
    if deployment.model is not None:
        data["model"] = deployment.model
    try:
        spec = DisaggSpec.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{where}: {describe(e)}") from None
    spec.context()  # an unknown link or model is refused before anything runs
    return spec


def cluster_file_pools(cluster: Path | None) -> dict[str, Any]:
    """A ``--cluster`` file's ``prefill``/``decode`` section (empty: an aggregated cluster file)."""
    if cluster is None:
        return {}
    raw = load_yaml(cluster)
    if isinstance(raw, dict) and ("prefill" in raw or "decode" in raw):
        return dict(raw)
    return {}


_AGGREGATED_ONLY = ("replicas", "router", "recovery", "kv_checkpointing", "bandwidth_gbps")


def _refuse_aggregated_flags(fleet: FleetFlags) -> None:
    for name in _AGGREGATED_ONLY:
        if getattr(fleet, name) is not None:  # an aggregated cluster's flag: refused, not dropped
            raise InputError(
                f"--{name.replace('_', '-')} is for an aggregated cluster; a disaggregated one routes "
                "and recovers as deployed and moves KV over --link (docs/cluster.md): leave it out"
            )


# ------------------------------------------------------------------------------ the spec
@dataclass(frozen=True)
class ClusterInputs:
    """What ``cluster_spec`` reads: the trace as named, the deployment and engine flags, the
    ``--config`` file, the fleet flags, the SLO text, the seed and size of a generated trace."""

    trace: str
    deployment: DeploymentSpec
    flags: dict[str, Any]
    config: Path | None
    fleet: FleetFlags
    slo: PercentileSLO | None
    seed: int = 0
    num_requests: int | None = None


def cluster_spec(
    inputs: ClusterInputs, *, default_replicas: int = 2, default_recovery: str = "compare"
) -> ClusterSpec:
    """The ``ClusterSpec`` of the flags and files: prefill/decode pools when asked for (a cluster
    file's or ``--prefill-replicas``/``--decode-replicas``), else replicas behind a router."""
    check_timing(inputs.deployment)
    fleet = inputs.fleet
    given = {k: v for k, v in inputs.flags.items() if v is not None}
    keys = {**file_settings(inputs.config), **given}
    where = inputs.fleet.cluster or "disaggregated cluster"
    pools = disagg_spec(cluster_file_pools(fleet.cluster), keys, fleet, inputs.deployment, where)
    head = {
        "trace": inputs.trace,
        "num_requests": inputs.num_requests,
        "seed": inputs.seed,
        "slo": inputs.slo,
    }
    if pools is not None:
        _refuse_aggregated_flags(fleet)
        dep = inputs.deployment
        if dep.data_parallel_size > 1 or dep.enable_expert_parallel:  # not dropped: refused
            raise InputError(
                "--data-parallel-size / --enable-expert-parallel: prefill/decode pools of "
                "data-parallel deployments are not modelled"
            )
        return _validated(
            {
                **head,
                "disaggregated": DisaggregatedSpec.of_pools(
                    pools, inputs.deployment.gpu, _timing(inputs.deployment)
                ),
                "failures": fleet.listed_failures(),
                "mtbf_s": fleet.mtbf_s,
                "warning_s": fleet.warning_s,
                "recover_after_s": fleet.recover_after_s,
            },
            where,
        )
    if fleet.link is not None or fleet.short_prompt_tokens is not None:
        raise InputError(
            "--link and --short-prompt-tokens are for a disaggregated cluster: "
            "give --prefill-replicas and --decode-replicas"
        )
    return _aggregated(inputs, given, head, default_replicas, default_recovery)


def _timing(deployment: DeploymentSpec) -> dict[str, Any]:
    """What both pools take from the deployment besides its model and keys."""
    out: dict[str, Any] = {
        "step_time_ms": deployment.step_time_ms,
        "linear_step_time": deployment.linear_step_time,
    }
    for key in ("gpu_memory_utilization", "profile"):
        if getattr(deployment, key) is not None:
            out[key] = getattr(deployment, key)
    return out


def _aggregated(
    inputs: ClusterInputs,
    given: dict[str, Any],
    head: dict[str, Any],
    default_replicas: int,
    default_recovery: str,
) -> ClusterSpec:
    """Replicas behind a router (``given``: the engine flags, over every replica's keys)."""
    fleet, dep = inputs.fleet, inputs.deployment
    recovery = fleet.recovery or default_recovery
    if recovery != "compare" and recovery not in POLICIES:
        raise InputError(f"unknown recovery {shown(recovery)}; use compare or one of {', '.join(POLICIES)}")
    n = default_replicas if fleet.replicas is None else fleet.replicas
    reps_keys, route, link = _cluster_setup(fleet.cluster, inputs.config, given, n)
    if fleet.router is not None:
        route = RouterSpec.model_validate({**route.model_dump(), "policy": fleet.router, "seed": inputs.seed})
    updates = {
        k: v
        for k, v in (
            ("kv_checkpointing", fleet.kv_checkpointing),
            ("model", dep.model),
            ("tp", dep.tp),
            ("bandwidth_gbps", fleet.bandwidth_gbps),
        )
        if v is not None
    }
    asked = link.model_fields_set | set(updates)  # the served model and TP, where given
    link = LinkSpec.model_validate({**link.model_dump(), **updates})
    named = fleet.cluster is not None
    deployment = dep.model_copy(
        update={
            "model": link.model if "model" in asked else None,
            "tp": link.tp if "tp" in asked else None,
            "replicas": len(reps_keys),
            "router": route.policy,
            "engine": {} if named else reps_keys[0][1],
        }
    )
    return _validated(
        {
            **head,
            "deployment": deployment,
            "replicas": [{"name": n, "engine": k} for n, k in reps_keys] if named else None,
            # the router's settings where they are not its policy's defaults
            "router": route if route != RouterSpec(policy=route.policy) else None,
            "link": link.model_dump(exclude={"model", "tp", "kv_dtype"}),  # the deployment's
            "failures": fleet.listed_failures(),
            "mtbf_s": fleet.mtbf_s,
            "warning_s": fleet.warning_s,
            "recover_after_s": fleet.recover_after_s,
            "recovery": recovery,
        },
        fleet.cluster or "the cluster",
    )


def _validated(data: dict[str, Any], where: object) -> ClusterSpec:
    """The ``ClusterSpec`` of the flags and files; an error names the field."""
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{where}: {describe(e)}") from None


def _cluster_setup(
    cluster: Path | None, config: Path | None, given: dict[str, Any], n: int
) -> tuple[list[tuple[str, dict[str, Any]]], RouterSpec, LinkSpec]:
    """Each replica's name and the vLLM keys it sets, the router and the link: a ``--cluster``
    file's replicas (``--config``'s keys under each replica's own), else ``n`` identical replicas
    with ``--config``'s keys; the engine flags (``given``) over both."""
    base = file_settings(config)
    if cluster is not None:
        try:
            spec = ClusterFile.model_validate(load_yaml(cluster))
        except ValidationError as e:
            raise InputError(f"{cluster}: {describe(e)}") from None
        replicas = [(name, {**base, **own, **given}) for name, own in spec.replica_keys(str(cluster))]
        return replicas, spec.router, spec.link
    return [(f"n{i}", {**base, **given}) for i in range(n)], RouterSpec(), LinkSpec()


__all__ = [
    "ClusterInputs",
    "FleetFlags",
    "check_timing",
    "cluster_spec",
    "disagg_spec",
    "failure_file",
    "fleet_options",
    "load_yaml",
    "parse_fail",
]
