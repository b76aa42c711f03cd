"""``DeploymentSpec``: what a user asks to run, and ``resolve``: the one way it becomes an engine.

Why: a run is "this model on these GPUs, with these ``vllm serve`` flags, N replicas behind this
router". Every interface (CLI flags, the web's forms, the dashboard, the emulator) builds this one
spec and calls ``resolve``, which fills what the user left unset with what ``vllm serve`` itself
would run on that GPU (``servesim.perf.serve_defaults``), sizes the KV cache as vLLM would, builds the
step-time model and words the ``timed as`` line. So the same question gets the same starting point
wherever it is asked, and the result says which defaults were applied.

``engine`` holds only the vLLM keys the user set (a ``--config`` file's and the flags'); their
names, types, bounds and help are ``EngineConfig``'s, the one declaration of every engine setting.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from servesim.bounds import MAX_GPU_BLOCKS, MAX_REPLICAS, MAX_TP
from servesim.cluster.config import RouterPolicy
from servesim.cluster.simulate import Replica
from servesim.engine.config import EngineConfig
from servesim.engine.kv_connector import OffloadingConnector
from servesim.engine.step_time import StepTimeModel
from servesim.errors import ConfigError, describe, shown
from servesim.perf.offload import check_offloading_size
from servesim.perf.serve_defaults import apply_serve_defaults, vllm_default_block_size
from servesim.perf.setup import (
    DEFAULT_GPU,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MODEL,
    DEFAULT_TP,
    replica_setup,
)
from servesim.spec.data_parallel import data_parallel_layout
from servesim.traces.schema import Trace


class DeploymentSpec(BaseModel):
    """One deployment as the user states it; unset fields take the defaults ``resolve`` says."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = Field(
        None, description=f"Served model (catalog name or config.json); default {DEFAULT_MODEL}."
    )
    gpu: str | None = Field(None, description=f"GPU of a replica; default {DEFAULT_GPU}.")
    tp: int | None = Field(
        None, ge=1, le=MAX_TP, description=f"Tensor-parallel degree; default {DEFAULT_TP}."
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description=f"vLLM's memory share (sizes the KV cache); default {DEFAULT_GPU_MEMORY_UTILIZATION:g}.",
    )
    profile: str | None = Field(None, description="Calibrated hardware profile (JSON path or name).")
    step_time_ms: float | None = Field(
        None,
        gt=0,
        le=3_600_000,
        allow_inf_nan=False,
        description="Every step takes this long (for step-by-step comparison) instead of the model's.",
    )
    linear_step_time: bool = Field(
        False, description="servesim's linear step model (uncalibrated) instead of the model's."
    )
    data_parallel_size: int = Field(
        1,
        ge=1,
        le=MAX_TP,
        exclude_if=lambda v: v == 1,
        description="vLLM's data-parallel size: ranks, each its own scheduler and KV cache on tp GPUs "
        "(a MoE model's ranks step in lockstep); 1: none.",
    )
    enable_expert_parallel: bool = Field(
        False,
        exclude_if=lambda v: v is False,
        description="vLLM's expert parallelism: a MoE model's experts held whole, split over the "
        "data_parallel_size x tp GPUs, instead of each sliced over them.",
    )
    replicas: int = Field(1, ge=1, le=MAX_REPLICAS, description="Identical replicas behind the router.")
    router: RouterPolicy = Field("least_outstanding", description="How arrivals are spread over replicas.")
    engine: dict[str, Any] = Field(
        default_factory=dict,
        description="The vLLM keys set (EngineConfig names); the rest are vllm serve's defaults.",
    )

    @field_validator("engine", mode="before")
    @classmethod
    def _known_keys(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        given = {str(k).replace("-", "_"): v for k, v in value.items() if v is not None}
        unknown = [k for k in given if k not in EngineConfig.model_fields]
        if unknown:
            hints = []
            for k in unknown:
                close = difflib.get_close_matches(k, list(EngineConfig.model_fields), n=1)
                hints.append(shown(k) + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ConfigError(f"unknown engine key(s) {', '.join(hints)}")
        return given

    @property
    def fixed_timing(self) -> bool:
        """Steps timed by a constant or the linear model (no GPU, no memory model)."""
        return self.step_time_ms is not None or self.linear_step_time

    @property
    def timing_gpu(self) -> str | None:
        """The GPU whose ``vllm serve`` defaults apply (None when no GPU times the steps)."""
        return None if self.fixed_timing else (self.gpu or DEFAULT_GPU)


@dataclass(frozen=True)
class ResolvedDeployment:
    """A spec made concrete: one replica's engine config (KV blocks sized), its step-time model,
    the ``timed as`` line, the extrapolation notes and the defaults that were applied."""

    spec: DeploymentSpec
    config: EngineConfig
    step_time: StepTimeModel
    timed_as: str
    notes: tuple[str, ...]
    defaults_applied: dict[str, Any]
    model: str | None
    gpu: str | None
    tp: int

    @property
    def defaults_line(self) -> str | None:
        """``defaults: max_num_seqs 1024, ... (vllm serve on h100)`` or None when all were given."""
        if not self.defaults_applied:
            return None
        values = ", ".join(f"{k} {v:,}" for k, v in self.defaults_applied.items())
        where = f"on {self.gpu}" if self.spec.timing_gpu else "with no GPU timing the steps (small-GPU row)"
        return f"defaults: {values} (what vllm serve runs {where})"

    def describe(self) -> dict[str, Any]:
        """The facts a result document carries about how it was set up."""
        return {
            "spec": self.spec.model_dump(mode="json"),
            "defaults_applied": dict(self.defaults_applied),
            "timed_as": self.timed_as,
        }

    def kv_connector(self, config: EngineConfig | None = None) -> OffloadingConnector | None:
        """A fresh CPU-offload connector when ``kv_offloading_size`` is set (None otherwise):
        sized and timed for this model on this GPU (``servesim.perf.offload``); ``config``: this
        deployment's engine with flags changed since (the dashboard's restart)."""
        config = config or self.config
        if config.kv_offloading_size is None:
            return None
        if self.model is None or self.gpu is None:
            raise ConfigError(
                "kv_offloading_size needs a model on a GPU (the CPU tier is sized in its KV bytes "
                "and timed on its host link), not a fixed or linear step time"
            )
        from servesim.perf.catalog import load_catalog
        from servesim.perf.offload import offloading_connector

        cat = load_catalog()
        return offloading_connector(
            config, cat.model(self.model), cat.gpu(self.gpu), self.tp
        )  # config's KV dtype

    def rebuild(self, engine: dict[str, Any]) -> ResolvedDeployment:
        """The same deployment with these vLLM keys changed (the dashboard's restart)."""
        return resolve(
            self.spec.model_copy(update={"engine": {**self.spec.engine, **engine}}),
            max_model_len=self.config.max_model_len,
        )


def engine_values(
    spec: DeploymentSpec, max_model_len: int | None = None
) -> tuple[EngineConfig, dict[str, Any]]:
    """The engine config of ``spec`` before KV sizing (vllm serve's defaults filled in) and the
    defaults applied; ``ConfigError`` naming the field when vLLM would refuse the values."""
    values, applied = apply_serve_defaults(
        spec.engine, spec.timing_gpu, spec.engine.get("max_model_len") or max_model_len
    )
    block = (
        None
        if "block_size" in values
        else vllm_default_block_size(spec.model, spec.timing_gpu, str(values.get("kv_cache_dtype") or "auto"))
    )
    if block is not None:  # an MLA backend's own page size (vllm serve without --block-size)
        values["block_size"] = applied["block_size"] = block
    if "num_gpu_blocks" not in values and not spec.fixed_timing:
        # sized from GPU memory by ``replica_setup``: no stand-in count may refuse a long context
        values["num_gpu_blocks"] = MAX_GPU_BLOCKS
    try:
        return EngineConfig.model_validate(values), applied
    except ValidationError as e:
        raise ConfigError(describe(e)) from None


def resolve(spec: DeploymentSpec, *, max_model_len: int | None = None) -> ResolvedDeployment:
    """The one way a spec becomes a replica: defaults, KV blocks, step times, ``timed as``.

    ``max_model_len``: the context the KV cache must hold when the spec sets none (a trace's
    longest request + 1); without either, vLLM's would come from the model (a server).
    Raises ``ConfigError`` / ``PerfError`` (both ``ServesimError``) with the reason.
    """
    config, applied = engine_values(spec, max_model_len)
    dp = data_parallel_layout(spec)
    setup = replica_setup(
        config,
        model=spec.model,
        gpu=spec.gpu,
        tp=spec.tp,
        gpu_memory_utilization=spec.gpu_memory_utilization,
        profile=spec.profile,
        max_model_len=config.max_model_len or max_model_len,
        num_gpu_blocks_given="num_gpu_blocks" in spec.engine,
        step_time_ms=spec.step_time_ms,
        linear=spec.linear_step_time,
        budget_defaulted="max_num_batched_tokens" in applied,
        expert_shards=dp.expert_shards if dp is not None else None,
    )
    check_offloading_size(setup.config.kv_offloading_size, setup.tp)
    step_time, timed_as = (setup.step_time, setup.timed_as) if dp is None else dp.timing(setup)
    return ResolvedDeployment(
        spec=spec,
        config=setup.config,
        step_time=step_time,
        timed_as=timed_as,
        notes=setup.notes,
        defaults_applied=applied,
        model=setup.model,
        gpu=setup.gpu,
        tp=setup.tp,
    )


Rebuild = Callable[[EngineConfig], tuple[EngineConfig, StepTimeModel]]


def resolve_for_trace(spec: DeploymentSpec, trace: Trace | None) -> tuple[ResolvedDeployment, Rebuild]:
    """``resolve(spec)`` with the KV cache sized for ``trace``'s longest request unless the spec
    sets ``max_model_len`` (without a trace, a server's, the spec's stands), and how to redo it
    after engine settings change (the dashboard's restart): the changed settings are laid over
    the spec's own keys, and the KV blocks are sized again unless the spec fixed them."""
    mml = trace.default_max_model_len() if trace is not None else None
    resolved = resolve(spec, max_model_len=mml)

    def rebuild(cfg: EngineConfig) -> tuple[EngineConfig, StepTimeModel]:
        changed = {k: v for k, v in cfg.model_dump().items() if v != getattr(resolved.config, k)}
        if "num_gpu_blocks" not in spec.engine:
            changed.pop("num_gpu_blocks", None)
        again = resolve(spec.model_copy(update={"engine": {**spec.engine, **changed}}), max_model_len=mml)
        return again.config, again.step_time

    return resolved, rebuild


def resolve_replicas(
    base: DeploymentSpec, replicas: Sequence[tuple[str, dict[str, Any]]], trace: Trace | None
) -> list[tuple[Replica, ResolvedDeployment]]:
    """Each named replica (its own vLLM keys over ``base``) through ``resolve``, its KV cache
    sized for ``trace``; an error names the replica. Replicas with the same keys share one
    resolution, so one step-time model: its cache of step shapes then serves the whole fleet
    (a fleet of N identical replicas would otherwise time each shape N times; the times are
    the same floats either way), as tuning's replicas (``tuning.evaluate``) always have."""
    mml = trace.default_max_model_len() if trace is not None else None
    out = []
    done: list[tuple[dict[str, Any], ResolvedDeployment]] = []  # (keys, their resolution)
    for name, keys in replicas:
        resolved = next((r for k, r in done if k == keys), None)
        if resolved is None:
            try:
                spec = DeploymentSpec.model_validate({**base.model_dump(), "engine": keys})
                resolved = resolve(spec, max_model_len=mml)
            except (ConfigError, ValidationError) as e:
                raise ConfigError(f"replica {shown(name)}: {describe(e)}") from None
            done.append((keys, resolved))
        tier = resolved.kv_connector if resolved.config.kv_offloading_size is not None else None
        out.append((Replica(name, resolved.config, resolved.step_time, tier), resolved))
    return out


__all__ = [
    "MAX_REPLICAS",
    "DeploymentSpec",
    "Rebuild",
    "ResolvedDeployment",
    "engine_values",
    "resolve",
    "resolve_for_trace",
    "resolve_replicas",
]
