"""``/api/catalog``: what the forms offer: models, GPUs, vLLM flags with defaults and help, presets."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, get_args

from fastapi import APIRouter, Query

from servesim.services.deployment import DeploymentSpec, PercentileSLO
from servesim.services.run import (
    ACCEPTANCE_PRESETS,
    MAX_SPEC_TOKENS,
    EngineConfig,
    SpecMethod,
    SpeculativeConfig,
)
from servesim.services.traces import FORMAT_NAMES, PRESETS
from servesim.web.schemas import WEB_MAX_REPLICAS

router = APIRouter(prefix="/api", tags=["catalog"])
#: Settings servesim adds for analysis (vLLM has no such flag); the page marks them.
SERVESIM_ONLY = frozenset({"starvation_threshold", "starvation_mitigation", "queue_timeout_s"})
#: Set from the model, GPU and memory share unless given: offered with the deployment's fields.
SIZED = frozenset({"num_gpu_blocks"})
#: The deployment's fields the form offers (profiles and fixed step times are the CLI's).
DEPLOYMENT_FORM = ("model", "gpu", "tp", "gpu_memory_utilization", "replicas", "router")
#: An object, not a flag's value: the form's "Speculative decoding" group (``speculative_fields``).
NESTED = frozenset({"speculative_config"})


def deployment_fields() -> list[dict[str, Any]]:
    """The shared deployment panel's fields: ``DeploymentSpec``'s (the CLI's ``--model``, ``--gpu``,
    ``--tp`` ... with their defaults), then ``num_gpu_blocks`` (a vLLM key the memory model sizes
    unless it is given, as ``--num-gpu-blocks-override``)."""
    from servesim.services.perf import DEFAULT_GPU, DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_MODEL, DEFAULT_TP

    defaults = {
        "model": DEFAULT_MODEL,
        "gpu": DEFAULT_GPU,
        "tp": DEFAULT_TP,
        "gpu_memory_utilization": DEFAULT_GPU_MEMORY_UTILIZATION,
    }
    by_name = {f["name"]: f for f in flag_specs(DeploymentSpec)}
    out = []
    for name in DEPLOYMENT_FORM:
        spec = dict(by_name[name])
        if name in defaults:  # the help says the default once (the form adds it)
            spec.update(default=defaults[name], nullable=False, help=spec["help"].split("; default")[0] + ".")
        if name == "replicas":
            spec["maximum"] = WEB_MAX_REPLICAS
        out.append(spec)
    blocks = next(f for f in flag_specs(EngineConfig) if f["name"] == "num_gpu_blocks")
    blocks.update(
        default=None,
        nullable=True,
        engine=True,
        help="KV blocks in the pool instead of what the memory model sizes from the GPU "
        "(vLLM --num-gpu-blocks-override); empty: sized as vLLM does.",
    )
    return [*out, blocks]


def speculative_fields() -> dict[str, Any]:
    """The Run tab's "Speculative decoding" group: ``EngineConfig.speculative_config`` (vLLM's
    ``--speculative-config`` JSON, as the CLI takes it): the engine's methods, k's bound, each
    method's acceptance preset (per-position rates) and the fields' help from the library."""
    props = SpeculativeConfig.model_json_schema()["properties"]
    return {
        "name": "speculative_config",
        "flag": "--speculative-config",
        "help": EngineConfig.model_fields["speculative_config"].description or "",
        "methods": list(get_args(SpecMethod)),
        "max_num_speculative_tokens": MAX_SPEC_TOKENS,
        "presets": {m: list(r) for m, r in ACCEPTANCE_PRESETS.items()},
        "field_help": {
            k: props[k].get("description", "")
            for k in ("method", "num_speculative_tokens", "acceptance_rates")
        },
    }


def flag_specs(model: type[Any], skip: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Each field as a form input: its ``--kebab-case`` flag, type, default, bounds, choices, help."""
    schema = model.model_json_schema()
    out = []
    for name, prop in schema["properties"].items():
        if name in skip:
            continue
        options = prop.get("anyOf", [prop])
        main = next((o for o in options if o.get("type") != "null"), options[0])
        out.append(
            {
                "name": name,
                "flag": "--" + name.replace("_", "-"),
                "type": main.get("type", "string"),
                "enum": main.get("enum"),
                "default": prop.get("default"),
                "nullable": any(o.get("type") == "null" for o in options),
                "minimum": main.get("minimum", main.get("exclusiveMinimum")),
                "maximum": main.get("maximum", main.get("exclusiveMaximum")),
                "help": prop.get("description", ""),
                "vllm": name not in SERVESIM_ONLY,
            }
        )
    return out


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Any]:
    from servesim.services.cluster import link_presets
    from servesim.services.perf import load_catalog
    from servesim.views.glossary import METRICS

    cat = load_catalog()
    return {
        # the KV-transfer links of a disaggregated run (data/perf/links.yaml)
        "links": [
            {
                "name": name,
                "description": x.description,
                "bandwidth_gbps": x.bandwidth_gbps,
                "setup_latency_ms": x.setup_latency_ms,
            }
            for name, x in link_presets().items()
        ],
        "models": [
            {"name": m.name, "hf_id": m.hf_id, "architecture": m.architecture, "dtype": m.dtype}
            for m in cat.models.values()
        ],
        "gpus": [
            {"name": g.name, "description": g.description, "memory_gb": g.memory_bytes / 1e9}
            for g in cat.gpus.values()
        ],
        "engine_flags": flag_specs(EngineConfig, SIZED | NESTED),
        "speculative": speculative_fields(),
        "deployment_fields": deployment_fields(),
        "percentile_slo_fields": flag_specs(PercentileSLO),
        "presets": list(PRESETS),
        "formats": list(FORMAT_NAMES),
        "glossary": {k: v._asdict() for k, v in METRICS.items()},
        "tune_defaults": tune_form_defaults(),
    }


def tune_form_defaults() -> dict[str, Any]:
    """The Tune form's starting values: the API body's defaults, which are the CLI's
    (``servesim.tune_defaults``), so that a study started from the form asks what ``servesim
    tune`` asks."""
    from servesim.web.schemas import TuneBody

    fields = TuneBody.model_fields
    return {k: fields[k].default for k in ("n_trials", "trial_seeds", "verify_seeds", "pruning")}


@router.get("/catalog", summary="Models, GPUs, vLLM flags (defaults, help), SLO fields, presets, glossary")
def catalog() -> dict[str, Any]:
    return _catalog()


@router.get("/defaults", summary="The engine defaults a run on this GPU gets (what `vllm serve` applies)")
def defaults(
    gpu: str = Query("h100", min_length=1, max_length=100, description="A catalog GPU name."),
) -> dict[str, Any]:
    from servesim.services.perf import load_catalog
    from servesim.web.defaults import engine_defaults

    load_catalog().gpu(gpu)  # UnknownGPUError (a user error: 422) names the known ones
    return {"gpu": gpu, "engine": engine_defaults(gpu), "source": "vllm serve (usage-context defaults)"}
