"""Checks made when a job is submitted (422 naming each field), so a job never fails later on
input the server could have refused at the door: a tune space, the advisor's availability, the
trial budget, the deployment and its engine settings with the GPU's ``vllm serve`` defaults."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from servesim.bounds import MAX_GPU_BLOCKS
from servesim.errors import ConfigError, user_errors
from servesim.services.deployment import DeploymentSpec
from servesim.services.perf import DEFAULT_TP, apply_serve_defaults, check_offloading_size
from servesim.services.run import EngineConfig
from servesim.web.problems import Problem
from servesim.web.schemas import WEB_MAX_REPLICAS, AdviseBody, SimulateBody, SpecBody, TuneBody

FIELD = "body.deployment"


def _refuse(field: str, reason: str) -> Problem:
    return Problem(422, f"{field}: {reason}", errors=[{"field": field, "reason": reason}])


def check_deployment(spec: DeploymentSpec, *, max_replicas: int = WEB_MAX_REPLICAS) -> None:
    """The deployment a job will resolve, checked at the door as the CLI checks its flags before
    reading the trace: the catalog's model and GPU, a shipped hardware profile (never a path on
    the server), this server's replica bound, and step timing that does not contradict itself."""
    from servesim.services.perf import builtin_profile_names, load_catalog
    from servesim.services.tune import hardware_of

    catalog = load_catalog()
    if spec.model is not None:
        catalog.model(spec.model)  # UnknownModelError (a user error: 422) names the known ones
    if spec.gpu is not None:
        catalog.gpu(spec.gpu)
    if spec.profile is not None and spec.profile not in builtin_profile_names():
        names = ", ".join(builtin_profile_names())
        raise _refuse(f"{FIELD}.profile", f"a shipped profile name ({names}), not a file on the server")
    if spec.replicas > max_replicas:
        raise _refuse(f"{FIELD}.replicas", f"this server simulates at most {max_replicas} replicas per job")
    hardware_of(spec)  # ConfigError: a fixed step time with a GPU, or without num_gpu_blocks


def _adapter(name: str) -> TypeAdapter[Any]:
    field = EngineConfig.model_fields[name]
    annotation: Any = field.annotation
    return TypeAdapter(Annotated[(annotation, *field.metadata)] if field.metadata else annotation)


_ADAPTERS = {name: _adapter(name) for name in EngineConfig.model_fields}


def typed_deployment(spec: DeploymentSpec) -> DeploymentSpec:
    """``spec`` with each vLLM key's value checked against its ``EngineConfig`` field and in its
    type (``"64"`` is 64), as the CLI checks each flag: 422 naming every field refused. The job
    then stores and resolves typed values."""
    typed: dict[str, Any] = {}
    errors: list[dict[str, str]] = []
    for key, value in spec.engine.items():
        try:
            typed[key] = _ADAPTERS[key].validate_python(value)
        except ValidationError as exc:  # a nested object's errors name its field (speculative_config.method)
            errors.extend(
                {
                    "field": ".".join([f"{FIELD}.engine.{key}", *(str(x) for x in e["loc"])]),
                    "reason": str(e["msg"]).removeprefix("Value error, "),
                }
                for e in exc.errors()
            )
    if errors:
        raise Problem(422, "; ".join(f"{e['field']}: {e['reason']}" for e in errors), errors=errors)
    return spec.model_copy(update={"engine": typed}) if typed != spec.engine else spec


B = TypeVar("B", bound=SpecBody)


def at_the_door(body: B) -> tuple[B, EngineConfig]:
    """A job's body with its deployment checked and typed (``typed_deployment``,
    ``checked_engine``), and the engine config it will run before KV sizing."""
    spec = typed_deployment(body.deployment)
    if spec is not body.deployment:
        body = body.model_copy(update={"deployment": spec})
    return body, checked_engine(spec)


def checked_engine(spec: DeploymentSpec) -> EngineConfig:
    """The engine ``spec`` will run before KV sizing (the GPU's ``vllm serve`` defaults where it
    set none), checked at the door: 422 naming the field vLLM would refuse (e.g. a
    max_num_batched_tokens below the GPU's default max_num_seqs), as ``servesim.spec.resolve``
    would refuse it in the job."""
    check_deployment(spec)
    values, _ = apply_serve_defaults(spec.engine, spec.timing_gpu, spec.engine.get("max_model_len"))
    if "num_gpu_blocks" not in values and not spec.fixed_timing:
        values["num_gpu_blocks"] = MAX_GPU_BLOCKS  # sized from GPU memory in the job
    try:
        config = EngineConfig.model_validate(values)
    except ValidationError as exc:
        errors = [
            {
                "field": ".".join([FIELD, "engine", *(str(x) for x in e["loc"])]),
                "reason": str(e["msg"]).removeprefix("Value error, "),
            }
            for e in exc.errors()
        ]
        raise Problem(422, "; ".join(f"{e['field']}: {e['reason']}" for e in errors), errors=errors) from None
    try:
        check_offloading_size(config.kv_offloading_size, DEFAULT_TP if spec.tp is None else spec.tp)
    except ConfigError as exc:  # the bound every interface gets from servesim.spec.resolve
        raise _refuse(f"{FIELD}.engine.kv_offloading_size", str(exc)) from None
    check_drafter(spec, config)
    return config


def check_drafter(spec: DeploymentSpec, config: EngineConfig) -> None:
    """The drafter of the speculative config on the deployment's model and GPU, built as the
    job builds it (``services.deployment.check_drafter``): 422 naming ``speculative_config`` for
    one that cannot run there (an unknown draft model, another vocabulary, a TP vLLM refuses)."""
    from servesim.services.deployment import check_drafter as drafter_runs

    try:
        drafter_runs(spec, config)
    except ConfigError as exc:
        reason = str(exc).removeprefix("speculative_config").lstrip(".: ")
        raise _refuse(f"{FIELD}.engine.speculative_config", reason) from None


def check_pools(body: SimulateBody) -> None:
    """A disaggregated run's pools checked at the door as the deployment is: each pool's GPU in
    the catalog (422 naming ``body.disaggregated.POOL.gpu``), and the deployment's vLLM keys with
    the ``vllm serve`` defaults of each pool's GPU (``checked_engine``)."""
    from servesim.services.deployment import DisaggregatedSpec, runnable_deployment
    from servesim.services.perf import load_catalog

    pd = body.disaggregated
    if pd is None:
        return
    catalog = load_catalog()
    for name, pool in (("prefill", pd.prefill), ("decode", pd.decode)):
        if pool.gpu is not None:
            try:
                catalog.gpu(pool.gpu)
            except user_errors() as exc:
                raise _refuse(f"body.disaggregated.{name}.gpu", str(exc)) from None
    made = DisaggregatedSpec.of_pools(body.pools(), body.deployment.gpu, body.shared())
    for dep in (made.prefill, made.decode):  # each as its replicas resolve it
        checked_engine(runnable_deployment(dep).model_copy(update={"replicas": 1}))


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
    return str(exc)


def space_errors(space: dict[str, Any]) -> list[dict[str, str]]:
    """Every knob of a tune space that the tuner would refuse, each with its reason."""
    from servesim.services.tune import space_from_mapping

    errors = []
    for name, spec in space.items():
        try:
            space_from_mapping({name: spec})
        except user_errors() as exc:
            errors.append({"field": f"body.space.{name}", "reason": _reason(exc)})
    if not errors:
        try:
            space_from_mapping(space)
        except user_errors() as exc:
            errors.append({"field": "body.space", "reason": _reason(exc)})
    return errors


def check_tune(body: TuneBody, max_trials: int) -> None:
    errors = []
    if body.n_trials > max_trials:
        errors.append({"field": "body.n_trials", "reason": f"this server runs at most {max_trials} per job"})
    if body.space:
        errors += space_errors(body.space)
    errors += gpu_types_errors(body, max_trials)
    errors += layouts_errors(body)
    if errors:
        raise Problem(422, "; ".join(f"{e['field']}: {e['reason']}" for e in errors), errors=errors)


def layouts_errors(body: TuneBody) -> list[dict[str, str]]:
    """The deployment's settings a layouts question cannot keep (``servesim tune --layouts``
    refuses the same flags): TP, which it searches, and every vLLM key but the checkpoint's
    ``quantization`` and ``kv_cache_dtype``, which every layout runs with."""
    from servesim.services.layouts import DEPLOYMENT_KEYS, refused_keys

    if body.layouts is None:
        return []
    kept = ", ".join(DEPLOYMENT_KEYS)
    out = []
    for key in refused_keys(body.deployment):
        if key == "tp":
            out.append({"field": "body.deployment.tp", "reason": "layouts searches TP: drop it"})
        else:
            reason = (
                f"layouts runs every pool at vllm serve's defaults (tune the pools with "
                f"layouts.prefill_batched_tokens / decode_max_seqs; of the engine keys only {kept} "
                "are kept): drop it"
            )
            out.append({"field": f"body.deployment.engine.{key}", "reason": reason})
    return out


def gpu_types_errors(body: TuneBody, max_trials: int) -> list[dict[str, str]]:
    """What cannot go with ``gpu_types`` (as ``servesim tune --gpu-types`` refuses it), each
    naming its field, and the server's trial bound over every type's study."""
    from servesim.services.gpu_types import gpu_type_names

    if not body.gpu_types:
        return []
    n = len(gpu_type_names(body.gpu_types, body.gpu_prices, flag="gpu_types"))  # one study per type
    out = []
    if body.layouts is not None:
        out.append(("body.layouts", "gpu_types searches the flag study's GPU type: drop layouts"))
    if body.deployment.gpu is not None:
        out.append(("body.deployment.gpu", "sets one GPU, gpu_types compares several: give one of them"))
    if body.gpu_hour_usd is not None:
        out.append(
            ("body.gpu_hour_usd", "prices one GPU: with gpu_types give each type's price in gpu_prices")
        )
    if body.deployment.fixed_timing:
        out.append(
            ("body.deployment", "gpu_types needs the roofline step-time model: drop the fixed step time")
        )
    if n > 1 and body.n_trials * n > max_trials:
        out.append(
            (
                "body.n_trials",
                f"{body.n_trials} trials for each of {n} GPU types: this server runs at most "
                f"{max_trials} per job",
            )
        )
    return [{"field": f, "reason": r} for f, r in out]


def check_advisor(body: AdviseBody) -> None:
    from servesim.services.advice import ClaudeAdvisor

    if body.advisor in ("claude", "dspy") and not ClaudeAdvisor.available():
        reason = "this server has no ANTHROPIC_API_KEY: choose 'rules' or 'auto'"
        raise Problem(422, f"body.advisor: {reason}", errors=[{"field": "body.advisor", "reason": reason}])
