"""A deployment: vLLM scheduler flags of one replica, its parallelism and the replica count.

``Deployment`` validates the combinations vLLM itself refuses (or that contradict each other),
each with a reason that says what to change; the tuner records that reason on the trial it
prunes. It is a view over ``DeploymentSpec`` fields (``Deployment.spec``: its vLLM keys as the
spec's ``engine``, TP, memory share, replicas, on the hardware's model and GPU), and every trial
resolves through ``servesim.spec.resolve`` (``resolve_deployment``), which may refuse too (weights
do not fit, TP does not divide the heads, the KV cache cannot hold ``max_model_len``).

It also renders the ``vllm serve`` command line and the matching YAML for ``--config`` (long flag
names as keys, vLLM's own spellings; see ``docs/vllm-scheduling.md`` §1).
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from servesim.engine.config import EngineConfig, KVCacheDType, Quantization
from servesim.engine.speculative import MAX_SPEC_TOKENS, SpeculativeConfig
from servesim.errors import ConfigError
from servesim.perf.serve_defaults import vllm_serve_defaults
from servesim.perf.setup import DEFAULT_GPU_MEMORY_UTILIZATION, DEFAULT_TP
from servesim.perf.speculators import PLACEHOLDER_DRAFT, draft_checkpoint, served_id
from servesim.spec import DeploymentSpec, ResolvedDeployment, engine_values
from servesim.tuning.hardware import Hardware, spec_on

#: vLLM's ``CacheConfig.block_size`` choices (``BlockSize`` literal).
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128)

#: What vLLM 0.33's attention backends on NVIDIA GPUs take (``get_supported_kernel_block_sizes``:
#: ``MultipleOf(16)`` for FlashAttention, Triton and FlexAttention, 16/32/64 for FlashInfer): a
#: server with another ``--block-size`` finds no backend and does not start.
CUDA_BLOCK_MULTIPLE = 16


#: vLLM 0.33's SchedulerConfig fields (issue 49) and their defaults: flags only when set.
KNOBS_033: dict[str, Any] = {
    "max_num_scheduled_tokens": None,
    "max_num_active_seqs": None,
    "long_prefill_token_threshold_adaptive": False,
    "prefill_schedule_interval": 1,
    "max_num_queued_reqs": None,
    "max_num_queued_tokens": None,
    "stream_interval": 1,
    "async_scheduling": False,  # off: left to vLLM (which turns it on by default on GPUs)
}

#: vLLM's LoRA flags and their defaults: passed through (not searched), flags and document keys
#: only when LoRA is on.
LORA_KEYS: dict[str, Any] = {"enable_lora": False, "max_loras": 1, "max_lora_rank": 16, "max_cpu_loras": None}


class Deployment(BaseModel):
    """What the tuner chooses: one replica's vLLM flags, TP, memory share, replicas, queue timeout."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int = Field(128, ge=1, description="vLLM --max-num-seqs.")
    max_num_batched_tokens: int = Field(2048, ge=1, description="vLLM --max-num-batched-tokens.")
    enable_chunked_prefill: bool = Field(True, description="vLLM --[no-]enable-chunked-prefill.")
    long_prefill_token_threshold: int = Field(0, ge=0, description="vLLM --long-prefill-token-threshold.")
    enable_prefix_caching: bool = Field(True, description="vLLM --[no-]enable-prefix-caching.")
    block_size: int = Field(16, description="vLLM --block-size.")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="vLLM --gpu-memory-utilization.")
    tensor_parallel_size: int = Field(1, ge=1, description="vLLM --tensor-parallel-size.")
    pipeline_parallel_size: int = Field(
        1,
        ge=1,
        description="vLLM --pipeline-parallel-size: stages of tensor_parallel_size GPUs each "
        "(servesim.perf.pipeline; searched with --space pipeline_parallel_size=...).",
    )
    replicas: int = Field(1, ge=1, description="Identical vLLM instances behind the router.")
    data_parallel_size: int = Field(
        1, ge=1, description="vLLM --data-parallel-size (servesim.perf.expert_parallel); 1: none."
    )
    enable_expert_parallel: bool = Field(False, description="vLLM --enable-expert-parallel.")
    queue_timeout_s: float | None = Field(
        None, gt=0, description="Reject requests unscheduled this long (a gateway setting, not a vLLM flag)."
    )
    max_model_len: int = Field(ge=2, description="vLLM --max-model-len.")
    policy: Literal["fcfs", "priority"] = Field("fcfs", description="vLLM --scheduling-policy.")
    kv_offloading_size: float | None = Field(
        None,
        gt=0,
        description="vLLM --kv-offloading-size: GiB of host memory for the CPU KV tier, summed over "
        "TP ranks (--kv-offloading-backend native); None = no CPU tier.",
    )
    num_speculative_tokens: int = Field(
        0,
        ge=0,
        le=MAX_SPEC_TOKENS,
        description="Speculative decoding's k (vLLM --speculative-config num_speculative_tokens); "
        "0 = off. The method and acceptance come from speculative_config.",
    )
    speculative_config: SpeculativeConfig | None = Field(
        None,
        description="vLLM --speculative-config (method, acceptance, draft cost); not searched: "
        "num_speculative_tokens replaces its k, 0 turns it off.",
    )
    kv_cache_dtype: KVCacheDType = Field(
        "auto", description="vLLM --kv-cache-dtype (study-wide: not searched; fp8 halves the KV bytes)."
    )
    quantization: Quantization | None = Field(
        None, description="vLLM --quantization (study-wide: not searched; the weights' format)."
    )
    # Passed through to the engine unchanged (vLLM defaults); not searched.
    watermark: float = Field(0.0, ge=0.0, lt=1.0)
    scheduler_reserve_full_isl: bool = True
    # vLLM 0.33's (issue 49): passed through, written as flags when set, left out of the document
    # at their defaults; the 503 limits are searched within a rejection budget (tuning/space.py).
    max_num_scheduled_tokens: int | None = Field(None, ge=1, description="vLLM --max-num-scheduled-tokens.")
    max_num_active_seqs: int | None = Field(None, ge=1, description="vLLM --max-num-active-seqs.")
    long_prefill_token_threshold_adaptive: bool = Field(
        False, description="vLLM --long-prefill-token-threshold-adaptive."
    )
    prefill_schedule_interval: int = Field(1, ge=1, description="vLLM --prefill-schedule-interval.")
    max_num_queued_reqs: int | None = Field(None, ge=0, description="vLLM --max-num-queued-reqs (HTTP 503).")
    max_num_queued_tokens: int | None = Field(
        None, ge=0, description="vLLM --max-num-queued-tokens (HTTP 503)."
    )
    stream_interval: int = Field(1, ge=1, description="vLLM --stream-interval.")
    async_scheduling: bool = Field(False, description="vLLM --[no-]async-scheduling.")
    enable_lora: bool = Field(False, description="vLLM --enable-lora (the trace names adapters).")
    max_loras: int = Field(1, ge=1, description="vLLM --max-loras: distinct adapters in a batch.")
    max_lora_rank: int = Field(16, ge=1, description="vLLM --max-lora-rank.")
    max_cpu_loras: int | None = Field(None, ge=1, description="vLLM --max-cpu-loras (None: max_loras).")

    @model_serializer(mode="wrap")
    def _drop_speculation_when_off(self, handler: Any) -> Any:
        """A deployment without speculation keeps its document byte for byte (no k, no config), and
        so does one with vLLM 0.33's knobs at their defaults."""
        d = handler(self)
        if isinstance(d, dict):
            for key, default in KNOBS_033.items():
                if key in d and d[key] == default and type(d[key]) is type(default):
                    del d[key]
            if not d.get("enable_lora", True):
                for key in LORA_KEYS:
                    d.pop(key, None)
            if "max_cpu_loras" in d and d["max_cpu_loras"] is None:
                del d["max_cpu_loras"]
            if d.get("num_speculative_tokens", 1) == 0:
                del d["num_speculative_tokens"]
            if "speculative_config" in d and d["speculative_config"] is None:
                del d["speculative_config"]
            if d.get("kv_cache_dtype") == "auto":  # likewise: the model's KV dtype, as before the key
                del d["kv_cache_dtype"]
            if "quantization" in d and d["quantization"] is None:
                del d["quantization"]
            if d.get("pipeline_parallel_size") == 1:  # likewise: no pipeline, as before the key
                del d["pipeline_parallel_size"]
            if d.get("data_parallel_size") == 1:  # likewise: a TP deployment's document as before
                del d["data_parallel_size"]
            if d.get("enable_expert_parallel") is False:
                del d["enable_expert_parallel"]
        return d

    @model_validator(mode="before")
    @classmethod
    def _pipeline_async(cls, data: Any) -> Any:
        return with_pipeline_defaults(data)

    @model_validator(mode="after")
    def _vllm_rules(self) -> Deployment:
        problems = deployment_problems(self)
        if problems:
            raise ConfigError("; ".join(reason for _, reason in problems))
        return self

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one vLLM server uses: tensor x pipeline x data parallel."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def parallelism(self) -> str:
        """``TP 2``, or ``TP 2 x PP 2`` with pipeline stages, ``x DP 4`` with data-parallel ranks
        (how the views say a replica's GPUs)."""
        pp, dp = self.pipeline_parallel_size, self.data_parallel_size
        return (
            f"TP {self.tensor_parallel_size}"
            + (f" x PP {pp}" if pp > 1 else "")
            + (f" x DP {dp}" if dp > 1 else "")
        )

    def engine_keys(self) -> dict[str, Any]:
        """One replica's vLLM keys (``EngineConfig`` names): the ``engine`` of its ``DeploymentSpec``
        (KV blocks are not among them: ``servesim.spec.resolve`` sizes them, or the hardware fixes them)."""
        return {
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "block_size": self.block_size,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "enable_prefix_caching": self.enable_prefix_caching,
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
            "policy": self.policy,
            "max_model_len": self.max_model_len,
            "watermark": self.watermark,
            "scheduler_reserve_full_isl": self.scheduler_reserve_full_isl,
            "queue_timeout_s": self.queue_timeout_s,
            "kv_offloading_size": self.kv_offloading_size,
            **{key: getattr(self, key) for key in KNOBS_033},
            **({key: getattr(self, key) for key in LORA_KEYS} if self.enable_lora else {}),
            **({"speculative_config": sc.model_dump()} if (sc := self.speculative()) is not None else {}),
            **({"kv_cache_dtype": self.kv_cache_dtype} if self.kv_cache_dtype != "auto" else {}),
            **({"quantization": self.quantization} if self.quantization is not None else {}),
            **({"pipeline_parallel_size": p} if (p := self.pipeline_parallel_size) > 1 else {}),
        }

    def speculative(self) -> SpeculativeConfig | None:
        """The engine's speculative config: ``speculative_config`` with this deployment's k, or
        None when k is 0 (off)."""
        k = self.num_speculative_tokens
        if not k or self.speculative_config is None:
            return None
        return self.speculative_config.model_copy(update={"num_speculative_tokens": k})

    def spec(self, hardware: Hardware) -> DeploymentSpec:
        """This deployment as a ``DeploymentSpec`` on ``hardware`` (its model, GPU and profile)."""
        return spec_on(
            hardware,
            self.engine_keys(),
            tp=self.tensor_parallel_size,
            gpu_memory_utilization=self.gpu_memory_utilization,
            replicas=self.replicas,
        )

    def engine_config(self, num_gpu_blocks: int) -> EngineConfig:
        """One replica's engine config with these KV blocks (``ConfigError`` when they cannot hold
        ``max_model_len``)."""
        return EngineConfig(**self.engine_keys(), num_gpu_blocks=num_gpu_blocks)

    @classmethod
    def from_engine_config(
        cls,
        config: EngineConfig,
        *,
        max_model_len: int,
        replicas: int = 1,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        data_parallel_size: int = 1,
        enable_expert_parallel: bool = False,
    ) -> Deployment:
        """A deployment with an engine config's scheduler settings (its KV blocks are ignored:
        they come from the hardware)."""
        return cls(
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            enable_chunked_prefill=config.enable_chunked_prefill,
            long_prefill_token_threshold=config.long_prefill_token_threshold,
            enable_prefix_caching=config.enable_prefix_caching,
            block_size=config.block_size,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            replicas=replicas,
            data_parallel_size=data_parallel_size,
            enable_expert_parallel=enable_expert_parallel,
            queue_timeout_s=config.queue_timeout_s,
            max_model_len=config.max_model_len or max_model_len,
            policy=config.policy,
            watermark=config.watermark,
            scheduler_reserve_full_isl=config.scheduler_reserve_full_isl,
            kv_offloading_size=config.kv_offloading_size,
            **{key: getattr(config, key) for key in KNOBS_033},
            **{key: getattr(config, key) for key in LORA_KEYS},
            num_speculative_tokens=sc.num_speculative_tokens if (sc := config.speculative_config) else 0,
            speculative_config=config.speculative_config,
            kv_cache_dtype=config.kv_cache_dtype,
            quantization=config.quantization,
            pipeline_parallel_size=config.pipeline_parallel_size,
        )

    @classmethod
    def from_spec(cls, spec: DeploymentSpec, max_model_len: int) -> Deployment:
        """The tuner's view of ``spec``: its vLLM keys with ``vllm serve``'s defaults for its GPU
        filled in (``servesim.spec.engine_values``), its TP, memory share and replicas;
        ``max_model_len`` when the spec sets none (a trace's longest request + 1)."""
        config, _ = engine_values(spec, max_model_len)
        return cls.from_engine_config(
            config,
            max_model_len=max_model_len,
            replicas=spec.replicas,
            tensor_parallel_size=DEFAULT_TP if spec.tp is None else spec.tp,
            gpu_memory_utilization=spec.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION,
            data_parallel_size=spec.data_parallel_size,
            enable_expert_parallel=spec.enable_expert_parallel,
        )

    # ------------------------------------------------------------------ vllm serve
    def vllm_args(self, model: str | None = None, *, strict: bool = True) -> list[tuple[str, Any]]:
        """``(long flag name, value)`` pairs, value True/False for the boolean flags.

        With the served ``model`` the command is one vLLM 0.33 starts (``serve_problems``): the
        speculative config names its draft (``perf.speculators.draft_checkpoint``: the given one,
        else the catalog's published head) and ``--max-model-len`` fits the model; ``ConfigError``
        otherwise, or with ``strict=False`` the ``DRAFT_MODEL`` placeholder (a simulation's
        settings shown as a command: the report). Without it, the flags as set (a table)."""
        if model is not None and strict:
            problems = serve_problems(self, model)
            if problems:
                raise ConfigError("; ".join(problems))
        args: list[tuple[str, Any]] = [
            ("tensor-parallel-size", self.tensor_parallel_size),
            *([("pipeline-parallel-size", p)] if (p := self.pipeline_parallel_size) > 1 else []),
            *([("data-parallel-size", self.data_parallel_size)] if self.data_parallel_size > 1 else []),
            *([("enable-expert-parallel", True)] if self.enable_expert_parallel else []),
            ("max-model-len", self.max_model_len),
            ("max-num-seqs", self.max_num_seqs),
            ("max-num-batched-tokens", self.max_num_batched_tokens),
            ("enable-chunked-prefill", self.enable_chunked_prefill),
        ]
        if 0 < self.long_prefill_token_threshold < self.max_model_len:  # at or above it, the cap never
            # binds (no prompt is that long) and vLLM refuses one above --max-model-len
            args.append(("long-prefill-token-threshold", self.long_prefill_token_threshold))
        args += [
            ("enable-prefix-caching", self.enable_prefix_caching),
            ("block-size", self.block_size),
            ("gpu-memory-utilization", self.gpu_memory_utilization),
        ]
        if self.policy != "fcfs":
            args.append(("scheduling-policy", self.policy))
        if self.kv_cache_dtype != "auto":
            args.append(("kv-cache-dtype", self.kv_cache_dtype))
        if self.quantization is not None:
            args.append(("quantization", self.quantization))
        for key, default in KNOBS_033.items():  # vLLM 0.33's flags, where set
            value = getattr(self, key)
            if value != default or key == "async_scheduling":
                # async always said: vLLM turns it on by default on a GPU, and the server must
                # run the scheduler that was simulated (--no-async-scheduling when it was sync)
                args.append((key.replace("_", "-"), value))
        if self.enable_lora:  # vLLM's LoRAConfig flags
            args += [
                ("enable-lora", True),
                ("max-loras", self.max_loras),
                ("max-lora-rank", self.max_lora_rank),
            ]
            if self.max_cpu_loras is not None:
                args.append(("max-cpu-loras", self.max_cpu_loras))
        if self.kv_offloading_size is not None:  # vLLM's CacheConfig flags (engine/arg_utils.py)
            args += [("kv-offloading-size", self.kv_offloading_size), ("kv-offloading-backend", "native")]
        sc = self.speculative()
        if sc is not None:  # vLLM's JSON keys only (servesim's acceptance inputs are not flags)
            args.append(("speculative-config", json.dumps(_speculative_json(sc, model))))
        return args

    def vllm_serve_command(self, model: str, *, strict: bool = True) -> str:
        """``vllm serve MODEL --flag value ...`` for one replica (booleans as ``--x`` / ``--no-x``);
        a catalog name as its Hugging Face id (``vllm_args`` says what ``strict`` does)."""
        model = served_id(model)
        parts = ["vllm", "serve", model]
        for name, value in self.vllm_args(model, strict=strict):
            if isinstance(value, bool):
                parts.append(f"--{name}" if value else f"--no-{name}")
            else:
                parts += [f"--{name}", _fmt(value)]
        return shlex.join(parts)

    def replica_commands(self, model: str, first_port: int = 8000, gpus_per_node: int = 8) -> list[str]:
        """One ``vllm serve`` line per replica: its GPUs (``CUDA_VISIBLE_DEVICES``, numbered within a
        node of ``gpus_per_node``) and its port; the router sends to these ports. Replicas are
        separate servers behind the router, as servesim simulates them, not vLLM's
        ``--data-parallel-size`` (whose own front end balances; docs/tuning.md)."""
        one = self.vllm_serve_command(model)
        lines = []
        per = self.gpus_per_replica  # TP x PP x DP GPUs per server
        for i in range(self.replicas):
            first = (i * per) % gpus_per_node
            ids = ",".join(str(first + j) for j in range(per))
            node = (i * per) // gpus_per_node
            port = first_port + i % max(1, gpus_per_node // per)
            where = f"  # replica {i + 1} of {self.replicas}" + (f", node {node + 1}" if node else "")
            lines.append(f"CUDA_VISIBLE_DEVICES={ids} {one} --port {port}{where}")
        return lines

    def vllm_config_yaml(self, model: str, header: list[str] | None = None) -> str:
        """The same settings as a ``vllm serve --config`` YAML (long flag names as keys).

        A false boolean is written as ``no-<flag>: true``: vLLM releases differ in how they read
        ``<flag>: false`` from a config file (some drop it, keeping the default True), while the
        ``--no-`` form means the same to all of them.
        """
        model = served_id(model)
        data: dict[str, Any] = {"model": model}
        for name, value in self.vllm_args(model):
            if isinstance(value, bool):
                data[name if value else f"no-{name}"] = True
            else:
                data[name] = value
        lines = [f"# {h}" for h in header or []]
        body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
        return "\n".join([*lines, body.rstrip("\n")]) + "\n"


def _speculative_json(sc: SpeculativeConfig, model: str | None) -> dict[str, Any]:
    """vLLM's ``--speculative-config`` object: the method, the draft's checkpoint (with a served
    ``model``: the one vLLM needs, ``DRAFT_MODEL`` where none is known; without: as given), k and
    the draft's TP where given."""
    if model is None:
        draft = served_id(sc.model) if sc.model is not None else None
    else:
        try:
            draft = draft_checkpoint(sc.method, sc.model, model)
        except ConfigError:  # strict callers checked first (serve_problems): a shown simulation
            draft = PLACEHOLDER_DRAFT
    out: dict[str, Any] = {"method": sc.method}
    if draft is not None:
        out["model"] = draft
    out["num_speculative_tokens"] = sc.num_speculative_tokens
    if sc.draft_tensor_parallel_size is not None:
        out["draft_tensor_parallel_size"] = sc.draft_tensor_parallel_size
    return out


def serve_problems(d: Deployment, model: str) -> list[str]:
    """Why vLLM 0.33 would not start ``d`` serving ``model`` (empty: it would), beyond the rules
    every deployment obeys (``deployment_problems``): a speculative config without the draft vLLM
    needs, a ``--max-model-len`` above the catalog model's context."""
    out: list[str] = []
    sc = d.speculative()
    if sc is not None:
        try:
            draft_checkpoint(sc.method, sc.model, model)
        except ConfigError as e:
            out.append(str(e))
    if d.block_size % CUDA_BLOCK_MULTIPLE:
        out.append(
            f"--block-size {d.block_size}: vLLM 0.33 on NVIDIA GPUs has no attention backend for it "
            f"(FlashAttention, FlashInfer, Triton and FlexAttention take multiples of "
            f"{CUDA_BLOCK_MULTIPLE}) and refuses to start: use 16, 32, 64 or 128"
        )
    limit = _context_limit(model)
    if limit is not None and d.max_model_len > limit:
        out.append(
            f"--max-model-len {d.max_model_len} is above {model}'s context ({limit:,} tokens, its "
            "max_position_embeddings): vLLM refuses to start; the trace has longer requests than "
            "the model takes (give --max-model-len, or drop them)"
        )
    return out


def check_speculative_draft(spec: SpeculativeConfig | None, hardware: Hardware) -> None:
    """Before any work: ``ConfigError`` (naming ``--speculative-config`` and what to give) when a
    recommendation that speculates with ``spec`` on ``hardware``'s model could not be written as
    a command vLLM starts (no drafter vLLM needs is known); nothing when it could, or no spec."""
    if spec is not None:
        draft_checkpoint(spec.method, spec.model, hardware.serve_model)


def _context_limit(model: str) -> int | None:
    """The catalog model's max_position_embeddings (None: a model servesim does not know)."""
    from servesim.perf.catalog import load_catalog
    from servesim.perf.errors import PerfError

    try:
        return load_catalog().entry(model).max_position_embeddings
    except PerfError:
        return None


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def with_pipeline_defaults(data: Any) -> Any:
    """vLLM 0.33 runs pipeline stages with async scheduling unless told otherwise (as
    ``EngineConfig``): deployment values with stages that do not say schedule asynchronously."""
    if isinstance(data, dict) and "async_scheduling" not in data:
        pp = data.get("pipeline_parallel_size", 1)
        if isinstance(pp, int) and not isinstance(pp, bool) and pp > 1:
            return {**data, "async_scheduling": True}
    return data


def deployment_problems(d: Deployment) -> list[tuple[str, str]]:
    """vLLM's start-up rules and contradictory settings: ``(rule, reason)`` pairs, empty when valid."""
    out: list[tuple[str, str]] = []
    if d.block_size not in VLLM_BLOCK_SIZES:
        out.append(
            (
                "block_size",
                f"block_size {d.block_size} is not one vLLM accepts "
                f"({', '.join(map(str, VLLM_BLOCK_SIZES))})",
            )
        )
    if d.max_num_batched_tokens < d.max_num_seqs:
        out.append(
            (
                "budget_below_max_num_seqs",
                f"max_num_batched_tokens ({d.max_num_batched_tokens}) < max_num_seqs ({d.max_num_seqs}): "
                "vLLM requires a step budget of at least one token per sequence",
            )
        )
    if d.max_num_active_seqs is not None and d.max_num_active_seqs > d.max_num_seqs:
        out.append(
            (
                "active_seqs_above_max_num_seqs",
                f"max_num_active_seqs ({d.max_num_active_seqs}) cannot be greater than max_num_seqs "
                f"({d.max_num_seqs}) (vLLM refuses to start)",
            )
        )
    if not d.enable_chunked_prefill and d.max_num_batched_tokens < d.max_model_len:
        out.append(
            (
                "unchunked_budget_below_max_model_len",
                f"chunked prefill off needs max_num_batched_tokens ({d.max_num_batched_tokens}) >= "
                f"max_model_len ({d.max_model_len}) so that any prompt fits one step (vLLM refuses to "
                "start otherwise)",
            )
        )
    if not d.enable_chunked_prefill and d.long_prefill_token_threshold > 0:
        out.append(
            (
                "threshold_without_chunking",
                f"long_prefill_token_threshold {d.long_prefill_token_threshold} with chunked prefill off: "
                "vLLM applies the cap before the chunking check and so splits long prompts anyway, "
                "contradicting --no-enable-chunked-prefill; set it to 0 or enable chunked prefill",
            )
        )
    if d.num_speculative_tokens and d.speculative_config is None:
        out.append(
            (
                "speculation_without_method",
                f"num_speculative_tokens {d.num_speculative_tokens} needs a speculative config (its "
                "method and acceptance): give --speculative-config, or speculative-config in --config",
            )
        )
    if d.pipeline_parallel_size > 1 and not d.async_scheduling:
        out.append(
            (
                "pipeline_without_async_scheduling",
                f"pipeline_parallel_size {d.pipeline_parallel_size} with async scheduling off: vLLM 0.33 "
                "runs pipeline parallelism with async scheduling (its V2 model runner); the sync "
                "scheduler's batch queue is not modelled: turn async_scheduling on",
            )
        )
    return out


def vllm_default_deployment(hardware: Hardware, max_model_len: int, **fixed: Any) -> Deployment:
    """What ``vllm serve MODEL`` runs with no scheduler flags on this hardware: the baseline a
    study starts from when the user gives no configuration (docs/vllm-scheduling.md §1)."""
    mns, mbt = vllm_serve_defaults(hardware.base.timing_gpu)
    return Deployment(
        max_num_seqs=mns,
        max_num_batched_tokens=max(mbt, mns),
        enable_chunked_prefill=True,
        enable_prefix_caching=True,
        block_size=16,
        gpu_memory_utilization=hardware.default_gpu_memory_utilization,
        tensor_parallel_size=hardware.default_tensor_parallel_size,
        replicas=1,
        max_model_len=max_model_len,
        **fixed,
    )


def resolve_deployment(d: Deployment, hardware: Hardware) -> tuple[EngineConfig, ResolvedDeployment]:
    """One replica of ``d`` through ``servesim.spec.resolve`` (``hardware.resolve`` of ``d.spec``):
    its engine config and the resolved deployment (step times, notes, CPU tier); ``ValueError``
    with the reason when the hardware or vLLM would refuse it."""
    fixed = {"tensor_parallel_size", "gpu_memory_utilization"} - hardware.varies
    if "tensor_parallel_size" in fixed and d.tensor_parallel_size != hardware.default_tensor_parallel_size:
        raise ConfigError(
            f"this hardware context has a fixed TP of {hardware.default_tensor_parallel_size}; "
            f"tensor_parallel_size {d.tensor_parallel_size} cannot be simulated"
        )
    from servesim.perf.offload import check_offloading_size

    check_offloading_size(d.kv_offloading_size, d.tensor_parallel_size)
    res = hardware.resolve(d.spec(hardware))
    return res.config, res
