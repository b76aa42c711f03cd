"""Attention layers other than full attention: sliding-window, chunked-local, Mamba, linear attention.

A model whose ``config.json`` makes some layers keep only a window of tokens (Mistral-style
``sliding_window``, Gemma's ``sliding_window_pattern``, gpt-oss' ``layer_types``) or attend within
fixed chunks (Llama 4's ``attention_chunk_size``) runs as vLLM's hybrid KV cache manager runs it
(``perf.kv_layout``: KV cache groups). One whose layers keep a recurrent state instead of a KV
cache (Mamba, linear attention) would be sized wrong without a word, so servesim refuses it and
says which layers are the reason.
The pattern is read here from the config names each architecture uses, the way vLLM 0.33 reads them
(``model_executor/models/llama4.py``, ``gemma3.py``, ``gpt_oss.py``; ``Attention`` falls back to the
model-wide ``sliding_window`` when a model gives no per-layer one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import shown
from servesim.perf.errors import CatalogError

LayerKind = Literal["sliding_window", "chunked_local", "mamba", "linear_attention"]

_WORDS: dict[str, str] = {
    "sliding_window": "sliding-window attention",
    "chunked_local": "chunked local attention",
    "mamba": "Mamba (state-space) layers",
    "linear_attention": "linear attention",
}
_LAYER_TYPE_KINDS: dict[str, LayerKind] = {
    "sliding_attention": "sliding_window",
    "chunked_attention": "chunked_local",
    "linear_attention": "linear_attention",
    "mamba": "mamba",
}
_MAMBA_TYPES = {"mamba", "mamba2", "falcon_mamba"}


class LayerPattern(BaseModel):
    """How many of a model's layers are of a kind servesim does not model, and the config field
    that says so (so a reader can check it against the published ``config.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: LayerKind
    layers: int = Field(ge=1, description="How many decoder layers are of this kind.")
    window: int | None = Field(None, ge=1, description="Tokens kept (sliding window / chunk size).")
    field: str = Field(min_length=1, description="The config.json field that sets the pattern.")

    def sentence(self, model: str, num_layers: int) -> str:
        """The one-line refusal a user sees."""
        size = f" of {self.window} tokens" if self.window else ""
        return (
            f"model {shown(model)} uses {_WORDS[self.kind]}{size} in {self.layers} of its {num_layers} "
            f"layers (config.json: {self.field}); servesim models full, sliding-window, chunked-local "
            "and MLA attention only and would size its state and step time wrong, so it does not "
            "simulate this model"
        )


class UnmodelledLayersError(CatalogError):
    """A model with attention layers servesim does not model (see ``LayerPattern``)."""


def _int(cfg: Mapping[str, Any], key: str) -> int | None:
    v = cfg.get(key)
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


def _from_layer_types(text: Mapping[str, Any]) -> LayerPattern | None:
    """``layer_types`` (gpt-oss, Gemma 3 in newer transformers, Qwen3-Next): one name per layer."""
    types = text.get("layer_types")
    if not isinstance(types, list):
        return None
    for name, kind in _LAYER_TYPE_KINDS.items():
        n = sum(1 for t in types if t == name)
        if n:
            window = _int(text, "sliding_window") if kind == "sliding_window" else None
            return LayerPattern(kind=kind, layers=n, window=window, field="layer_types")
    return None


def _chunked(text: Mapping[str, Any], layers: int) -> LayerPattern | None:
    """Llama 4: layers that use RoPE (``no_rope_layers[i] == 1``) attend within chunks; when the
    list is empty every ``no_rope_layer_interval``-th layer (default 4) is the global NoPE one."""
    chunk = _int(text, "attention_chunk_size")
    if not chunk:
        return None
    flags = text.get("no_rope_layers")
    if isinstance(flags, list) and flags:
        n = sum(1 for f in flags if f)
    else:
        n = layers - layers // (_int(text, "no_rope_layer_interval") or 4)
    return (
        LayerPattern(kind="chunked_local", layers=n, window=chunk, field="attention_chunk_size")
        if n
        else None
    )


def _sliding(text: Mapping[str, Any], layers: int, model_type: str) -> LayerPattern | None:
    """A model-wide ``sliding_window``: on every layer (Mistral, Phi-3), on all but each
    ``sliding_window_pattern``-th (Gemma 3), every other layer (Gemma 2), or from
    ``max_window_layers`` on (Qwen2/3, only when ``use_sliding_window`` is true)."""
    window = _int(text, "sliding_window")
    if not window or text.get("use_sliding_window") is False:
        return None
    if "use_sliding_window" in text:  # Qwen2/Qwen3: layers from max_window_layers on
        n = layers - min(layers, _int(text, "max_window_layers") or 0)
        field = "use_sliding_window"
    elif _int(text, "sliding_window_pattern"):
        n = layers - layers // int(text["sliding_window_pattern"])
        field = "sliding_window_pattern"
    elif model_type == "gemma2":
        n, field = layers - layers // 2, "sliding_window"
    else:
        n, field = layers, "sliding_window"
    return LayerPattern(kind="sliding_window", layers=n, window=window, field=field) if n else None


def _mamba(text: Mapping[str, Any], layers: int, model_type: str) -> LayerPattern | None:
    """Mamba layers: a pure state-space model, Jamba's ``layers_block_type`` / ``attn_layer_period``,
    Nemotron-H's ``hybrid_override_pattern`` (``M`` marks a Mamba layer)."""
    if model_type in _MAMBA_TYPES:
        return LayerPattern(kind="mamba", layers=layers, field="model_type")
    blocks = text.get("layers_block_type")
    if isinstance(blocks, list) and (n := sum(1 for b in blocks if b == "mamba")):
        return LayerPattern(kind="mamba", layers=n, field="layers_block_type")
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and (n := pattern.count("M")):
        return LayerPattern(kind="mamba", layers=n, field="hybrid_override_pattern")
    if period := _int(text, "attn_layer_period"):
        return LayerPattern(kind="mamba", layers=layers - layers // period, field="attn_layer_period")
    return None


def layer_pattern_of(text: Mapping[str, Any], layers: int, model_type: str) -> LayerPattern | None:
    """The unmodelled layers a (text) ``config.json`` declares, or None for full attention / MLA."""
    return (
        _from_layer_types(text)
        or _chunked(text, layers)
        or _mamba(text, layers, model_type)
        or _sliding(text, layers, model_type)
    )


#: The kinds servesim runs as vLLM's hybrid KV cache manager does (``perf.kv_layout``).
MODELLED: frozenset[str] = frozenset({"sliding_window", "chunked_local"})


def refuse_unmodelled(model: Any) -> None:
    """Raise the one-line refusal for a ``ModelSpec`` with Mamba or linear-attention layers; pass
    otherwise (sliding-window and chunked-local layers run as KV cache groups)."""
    pattern: LayerPattern | None = getattr(model, "layer_pattern", None)
    if pattern is not None and pattern.kind not in MODELLED:
        raise UnmodelledLayersError(pattern.sentence(model.name, model.num_layers))
