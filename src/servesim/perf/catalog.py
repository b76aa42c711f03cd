"""Model and GPU catalogs: architectures from public ``config.json`` files, GPUs from datasheets.

The shipped catalogs are YAML files in ``servesim/data/perf`` (``models.yaml``, ``gpus.yaml``).
A user extends them with a YAML file of the same shape (``models:`` and/or ``gpus:``, keyed by
name); entries of a user file replace shipped entries of the same name. A local Hugging Face
``config.json`` (or a folder holding one) can stand in for a model name anywhere a model is
asked for; nothing is downloaded at run time.

Names are matched case-insensitively, against the catalog key, the aliases and the Hugging Face
id (``meta-llama/Llama-3.1-8B-Instruct`` finds ``llama-3.1-8b``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servesim.errors import InputError, InternalError, shown
from servesim.perf.errors import CatalogError, UnknownGPUError, UnknownModelError
from servesim.perf.gpu_spec import HOST_LINK_OVERHEAD_S as HOST_LINK_OVERHEAD_S
from servesim.perf.gpu_spec import GPUSpec as GPUSpec
from servesim.perf.layer_pattern import LayerPattern, layer_pattern_of, refuse_unmodelled
from servesim.perf.precision import WEIGHT_DTYPE_BYTES, WeightDType, weight_format_of
from servesim.perf.shipped import shipped_yaml

DType = Literal["bfloat16", "float16", "float32"]
QuantizedModule = Literal["attention", "mlp", "experts", "shared_experts"]

ALL_QUANTIZED_MODULES: tuple[QuantizedModule, ...] = ("attention", "mlp", "experts", "shared_experts")

DTYPE_BYTES: dict[str, float] = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "float32": 4.0,
    **WEIGHT_DTYPE_BYTES,
}

_ADD_MODEL_HINT = (
    "add one with --catalog FILE (a YAML file with a 'models:' mapping, same fields as "
    "servesim/data/perf/models.yaml) or pass the path of a local Hugging Face config.json"
)
_ADD_GPU_HINT = (
    "add one with --catalog FILE (a YAML file with a 'gpus:' mapping, same fields as "
    "servesim/data/perf/gpus.yaml)"
)


class ModelSpec(BaseModel):
    """A decoder-only transformer, as far as time and memory are concerned.

    Sizes follow the Hugging Face config names. For mixture-of-experts models
    ``intermediate_size`` is the dense MLP width (of the layers that are not MoE, if any) and
    ``moe_intermediate_size`` the width of one routed expert; layer ``i`` (0-based) is an MoE
    layer when ``(i + 1) % moe_layer_interval == 0``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Catalog key (lower case).")
    hf_id: str | None = Field(None, description="Hugging Face model id.")
    aliases: list[str] = Field(default_factory=list)
    architecture: str | None = Field(None, description="Hugging Face architecture class.")
    num_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    intermediate_size: int = Field(ge=1, description="Dense MLP width.")
    num_attention_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1, description="Key/value heads (GQA); equal to attention heads for MHA.")
    head_dim: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    tie_word_embeddings: bool = False
    max_position_embeddings: int = Field(ge=1)
    gated_mlp: bool = Field(True, description="SwiGLU-style MLP (gate, up, down) rather than two matrices.")
    attention_bias: bool = Field(False, description="Biases on the Q/K/V projections.")
    num_experts: int = Field(0, ge=0, description="Routed experts per MoE layer (0 = dense model).")
    experts_per_token: int = Field(0, ge=0)
    moe_intermediate_size: int | None = Field(None, ge=1, description="Width of one routed expert.")
    shared_expert_intermediate_size: int = Field(0, ge=0, description="Total width of the shared expert(s).")
    moe_layer_interval: int = Field(1, ge=1, description="Every n-th layer is an MoE layer.")
    first_dense_layers: int = Field(
        0, ge=0, description="Leading layers with a dense MLP before any MoE layer (first_k_dense_replace)."
    )
    kv_lora_rank: int | None = Field(None, ge=1, description="MLA: width of the cached latent KV.")
    q_lora_rank: int | None = Field(None, ge=1, description="MLA: width of the query's low-rank input.")
    qk_nope_head_dim: int | None = Field(None, ge=1, description="MLA: per-head q/k width without rope.")
    qk_rope_head_dim: int | None = Field(None, ge=1, description="MLA: the shared rotary key's width.")
    v_head_dim: int | None = Field(None, ge=1, description="MLA: per-head value width.")
    dtype: DType = Field("bfloat16", description="Activation and default weight/KV dtype.")
    weight_dtype: WeightDType | None = Field(
        None, description="Storage of quantized linear weights (None = dtype)."
    )
    quantized_modules: list[QuantizedModule] = Field(
        default_factory=lambda: list(ALL_QUANTIZED_MODULES),
        description="Which linear layers weight_dtype applies to (embeddings/lm_head stay in dtype).",
    )
    extra_params: int = Field(
        0, ge=0, description="Parameters outside the text decoder (e.g. a vision encoder), in dtype."
    )
    layer_pattern: LayerPattern | None = Field(
        None,
        description="Sliding-window / chunked-local layers (KV cache groups), or Mamba / linear "
        "layers (refused).",
    )
    source: str | None = Field(None, description="Where the numbers come from (config.json URL).")
    notes: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise InputError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.num_experts:
            if not 1 <= self.experts_per_token <= self.num_experts:
                raise InputError(
                    f"experts_per_token ({self.experts_per_token}) must be in "
                    f"1..num_experts ({self.num_experts})"
                )
        elif self.experts_per_token or self.shared_expert_intermediate_size:
            raise InputError("experts_per_token / shared_expert_intermediate_size need num_experts > 0")
        if self.kv_lora_rank is not None:
            dims = (self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim)
            if None in dims:
                raise InputError("MLA (kv_lora_rank) needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim")
            if self.head_dim != int(dims[0] or 0) + int(dims[1] or 0) or self.num_kv_heads != 1:
                raise InputError(
                    "MLA (kv_lora_rank): head_dim must be qk_nope_head_dim + qk_rope_head_dim and "
                    "num_kv_heads 1 (one latent KV head, as vLLM caches it)"
                )
        return self

    # ------------------------------------------------------------------ derived sizes
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def expert_intermediate_size(self) -> int:
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def num_moe_layers(self) -> int:
        if not self.num_experts:
            return 0
        return sum(
            1
            for i in range(self.first_dense_layers, self.num_layers)
            if (i + 1) % self.moe_layer_interval == 0
        )

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def attention_params_per_layer(self) -> int:
        """Q, K, V and output projections (+ Q/K/V biases); MLA's low-rank ones (``perf.mla``)."""
        if self.is_mla:
            from servesim.perf.mla import attention_params

            return attention_params(self)
        h = self.hidden_size
        p = h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        if self.attention_bias:
            p += self.q_dim + 2 * self.kv_dim
        return p

    @property
    def num_state_layers(self) -> int:
        """Layers that keep a recurrent state instead of KV (Qwen3-Next's GatedDeltaNet)."""
        p = self.layer_pattern
        return p.layers if p is not None and p.is_state else 0

    @property
    def num_attention_layers(self) -> int:
        """Layers with a KV cache (every layer but the state layers)."""
        return self.num_layers - self.num_state_layers

    @property
    def state_params_per_layer(self) -> int:
        """A GatedDeltaNet layer's parameters (``GatedDeltaNetState.params``); 0 without one."""
        st = self.layer_pattern.state if self.layer_pattern is not None else None
        return 0 if st is None else st.params(self.hidden_size)

    @property
    def mixer_params(self) -> int:
        """Every layer's token mixer: attention projections, or a state layer's (``num_params``)."""
        return (
            self.num_attention_layers * self.attention_params_per_layer
            + self.num_state_layers * self.state_params_per_layer
        )

    @property
    def dense_mlp_params_per_layer(self) -> int:
        return self.mlp_matrices * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """One routed expert."""
        return self.mlp_matrices * self.hidden_size * self.expert_intermediate_size

    @property
    def shared_expert_params_per_layer(self) -> int:
        return self.mlp_matrices * self.hidden_size * self.shared_expert_intermediate_size

    @property
    def router_params_per_layer(self) -> int:
        return self.hidden_size * self.num_experts

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def norm_params(self) -> int:
        latent = (self.q_lora_rank or 0) + (self.kv_lora_rank or 0)  # MLA's latent RMSNorms
        return (2 * self.num_layers + 1) * self.hidden_size + self.num_layers * latent

    @property
    def rope_dim(self) -> int:
        """Width of the rotary cos/sin table: the head (the shared rope key under MLA)."""
        return self.qk_rope_head_dim or self.head_dim if self.is_mla else self.head_dim

    @property
    def num_params(self) -> int:
        """Every parameter (text decoder, embeddings, extra modules)."""
        moe = self.num_moe_layers
        return (
            self.mixer_params
            + self.num_dense_layers * self.dense_mlp_params_per_layer
            + moe
            * (
                self.num_experts * self.expert_params
                + self.shared_expert_params_per_layer
                + self.router_params_per_layer
            )
            + self.embedding_params
            + self.lm_head_params
            + self.norm_params
            + self.extra_params
        )

    @property
    def active_params_per_token(self) -> int:
        """Parameters one token uses, counted as model cards count "activated" parameters: every
        dense parameter (embeddings included) plus ``experts_per_token`` routed experts per MoE layer."""
        moe = self.num_moe_layers
        return (
            self.mixer_params
            + self.num_dense_layers * self.dense_mlp_params_per_layer
            + moe
            * (
                self.experts_per_token * self.expert_params
                + self.shared_expert_params_per_layer
                + self.router_params_per_layer
            )
            + self.embedding_params
            + self.lm_head_params
            + self.norm_params
        )

    def bytes_of(self, module: QuantizedModule) -> float:
        """Bytes per weight of one kind of linear layer."""
        if self.weight_dtype is not None and module in self.quantized_modules:
            return DTYPE_BYTES[self.weight_dtype]
        return DTYPE_BYTES[self.dtype]

    @property
    def dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]

    def describe(self) -> str:
        kind = f"MoE {self.num_experts}x top-{self.experts_per_token}" if self.is_moe else "dense"
        kind += f", MLA (latent KV {self.kv_lora_rank}+{self.qk_rope_head_dim})" if self.is_mla else ""
        prec = self.dtype if self.weight_dtype is None else f"{self.weight_dtype} weights, {self.dtype}"
        return f"{self.num_params / 1e9:.1f}B params, {kind}, {prec}"


class Catalog:
    """Models and GPUs by name, with alias and Hugging Face id look-up."""

    def __init__(self, models: Mapping[str, ModelSpec], gpus: Mapping[str, GPUSpec]) -> None:
        self.models: dict[str, ModelSpec] = dict(models)
        self.gpus: dict[str, GPUSpec] = dict(gpus)
        self._model_keys = _index(self.models.values(), lambda m: [m.name, *m.aliases, m.hf_id or ""])
        self._gpu_keys = _index(self.gpus.values(), lambda g: [g.name, *g.aliases])

    def model(self, name: str) -> ModelSpec:
        """The entry to simulate; one with Mamba or linear-attention layers is refused."""
        spec = self.entry(name)
        refuse_unmodelled(spec)
        return spec

    def entry(self, name: str) -> ModelSpec:
        """The catalog entry as published, refused or not (to list or describe it)."""
        key = _norm(name)
        found = self._model_keys.get(key) or self._model_keys.get(_norm(name.split("/")[-1]))
        if found is None:
            raise UnknownModelError(
                f"unknown model {shown(name)}; known models: {', '.join(sorted(self.models))}; "
                f"{_ADD_MODEL_HINT}"
            )
        return self.models[found]

    def gpu(self, name: str) -> GPUSpec:
        found = self._gpu_keys.get(_norm(name))
        if found is None:
            raise UnknownGPUError(
                f"unknown GPU {shown(name)}; known GPUs: {', '.join(sorted(self.gpus))}; {_ADD_GPU_HINT}"
            )
        return self.gpus[found]

    def extended(self, path: str | Path) -> Catalog:
        """This catalog plus the entries of a user YAML file (which win on name clashes)."""
        models, gpus = _read_catalog_file(Path(path))
        return Catalog({**self.models, **models}, {**self.gpus, **gpus})


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _index(items: Iterable[Any], keys: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for k in keys(item):
            if k:
                out.setdefault(_norm(k), item.name)
    return out


def _parse_section(section: Any, cls: type[ModelSpec] | type[GPUSpec], where: str) -> dict[str, Any]:
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise CatalogError(f"{where}: expected a mapping of name -> fields, got {type(section).__name__}")
    out: dict[str, Any] = {}
    for name, fields in section.items():
        if not isinstance(fields, dict):
            raise CatalogError(f"{where}: entry {shown(name)} must be a mapping of fields")
        data = {"name": str(name).lower(), **fields}
        try:
            out[data["name"]] = cls.model_validate(data)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"]) or "entry"
            raise CatalogError(f"{where}: entry {shown(name)}: {loc}: {first['msg']}") from e
    return out


def _read_catalog_file(path: Path) -> tuple[dict[str, ModelSpec], dict[str, GPUSpec]]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise CatalogError(f"{path}: cannot read catalog file: {e}") from e
    if not isinstance(data, dict) or not set(data) & {"models", "gpus"}:
        raise CatalogError(f"{path}: a catalog file is a YAML mapping with 'models:' and/or 'gpus:'")
    unknown = set(data) - {"models", "gpus"}
    if unknown:
        raise CatalogError(f"{path}: unknown top-level keys {sorted(unknown)}; use 'models' and 'gpus'")
    return _parse_section(data.get("models"), ModelSpec, str(path)), _parse_section(
        data.get("gpus"), GPUSpec, str(path)
    )


@lru_cache(maxsize=1)
def _builtin() -> Catalog:
    models: dict[str, Any] = {}
    gpus: dict[str, Any] = {}
    for fname, key in (("models.yaml", "models"), ("gpus.yaml", "gpus")):
        data = shipped_yaml(fname)
        section = _parse_section(
            data.get(key), ModelSpec if key == "models" else GPUSpec, f"servesim/data/perf/{fname}"
        )
        (models if key == "models" else gpus).update(section)
    return Catalog(models, gpus)


def load_catalog(extra: Iterable[str | Path] | str | Path | None = None) -> Catalog:
    """The shipped catalog, extended by the user's YAML file(s) in order."""
    cat = _builtin()
    if extra is None:
        return cat
    files = [extra] if isinstance(extra, str | Path) else list(extra)
    for f in files:
        cat = cat.extended(f)
    return cat


# ---------------------------------------------------------------------- Hugging Face configs
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text"}  # their configs' default
# Fields a published config leaves out because transformers' config class defaults them.
_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262_208, "max_position_embeddings": 131_072, "sliding_window_pattern": 6},
}
_NON_GATED_TYPES = {"gpt2", "gpt_neox", "gptj", "phi", "opt", "bloom", "falcon", "starcoder2", "gpt_bigcode"}
_TORCH_DTYPES: dict[str, DType] = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
    "float32": "float32",
    "float": "float32",
}


def _first(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            return v
    return default


def _vision_params(vc: Mapping[str, Any]) -> int:
    """A ViT-style encoder's parameters: attention (4 h^2) + MLP (2 h i) per layer, patch embedding."""
    h = int(_first(vc, "hidden_size", "embed_dim", "width", default=0) or 0)
    i = int(_first(vc, "intermediate_size", "mlp_dim", default=4 * h) or 0)
    n = int(_first(vc, "num_hidden_layers", "depth", "num_layers", default=0) or 0)
    if not h or not n:
        return 0
    patch = int(_first(vc, "patch_size", default=14) or 14)
    chans = int(_first(vc, "num_channels", "in_chans", default=3) or 3)
    out = int(_first(vc, "projector_output_dim", "out_hidden_size", default=h) or h)
    return n * (4 * h * h + 2 * h * i) + chans * patch * patch * h + h * out


_MLA_KEYS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _mla_fields(text: Mapping[str, Any], where: str) -> dict[str, int | None]:
    """MLA's sizes (DeepSeek-V2/V3 config names), or {} for a model without ``kv_lora_rank``."""
    if not text.get("kv_lora_rank"):
        return {}
    try:
        out: dict[str, int | None] = {k: int(text[k]) for k in _MLA_KEYS}
    except (KeyError, TypeError, ValueError):
        raise CatalogError(
            f"{where}: an MLA config (kv_lora_rank) needs integer {', '.join(_MLA_KEYS)}"
        ) from None
    out["q_lora_rank"] = int(text["q_lora_rank"]) if text.get("q_lora_rank") else None
    return out


def model_from_hf_config(config: Mapping[str, Any] | str | Path, name: str | None = None) -> ModelSpec:
    """A ``ModelSpec`` from a Hugging Face ``config.json`` (a mapping, a file, or a folder holding one).

    Multimodal configs use their ``text_config`` for the decoder and count the vision encoder's
    parameters as ``extra_params``. MLA attention (DeepSeek-V2/V3 ``kv_lora_rank``) keeps its
    latent sizes: one KV head, ``head_dim`` = ``qk_nope_head_dim + qk_rope_head_dim``.
    """
    where = "<config>"
    if not isinstance(config, Mapping):
        p = Path(config)
        if p.is_dir():
            p = p / "config.json"
        where = str(p)
        try:
            loaded = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CatalogError(f"{where}: cannot read Hugging Face config: {e}") from e
        if not isinstance(loaded, dict):
            raise CatalogError(f"{where}: a config.json must be a JSON object")
        config = loaded
        name = name or (p.parent.name if p.name == "config.json" else p.stem)
    top = config
    text = top.get("text_config") if isinstance(top.get("text_config"), dict) else top
    if not isinstance(text, Mapping):
        raise InternalError("invariant broken: isinstance(text, Mapping)")
    text = {**_TEXT_DEFAULTS.get(str(text.get("model_type", "")), {}), **text}
    try:
        layers = int(_first(text, "num_hidden_layers", "n_layer", "num_layers"))
        hidden = int(_first(text, "hidden_size", "n_embd", "d_model"))
        heads = int(_first(text, "num_attention_heads", "n_head"))
        vocab = int(_first(text, "vocab_size", default=top.get("vocab_size")))
    except (TypeError, ValueError) as e:
        raise CatalogError(
            f"{where}: config lacks one of num_hidden_layers, hidden_size, num_attention_heads, vocab_size"
        ) from e
    kv_heads = int(_first(text, "num_key_value_heads", "num_kv_heads", default=heads))
    if text.get("multi_query"):
        kv_heads = 1
    head_dim = int(_first(text, "head_dim", default=hidden // heads) or hidden // heads)
    experts = int(_first(text, "num_local_experts", "num_experts", "n_routed_experts", default=0) or 0)
    inter = int(_first(text, "intermediate_size", "ffn_hidden_size", "n_inner", default=4 * hidden))
    dense_inter = int(_first(text, "intermediate_size_mlp", default=inter)) if experts else inter
    moe_inter = int(_first(text, "moe_intermediate_size", default=inter)) if experts else None
    shared = int(_first(text, "shared_expert_intermediate_size", default=0) or 0)
    if experts and not shared and text.get("n_shared_experts"):
        shared = int(text["n_shared_experts"]) * int(moe_inter or inter)
    if experts and str(text.get("model_type", "")).startswith("llama4"):
        shared = shared or int(moe_inter or inter)  # Llama 4: one shared expert per MoE layer
    interval = int(
        _first(text, "interleave_moe_layer_step", "decoder_sparse_step", "moe_layer_freq", default=1) or 1
    )
    mla = _mla_fields(text, where)
    if mla:  # one latent KV head; q/k heads are nope + rope wide
        kv_heads, head_dim = 1, int(mla["qk_nope_head_dim"] or 0) + int(mla["qk_rope_head_dim"] or 0)
    model_type = str(_first(text, "model_type", default=top.get("model_type", "")) or "")
    tie = _first(
        text, "tie_word_embeddings", default=top.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT)
    )
    dtype_raw = str(_first(text, "torch_dtype", "dtype", default=top.get("torch_dtype", "bfloat16")))
    dtype = _TORCH_DTYPES.get(dtype_raw.replace("torch.", ""), "bfloat16")
    weight_dtype, qmods = weight_format_of(top)
    vc = top.get("vision_config")
    extra = _vision_params(vc) if isinstance(vc, Mapping) else 0
    arch = (top.get("architectures") or [None])[0]
    max_pos = int(_first(text, "max_position_embeddings", "n_positions", "max_seq_len", default=4096))
    label = name or str(_first(top, "_name_or_path", default=model_type or "hf-model"))
    try:
        return ModelSpec(
            name=label.lower(),
            architecture=arch,
            num_layers=layers,
            hidden_size=hidden,
            intermediate_size=dense_inter,
            num_attention_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            vocab_size=vocab,
            tie_word_embeddings=bool(tie),
            max_position_embeddings=max_pos,
            gated_mlp=model_type not in _NON_GATED_TYPES,
            attention_bias=bool(
                _first(text, "attention_bias", "qkv_bias", default=model_type.startswith("qwen2"))
            ),
            num_experts=experts,
            experts_per_token=int(_first(text, "num_experts_per_tok", "moe_topk", default=0) or 0)
            if experts
            else 0,
            moe_intermediate_size=moe_inter,
            shared_expert_intermediate_size=shared,
            moe_layer_interval=interval,
            first_dense_layers=int(_first(text, "first_k_dense_replace", default=0) or 0) if experts else 0,
            **mla,
            dtype=dtype,
            weight_dtype=weight_dtype,
            quantized_modules=qmods,
            extra_params=extra,
            layer_pattern=layer_pattern_of(text, layers, model_type),
            source=where,
        )
    except ValidationError as e:
        first = e.errors()[0]
        raise CatalogError(f"{where}: {'.'.join(str(x) for x in first['loc'])}: {first['msg']}") from e


def resolve_model(name_or_path: str | ModelSpec, catalog: Catalog | None = None) -> ModelSpec:
    """A catalog name, an HF id, or the path of a local ``config.json`` (or its folder); a model
    with Mamba or linear-attention layers is refused (``perf.layer_pattern``)."""
    if isinstance(name_or_path, ModelSpec):
        refuse_unmodelled(name_or_path)
        return name_or_path
    p = Path(name_or_path)
    if p.suffix == ".json" or (p.is_dir() and (p / "config.json").is_file()):
        if not p.exists():
            raise CatalogError(f"{p}: no such Hugging Face config file")
        spec = model_from_hf_config(p)
        refuse_unmodelled(spec)
        return spec
    return (catalog or load_catalog()).model(name_or_path)


def resolve_gpu(name: str | GPUSpec, catalog: Catalog | None = None) -> GPUSpec:
    if isinstance(name, GPUSpec):
        return name
    return (catalog or load_catalog()).gpu(name)
