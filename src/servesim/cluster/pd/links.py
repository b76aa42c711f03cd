"""The KV-transfer links of a disaggregated fleet: the catalog's presets (``data/perf/links.yaml``)
and the transfer cost model a fleet runs with (``pd_context``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from servesim.cluster.recovery.costs import RecoveryContext
from servesim.errors import InputError, shown
from servesim.perf.shipped import shipped_yaml


class LinkPreset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str
    bandwidth_gbps: float = Field(gt=0)
    setup_latency_ms: float = Field(ge=0)
    efficiency: float = Field(gt=0, le=1)
    sources: dict[str, str]


def link_presets() -> dict[str, LinkPreset]:
    """The catalog's KV-transfer links (``data/perf/links.yaml``), by name."""
    return {k: LinkPreset.model_validate(v) for k, v in shipped_yaml("links.yaml")["links"].items()}


def link_preset(name: str) -> LinkPreset:
    presets = link_presets()
    if name not in presets:
        raise InputError(f"unknown link {shown(name)}; presets: {', '.join(sorted(presets))}")
    return presets[name]


def pd_context(
    model: str, prefill_tp: int | None, decode_tp: int | None, link: str, kv_dtype: str = "auto"
) -> RecoveryContext:
    """The transfer cost model: the served model's KV per rank (as ``kv_dtype`` stores it) over
    the preset link; the smaller TP degree of the two pools sets the shard each rank moves."""
    from servesim.perf import load_catalog
    from servesim.perf.catalog import resolve_model

    preset = link_preset(link)
    return RecoveryContext(
        model=resolve_model(model, load_catalog()),
        tp=min(prefill_tp or 1, decode_tp or 1),
        kv_dtype=kv_dtype,
        bandwidth_gbps=preset.bandwidth_gbps,
        transfer_efficiency=preset.efficiency,
        setup_latency_s=preset.setup_latency_ms / 1000.0,
    )


__all__ = ["LinkPreset", "link_preset", "link_presets", "pd_context"]
