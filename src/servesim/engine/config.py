"""Engine configuration, spelled with vLLM's own flag names.

Defaults follow vLLM 0.33's dataclass defaults where vLLM has one (``max_num_seqs`` 128,
``max_num_batched_tokens`` 2048, ``block_size`` 16, ``watermark`` 0, chunked prefill and
prefix caching on), except ``num_gpu_blocks`` which vLLM derives from GPU memory (the
step-time/memory model does that; here it is an input) and ``max_model_len``, which vLLM
takes from the model and which defaults here to the longest request of the trace + 1.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

#: Bounds no real deployment exceeds (``servesim.bounds``, the README's table): checked before any
#: work, so a typo such as 1e14 blocks is an error naming the field, not a MemoryError.
from servesim.bounds import MAX_BLOCK_SIZE, MAX_GPU_BLOCKS, MAX_SEQS, MAX_TOKENS, MAX_TP
from servesim.engine.kv_groups import (
    KVCacheGroup,
    blocks_for_one_sequence,
    has_mamba,
    is_hybrid,
    mamba_state_blocks,
)
from servesim.engine.speculative import SpeculativeConfig
from servesim.errors import ConfigError, describe, reject_bool, shown

#: vLLM's ``--scheduling-policy`` values.
SchedulingPolicy = Literal["fcfs", "priority"]

#: vLLM's ``--kv-cache-dtype`` values that servesim sizes and times (``CacheConfig.cache_dtype``;
#: ``fp8`` is ``fp8_e4m3``). vLLM's per-token-head, NVFP4 and TurboQuant layouts are not modelled.
KVCacheDType = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]

#: vLLM's ``--quantization`` values that servesim times (``servesim.perf.precision`` says what each
#: does): the online shorthands that quantize a 16-bit checkpoint at load time, and the checkpoint
#: methods, which must match the checkpoint's own format. None: the checkpoint as it is.
Quantization = Literal[
    "fp8",
    "fp8_per_tensor",
    "fp8_per_channel",
    "fp8_per_block",
    "mxfp4",
    "nvfp4_per_token",
    "modelopt_fp4",
    "modelopt",
    "compressed-tensors",
]

#: vLLM's ``--max-lora-rank`` values (``vllm.config.lora.MaxLoRARanks``).
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _lora_rank(v: int) -> int:
    """vLLM takes only the ranks its LoRA kernels are built for (``MaxLoRARanks``)."""
    if v not in MAX_LORA_RANKS:
        raise ValueError(f"must be one of {', '.join(map(str, MAX_LORA_RANKS))} (vLLM's MaxLoRARanks)")
    return v


#: A rank vLLM accepts: the check travels with the type, so a flag's own check names the flag.
LoRARank = Annotated[int, AfterValidator(_lora_rank)]

#: Speculative methods servesim runs under vLLM's ``AsyncScheduler`` (checked step by step against
#: it: tests/engine/oracle_async_spec_cases): the drafters with their own KV, whose drafts stay on
#: the worker while the scheduler schedules k placeholders.
ASYNC_SPEC_METHODS = ("eagle", "eagle3", "mtp")


def _async_spec_refusal(method: str) -> str:
    """Why ``async_scheduling`` is refused with this speculative method: vLLM's own reason where
    vLLM refuses it, else what servesim has not modelled."""
    if method == "ngram":
        return (
            "async_scheduling with ngram speculation: vLLM's V1 model runner refuses it ('Async "
            "scheduling is not supported by the V1 model runner with ngram-based speculative "
            "decoding') and the V2 runner's n-gram drafts under async scheduling are not modelled; "
            "set async_scheduling false or use eagle, eagle3 or mtp"
        )
    return (
        f"async_scheduling with {method} speculation is not modelled yet (vLLM runs it, but its "
        "draft model's extra input rows under async scheduling are not checked against vLLM); set "
        "async_scheduling false or use eagle, eagle3 or mtp"
    )


class EngineConfig(BaseModel):
    """One vLLM replica's scheduler and KV-cache settings (``vllm serve`` flag names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int = Field(128, ge=1, le=MAX_SEQS, description="Most requests in the running batch.")
    max_num_batched_tokens: int = Field(
        2048, ge=1, le=MAX_TOKENS, description="Token budget of one engine step."
    )
    block_size: int = Field(16, ge=1, le=MAX_BLOCK_SIZE, description="Tokens per KV-cache block (page).")
    num_gpu_blocks: int = Field(
        10000,
        ge=2,
        le=MAX_GPU_BLOCKS,
        description="KV blocks in the pool, including vLLM's reserved null block.",
    )
    enable_chunked_prefill: bool = Field(True, description="Split long prompts across steps.")
    enable_prefix_caching: bool = Field(True, description="Reuse KV blocks of identical prefixes.")
    long_prefill_token_threshold: int = Field(
        0, ge=0, le=MAX_TOKENS, description="Cap on one request's tokens per step (0 = no cap)."
    )
    policy: SchedulingPolicy = Field("fcfs", description="Waiting-queue order.")
    max_num_scheduled_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="Tokens the scheduler may issue in one step (vLLM; None = max_num_batched_tokens).",
    )
    max_num_active_seqs: int | None = Field(
        None,
        ge=1,
        le=MAX_SEQS,
        description="Most requests admitted into RUNNING, <= max_num_seqs (vLLM; None = max_num_seqs).",
    )
    long_prefill_token_threshold_adaptive: bool = Field(
        False,
        description="Floor long_prefill_token_threshold at max_num_batched_tokens / (running + waiting).",
    )
    prefill_schedule_interval: int = Field(
        1,
        ge=1,
        le=MAX_SEQS,
        description="Admit prefill (admissions and chunks) only every N executed steps while decodes run.",
    )
    max_num_queued_reqs: int | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS,
        description="API server: answer HTTP 503 to a request arriving with this many in flight "
        "(None = no limit).",
    )
    max_num_queued_tokens: int | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS,
        description="API server: answer HTTP 503 while prompts still in prefill hold this many tokens "
        "(None = no limit).",
    )
    stream_interval: int = Field(
        1,
        ge=1,
        le=MAX_SEQS,
        description="Tokens per streamed chunk: a client's inter-chunk latency spans this many steps.",
    )
    max_model_len: int | None = Field(
        None, ge=2, le=MAX_TOKENS, description="Context limit; default: the trace's longest request + 1."
    )
    watermark: float = Field(0.0, ge=0.0, lt=1.0, description="Fraction of blocks kept free for admissions.")
    scheduler_reserve_full_isl: bool = Field(
        True, description="Admit only if the whole sequence fits in free blocks (vLLM 0.33 default)."
    )
    queue_timeout_s: float | None = Field(
        None,
        gt=0,
        le=1e9,
        allow_inf_nan=False,
        description="Reject requests still unscheduled after this long (never silently).",
    )
    kv_cache_dtype: KVCacheDType = Field(
        "auto",
        description="KV-cache element type: auto (the model's dtype) or fp8 (one byte: about twice the "
        "blocks in the same memory, half the KV bytes a decode step reads).",
    )
    quantization: Quantization | None = Field(
        None,
        description="vLLM --quantization: fp8/fp8_per_block/mxfp4/nvfp4_per_token quantize a 16-bit "
        "checkpoint's weights at load (fewer bytes held and read; FP8/FP4 GEMMs where the GPU has the "
        "tensor cores); None: the checkpoint's own format (its quantization_config).",
    )
    kv_offloading_size: float | None = Field(
        None,
        gt=0,
        le=1 << 20,
        allow_inf_nan=False,
        description="GiB of host memory for offloaded KV blocks, summed over TP ranks (None = no offload).",
    )
    kv_offloading_backend: Literal["native"] = Field(
        "native", description="KV offloading backend: vLLM's OffloadingConnector with a CPU tier."
    )
    speculative_config: SpeculativeConfig | None = Field(
        None,
        description='Speculative decoding, vLLM\'s JSON (e.g. \'{"method": "eagle3", '
        '"num_speculative_tokens": 3}\').',
    )
    async_scheduling: bool = Field(
        False,
        description="vLLM's AsyncScheduler: the next step is scheduled before this one's output is "
        "applied (vLLM 0.33 turns it on by default on GPUs; servesim's default stays the sync one).",
    )
    pipeline_parallel_size: int = Field(
        1,
        ge=1,
        le=MAX_TP,  # GPUs of one replica, TP x PP (perf.pipeline.check_pp)
        description="vLLM's --pipeline-parallel-size: the model's layers split over this many stages "
        "of tensor-parallel GPUs; the engine keeps pipeline_parallel_size + 1 steps in flight "
        "(servesim.engine.pipeline_steps; with it async_scheduling defaults to on, as in vLLM 0.33).",
    )
    enable_lora: bool = Field(
        False,
        description="Serve LoRA adapters (a trace's lora column names each request's adapter; none: the "
        "base model).",
    )
    max_loras: int = Field(
        1,
        ge=1,
        le=MAX_SEQS,
        description="With enable_lora: most distinct adapters among running requests (vLLM's scheduler "
        "leaves a request waiting whose adapter would exceed it).",
    )
    max_lora_rank: LoRARank = Field(
        16,
        ge=1,
        le=512,
        description="With enable_lora: the largest adapter rank (one of "
        + ", ".join(map(str, MAX_LORA_RANKS))
        + "); the LoRA kernels run at this rank.",
    )
    max_cpu_loras: int | None = Field(
        None,
        ge=1,
        le=MAX_SEQS,
        description="With enable_lora: adapters kept in host memory (vLLM's CPU LoRA cache; None: "
        "max_loras); an adapter not held there is read from disk again when a request needs it.",
    )
    kv_cache_groups: tuple[KVCacheGroup, ...] | None = Field(
        None,
        description="The model's KV cache groups as vLLM plans them (engine.kv_groups.plan_groups), "
        "in order; None: one full-attention group. Set from the model by the perf layer.",
    )
    mamba_prefill_checkpoint_blocks: int = Field(
        0,
        ge=0,
        le=1,
        description="With mamba groups and prefix caching (vLLM's mamba_cache_mode 'align'): vLLM's "
        "MambaSpec.num_prefill_checkpoint_blocks, 1 where the linear-attention prefill kernel exports "
        "the prompt's last block-boundary state from inside the last chunk (Qwen3-Next's "
        "GatedDeltaNet on FlashInfer: Hopper GPUs) instead of the scheduler cutting the chunk there. "
        "Set from the GPU by the perf layer.",
    )
    # servesim analysis settings (vLLM has no such flags; defaults keep vLLM's behaviour).
    starvation_threshold: int = Field(
        3, ge=1, le=MAX_SEQS, description="A request preempted this many times is flagged STARVED (an event)."
    )
    starvation_mitigation: Literal["none", "protect", "boost"] = Field(
        "none",
        description="none: vLLM; protect: STARVED requests are not chosen as victims while others "
        "can be; boost: protect and move them to the best priority.",
    )

    _no_bool = field_validator(
        "max_num_seqs",
        "max_num_batched_tokens",
        "pipeline_parallel_size",
        "block_size",
        "num_gpu_blocks",
        "long_prefill_token_threshold",
        "max_model_len",
        "starvation_threshold",
        "max_num_scheduled_tokens",
        "max_num_active_seqs",
        "prefill_schedule_interval",
        "max_num_queued_reqs",
        "max_num_queued_tokens",
        "stream_interval",
        "max_loras",
        "max_lora_rank",
        "max_cpu_loras",
        mode="before",
    )(lambda v: reject_bool(v))

    @model_validator(mode="before")
    @classmethod
    def _pipeline_async(cls, data: Any) -> Any:
        """vLLM 0.33 runs pipeline parallelism with async scheduling unless told not to
        (``VllmConfig.__post_init__``: the V2 model runner supports it, so nothing turns it off):
        a PP config that does not say otherwise schedules asynchronously here too."""
        if isinstance(data, dict) and "async_scheduling" not in data:
            pp = data.get("pipeline_parallel_size")
            if isinstance(pp, int) and not isinstance(pp, bool) and pp > 1:
                return {**data, "async_scheduling": True}
        return data

    @model_serializer(mode="wrap")
    def _drop_sync_scheduling(self, handler: Any) -> Any:
        """A sync run's documents (reports, saved results) stay byte for byte as before the
        field existed; reading one back gives the default, False. Likewise ``quantization`` None
        (the checkpoint's own weights), and LoRA off at its default settings."""
        d = handler(self)
        if isinstance(d, dict) and d.get("async_scheduling") is False:
            del d["async_scheduling"]
        if isinstance(d, dict) and "quantization" in d and d["quantization"] is None:
            del d["quantization"]
        if isinstance(d, dict) and d.get("pipeline_parallel_size") == 1:  # no pipeline: as before
            del d["pipeline_parallel_size"]
        if (
            isinstance(d, dict)
            and d.get("enable_lora") is False
            and (d.get("max_loras"), d.get("max_lora_rank")) == (1, 16)
        ):
            for key in ("enable_lora", "max_loras", "max_lora_rank"):
                del d[key]
        if isinstance(d, dict) and "kv_cache_groups" in d and d["kv_cache_groups"] is None:
            del d["kv_cache_groups"]
        if isinstance(d, dict) and "max_cpu_loras" in d and d["max_cpu_loras"] is None:
            del d["max_cpu_loras"]
        return d

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs}), as vLLM requires"
            )
        if self.max_num_active_seqs is not None and self.max_num_active_seqs > self.max_num_seqs:
            raise ConfigError(
                f"max_num_active_seqs ({self.max_num_active_seqs}) cannot be greater than max_num_seqs "
                f"({self.max_num_seqs}), as vLLM requires"
            )
        if self.max_model_len is not None:
            self.check_max_model_len(self.max_model_len)
        self._check_pipeline()
        self._check_hybrid()
        if self.prefill_schedule_interval > 1 and self.kv_offloading_size is not None:
            raise ConfigError(
                f"prefill_schedule_interval {self.prefill_schedule_interval} with kv_offloading_size "
                f"{self.kv_offloading_size:g} GiB: the prefill cadence beside a KV connector's deferred "
                "requests is not modelled; drop one of them"
            )
        spec = self.speculative_config
        if self.async_scheduling and spec is not None and spec.method not in ASYNC_SPEC_METHODS:
            raise ConfigError(_async_spec_refusal(spec.method))
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ConfigError(
                f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras}), as vLLM "
                "requires"
            )
        if self.enable_lora and self.prefill_schedule_interval > 1:
            raise ConfigError(
                f"enable_lora with prefill_schedule_interval {self.prefill_schedule_interval}: vLLM's "
                "cadence counts the requests skipped for their adapter (deferred_waiting) apart, which "
                "is not modelled yet; drop one of them"
            )
        if self.enable_lora and self.kv_offloading_size is not None:
            raise ConfigError(
                f"enable_lora with kv_offloading_size {self.kv_offloading_size:g} GiB: LoRA beside a "
                "KV connector is not modelled yet; drop one of them"
            )
        others = {
            "kv_offloading_size": self.kv_offloading_size is not None,
            "prefill_schedule_interval": self.prefill_schedule_interval > 1,
        }
        if self.async_scheduling and any(others.values()):
            what = next(k for k, on in others.items() if on)
            raise ConfigError(f"async_scheduling with {what} is not modelled yet; set async_scheduling false")
        if spec is not None and self.kv_offloading_size is not None:
            raise ConfigError(
                f"speculative_config ({spec.method}) with kv_offloading_size "
                f"{self.kv_offloading_size:g} GiB: speculative decoding with a CPU KV offload tier "
                "is not modelled; drop one of them"
            )
        if spec is not None and self.max_num_batched_tokens <= spec.num_lookahead_tokens:
            raise ConfigError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must exceed the "
                f"{spec.num_lookahead_tokens} lookahead slots of speculative decoding, as vLLM requires"
            )
        return self

    def _check_pipeline(self) -> None:
        """What servesim does not model beside pipeline parallelism, naming the key."""
        pp = self.pipeline_parallel_size
        if pp == 1:
            return
        if not self.async_scheduling:
            raise ConfigError(
                f"pipeline_parallel_size {pp} with async_scheduling false: vLLM 0.33 then runs its sync "
                f"scheduler with a batch queue of {pp} steps, which is not modelled; drop "
                "--no-async-scheduling (vLLM's default with pipeline parallelism is async scheduling)"
            )
        for key, on in (
            ("kv_cache_groups (sliding-window, chunked-local or Mamba layers)", self.hybrid),
            ("kv_offloading_size", self.kv_offloading_size is not None),
            ("prefill_schedule_interval", self.prefill_schedule_interval > 1),
        ):
            if on:
                raise ConfigError(
                    f"pipeline_parallel_size {pp} with {key} is not modelled yet; drop one of them"
                )
        if self.speculative_config is not None:
            raise ConfigError(
                f"pipeline_parallel_size {pp} with speculative_config ({self.speculative_config.method}): "
                "the drafts' broadcast between stages is not modelled yet; drop one of them"
            )

    @property
    def hybrid(self) -> bool:
        """Whether the model has windowed KV cache groups (sliding window, chunked local)."""
        return is_hybrid(self.kv_cache_groups)

    def _check_hybrid(self) -> None:
        """Refuse what servesim does not model beside hybrid KV cache groups, naming the key."""
        if not self.hybrid:
            return
        if self.enable_prefix_caching and has_mamba(self.kv_cache_groups) and not self.enable_chunked_prefill:
            # vLLM 0.33 (MambaModelConfig) runs prefix caching beside mamba layers in
            # mamba_cache_mode "align", whose block-aligned prefill chunks need chunked prefill.
            raise ConfigError(
                "enable_prefix_caching with Mamba / linear-attention layers needs chunked prefill "
                "(vLLM 0.33's mamba_cache_mode 'align' refuses to start without it); drop "
                "--no-enable-chunked-prefill or give --no-enable-prefix-caching"
            )
        for key, on in (
            ("async_scheduling", self.async_scheduling),
            ("speculative_config", self.speculative_config is not None),
            ("kv_offloading_size", self.kv_offloading_size is not None),
        ):
            if on:
                raise ConfigError(
                    f"{key} with sliding-window, chunked-local or Mamba KV cache groups is not "
                    f"modelled yet; drop {key}"
                )

    def check_max_model_len(self, max_model_len: int) -> None:
        """Raise ValueError when vLLM would refuse to start with this context length."""
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < max_model_len:
            raise ConfigError(
                f"with chunked prefill off, max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
                f">= max_model_len ({max_model_len}) so that any prompt fits one step (vLLM rejects this "
                "config); raise max_num_batched_tokens, lower max_model_len, or enable chunked prefill"
            )
        blocks_needed = -(-max_model_len // self.block_size)
        if self.hybrid and self.kv_cache_groups:
            blocks_needed = blocks_for_one_sequence(
                self.kv_cache_groups,
                max_model_len,
                self.block_size,
                self.max_num_batched_tokens,
                mamba_state_blocks(self.enable_prefix_caching, self.mamba_prefill_checkpoint_blocks),
            )
        usable = self.num_gpu_blocks - 1
        if blocks_needed > usable:
            raise ConfigError(
                f"max_model_len {max_model_len} needs {blocks_needed} KV blocks of {self.block_size} tokens "
                f"but the pool has {usable} usable blocks (num_gpu_blocks {self.num_gpu_blocks} minus the "
                "null block); vLLM refuses to start: add blocks or lower max_model_len"
            )

    @classmethod
    def read_file(cls, path: str | Path) -> dict[str, Any]:
        """The vLLM keys of a YAML or JSON file (``-`` spellings normalised), unknown keys and
        non-mappings refused with the file named; values are checked where they are used."""
        p = Path(path)
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
            raise ConfigError(f"{p}: cannot read engine config: {describe(e)}") from None
        if not isinstance(data, dict):
            got = "nothing" if data is None else type(data).__name__
            raise ConfigError(
                f"{p}: engine config must be a mapping of vLLM keys (e.g. max_num_seqs: 256), got {got}"
            )
        data = {str(k).replace("-", "_"): v for k, v in data.items()}
        unknown = [k for k in data if k not in cls.model_fields]
        if unknown:
            hints = []
            for k in unknown:
                close = difflib.get_close_matches(k, list(cls.model_fields), n=1)
                hints.append(f"{shown(k)}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ConfigError(
                f"{p}: unknown engine key(s) {', '.join(hints)}; known: {', '.join(cls.model_fields)}"
            )
        return data

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> EngineConfig:
        """Load a YAML or JSON file of vLLM keys (unknown keys are an error), then apply overrides."""
        p = Path(path)
        data = cls.read_file(p)
        data.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise ConfigError(f"{p}: {describe(e)}") from None
