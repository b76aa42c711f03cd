"""Attention layers other than full attention: sliding-window, chunked-local, Mamba, linear attention.

A model whose ``config.json`` makes some layers keep only a window of tokens (Mistral-style
``sliding_window``, Gemma's ``sliding_window_pattern``, gpt-oss' ``layer_types``) or attend within
fixed chunks (Llama 4's ``attention_chunk_size``) runs as vLLM's hybrid KV cache manager runs it
(``perf.kv_layout``: KV cache groups). Layers that keep a recurrent state instead of a KV cache run
as vLLM's Mamba KV cache groups (one state block per request, ``MambaSpec``) where servesim knows
the state's shape: Qwen3-Next's GatedDeltaNet linear attention (``GatedDeltaNetState``, the shapes
of vLLM's ``MambaStateShapeCalculator.gated_delta_net_state_shape``). Other state-space layers
(Mamba-1/2 in Jamba, Nemotron-H, Granite-4.0-H) would be sized wrong without a word, so servesim
refuses them and says which layers are the reason.
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
#: Models whose ``linear_attention`` layers are vLLM's GatedDeltaNet (``qwen3_next.py``).
_GATED_DELTA_NET_TYPES = {"qwen3_next"}
_GATED_DELTA_NET_FIELDS = {
    "num_k_heads": "linear_num_key_heads",
    "num_v_heads": "linear_num_value_heads",
    "head_k_dim": "linear_key_head_dim",
    "head_v_dim": "linear_value_head_dim",
    "conv_kernel": "linear_conv_kernel_dim",
}


class GatedDeltaNetState(BaseModel):
    """One GatedDeltaNet layer's recurrent state, from the config fields vLLM's ``qwen3_next.py``
    reads (``linear_*``): a causal-convolution state of ``conv_kernel - 1`` columns over the q, k
    and v channels, and one ``head_v_dim x head_k_dim`` matrix per value head, both split over the
    tensor-parallel ranks and kept in the model's dtype (vLLM's ``mamba_cache_dtype`` and
    ``mamba_ssm_cache_dtype`` default to it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_k_heads: int = Field(ge=1, description="linear_num_key_heads")
    num_v_heads: int = Field(ge=1, description="linear_num_value_heads")
    head_k_dim: int = Field(ge=1, description="linear_key_head_dim")
    head_v_dim: int = Field(ge=1, description="linear_value_head_dim")
    conv_kernel: int = Field(ge=2, description="linear_conv_kernel_dim")

    @property
    def conv_dim(self) -> int:
        return 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim

    def elements(self, tp: int) -> tuple[int, int]:
        """(conv state, temporal state) elements on one TP rank (vLLM's ``divide``: exact)."""
        return self.conv_dim // tp * (
            self.conv_kernel - 1
        ), self.num_v_heads // tp * self.head_v_dim * self.head_k_dim

    def params(self, hidden: int) -> int:
        """One layer's projections (vLLM's ``in_proj_qkvz``: q, k, v and the gate z;
        ``in_proj_ba``: two scalars per value head; ``out_proj``) and its causal convolution over
        the q, k and v channels."""
        key, value = self.num_k_heads * self.head_k_dim, self.num_v_heads * self.head_v_dim
        proj = hidden * (2 * key + 2 * value) + hidden * 2 * self.num_v_heads + value * hidden
        return proj + self.conv_dim * self.conv_kernel

    def page_bytes(self, tp: int, dtype_bytes: float) -> int:
        """``MambaSpec.page_size_bytes`` before padding: both states of one layer on one rank."""
        conv, temporal = self.elements(tp)
        return round((conv + temporal) * dtype_bytes)

    def check_tp(self, tp: int) -> str | None:
        """Why vLLM cannot split the state over ``tp`` ranks (its ``divide`` asserts), or None."""
        if self.conv_dim % tp or self.num_v_heads % tp:
            return (
                f"the linear-attention state ({self.num_v_heads} value heads, {self.conv_dim} conv "
                f"channels) does not split over TP={tp}"
            )
        return None


class LayerPattern(BaseModel):
    """How many of a model's layers are not full attention, of which kind, and the config field
    that says so (so a reader can check it against the published ``config.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: LayerKind
    layers: int = Field(ge=1, description="How many decoder layers are of this kind.")
    window: int | None = Field(None, ge=1, description="Tokens kept (sliding window / chunk size).")
    field: str = Field(min_length=1, description="The config.json field that sets the pattern.")
    state: GatedDeltaNetState | None = Field(
        None, description="Linear attention: the recurrent state's shape (None: not modelled)."
    )

    @property
    def is_state(self) -> bool:
        """Whether these layers keep a recurrent state (Mamba / linear attention), not KV."""
        return self.kind in ("mamba", "linear_attention")

    @property
    def modelled(self) -> bool:
        """Whether servesim runs these layers (windowed ones, or a state whose shape it knows)."""
        return self.kind in ("sliding_window", "chunked_local") or self.state is not None

    def sentence(self, model: str, num_layers: int) -> str:
        """The one-line refusal a user sees."""
        size = f" of {self.window} tokens" if self.window else ""
        return (
            f"model {shown(model)} uses {_WORDS[self.kind]}{size} in {self.layers} of its {num_layers} "
            f"layers (config.json: {self.field}); servesim models full, sliding-window, chunked-local "
            "and MLA attention and Qwen3-Next's GatedDeltaNet linear attention only and would size "
            "its state and step time wrong, so it does not simulate this model"
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
            state = _gated_delta_net(text) if kind == "linear_attention" else None
            return LayerPattern(kind=kind, layers=n, window=window, field="layer_types", state=state)
    return None


def _gated_delta_net(text: Mapping[str, Any]) -> GatedDeltaNetState | None:
    """Qwen3-Next's GatedDeltaNet state sizes (``linear_*`` fields), or None when one is missing
    (another linear attention, whose state servesim does not know: refused)."""
    if text.get("model_type") not in _GATED_DELTA_NET_TYPES:
        return None
    sizes = {f: _int(text, key) for f, key in _GATED_DELTA_NET_FIELDS.items()}
    if any(v is None for v in sizes.values()):
        return None
    return GatedDeltaNetState(**sizes)


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


def refuse_unmodelled(model: Any) -> None:
    """Raise the one-line refusal for a ``ModelSpec`` with Mamba or linear-attention layers whose
    state servesim does not know; pass otherwise (sliding-window, chunked-local and GatedDeltaNet
    layers run as KV cache groups)."""
    pattern: LayerPattern | None = getattr(model, "layer_pattern", None)
    if pattern is not None and not pattern.modelled:
        raise UnmodelledLayersError(pattern.sentence(model.name, model.num_layers))
