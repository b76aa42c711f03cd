"""Pipeline parallelism as vLLM 0.33 runs it (``vllm serve --pipeline-parallel-size P``): the layer
split, each stage's weights and KV cache, and each stage's step time.

Why: a model too large for one GPU's memory can be cut by layers instead of (or beside) by
tensors. Each of the ``P`` stages is ``tp`` GPUs holding a contiguous run of layers; a batch passes
the stages in turn, and the engine keeps ``P + 1`` batches in flight so that every stage has work
(``servesim.engine.pipeline_steps``). What that costs and buys is set here:

* **The split** (``pp_partition``) is vLLM's ``get_pp_indices``
  (``vllm/distributed/utils.py``): ``L // P`` layers each, the ``L % P`` left over given one each
  to the stages before the last, nearest the last first (``partitions[-i] += 1`` for
  ``i = 2 .. r + 1``), or the split ``VLLM_PP_LAYER_PARTITION`` names. ``make_layers``
  (``vllm/model_executor/models/utils.py``) builds only the stage's layers (``PPMissingLayer``
  elsewhere).
* **Weights per GPU** (``stage_weights``): the stage's layers, tensor-parallel as without PP; the
  embedding on the first stage (and on the last when the lm_head is tied to it), the final norm
  and the lm_head on the last (``LlamaModel.__init__`` / ``LlamaForCausalLM.__init__``,
  ``vllm/model_executor/models/llama.py``), a vision encoder on the first.
* **KV cache**: every stage sizes its own cache from what its GPUs have left
  (``determine_available_memory`` per worker; the dummy sampler runs on the last stage only,
  ``v1/worker/gpu/model_runner.py: profile_run``), in blocks of its own layers' pages; vLLM then
  takes the smallest count over the workers for all of them
  (``v1/core/kv_cache_planning.py: get_kv_cache_configs``, "Change the num_blocks of each rank to
  the smallest among all ranks"). The scheduler's one pool is that count (``pp_kv_capacity``).
* **Stage step time** (``StageStepTime``): the roofline over the stage's layers only (their
  GEMMs, attention, all-reduces and per-layer overheads), the embedding's all-reduce on the first
  stage, the lm_head, its logits' gather and the sampling on the last, and, on every stage but
  the last, the send of the activations to the next stage: ``hidden_states`` and ``residual``
  (``make_empty_intermediate_tensors_factory(["hidden_states", "residual"], hidden)``), each TP
  rank sending ``1/tp`` of them point to point and the next stage's ranks all-gathering them
  (``GroupCoordinator.isend_tensor_dict`` with ``all_gather_group=get_tp_group()``,
  ``v1/worker/gpu_worker.py: execute_model``); the receiver waits for them before its forward,
  so the transfer sits between the two stages: ``latency + 2 T h b / tp / link`` and the
  all-gather's ``(tp-1)/tp`` of the ``2 T h b`` bytes, on the GPU's interconnect.

Not modelled: stages on different nodes (the send is timed on the GPU's own interconnect, one
node), the CPU's part of a step beside the overlap, uneven memory besides the layer split (every
GPU is the same kind).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servesim.bounds import MAX_TP
from servesim.engine.step_time import BatchComposition
from servesim.errors import ConfigError
from servesim.perf.catalog import GPUSpec, ModelSpec, resolve_gpu, resolve_model
from servesim.perf.errors import MemoryFitError, PerfError
from servesim.perf.memory import GiB, KVCapacity, WeightBreakdown, check_tp, kv_capacity, weight_breakdown
from servesim.perf.profile import HardwareProfile
from servesim.perf.roofline import RooflineStepTime

if TYPE_CHECKING:
    from servesim.engine.speculative import SpeculativeConfig

#: The bytes of activations one token sends to the next stage, in the activation dtype: vLLM's
#: intermediate tensors of a decoder are ``hidden_states`` and ``residual``, each ``hidden`` wide.
INTERMEDIATE_TENSORS = 2


def pp_partition(num_layers: int, pp: int, partition: str | Sequence[int] | None = None) -> tuple[int, ...]:
    """Layers per stage, as vLLM's ``get_pp_indices`` (``vllm/distributed/utils.py``) splits them.

    ``partition``: ``VLLM_PP_LAYER_PARTITION`` (``"20,20,20,20"`` or a list), which must have ``pp``
    entries summing to ``num_layers``. Otherwise ``num_layers // pp`` each, and the remainder
    ``r`` goes one layer each to stages ``P-2, P-3, ..., P-1-r`` (never the last, which also holds
    the final norm and lm_head; with ``r <= P-2`` never the first either, which holds the
    embedding). Raises ``ConfigError`` naming ``pipeline_parallel_size`` when a stage would get no
    layer (vLLM would build a stage of ``PPMissingLayer`` only).
    """
    if pp < 1:
        raise ConfigError(f"pipeline_parallel_size must be >= 1, got {pp}")
    if partition is not None:
        if isinstance(partition, str):
            try:
                parts = [int(x) for x in partition.split(",")]
            except ValueError:
                raise ConfigError(
                    f"invalid VLLM_PP_LAYER_PARTITION {partition!r}: give layer counts like 20,20"
                ) from None
        else:
            parts = [int(x) for x in partition]
        if len(parts) != pp:
            raise ConfigError(
                f"VLLM_PP_LAYER_PARTITION has {len(parts)} stages but pipeline_parallel_size is {pp}, "
                "as vLLM requires"
            )
        if sum(parts) != num_layers:
            raise ConfigError(
                f"VLLM_PP_LAYER_PARTITION sums to {sum(parts)} layers but the model has {num_layers}, "
                "as vLLM requires"
            )
    else:
        per = num_layers // pp
        parts = [per] * pp
        remaining = num_layers % pp
        for i in range(2, remaining + 2):
            parts[-i] += 1
    if any(n < 1 for n in parts):
        raise ConfigError(
            f"pipeline_parallel_size {pp} leaves a stage without layers (split {parts} of {num_layers} "
            f"layers); use pipeline_parallel_size <= {num_layers}"
        )
    return tuple(parts)


def pp_indices(
    num_layers: int, rank: int, pp: int, partition: str | Sequence[int] | None = None
) -> tuple[int, int]:
    """``(start_layer, end_layer)`` of stage ``rank``: vLLM's ``get_pp_indices`` return value."""
    parts = pp_partition(num_layers, pp, partition)
    start = sum(parts[:rank])
    return start, start + parts[rank]


def check_pp(model: ModelSpec, tp: int, pp: int) -> None:
    """Refusals of ``--pipeline-parallel-size`` on this model, naming the flag: the split must give
    every stage a layer, the GPUs of a replica stay within ``MAX_TP`` and TP's own rules hold."""
    check_tp(model, tp)
    if pp > model.num_layers:
        raise ConfigError(
            f"pipeline_parallel_size {pp} exceeds {model.name}'s {model.num_layers} layers: a stage would "
            f"hold none; use pipeline_parallel_size <= {model.num_layers}"
        )
    if tp * pp > MAX_TP:
        raise ConfigError(
            f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {tp * pp} GPUs in one replica; "
            f"servesim models at most {MAX_TP}"
        )
    pp_partition(model.num_layers, pp)


def stage_model(model: ModelSpec, start: int, end: int) -> ModelSpec:
    """The model's layers ``start .. end-1`` as a model of their own (the roofline and the KV
    arithmetic count layers from it): its dense-MLP layers are those of the range. Raises
    ``PerfError`` where the stage's MoE layers cannot be counted that way (an interleaved MoE
    pattern cut at an odd layer)."""
    n = end - start
    dense_first = max(0, min(end, model.first_dense_layers) - start)
    stage = model.model_copy(update={"num_layers": n, "first_dense_layers": dense_first})
    exact = sum(
        1
        for i in range(max(start, model.first_dense_layers), end)
        if model.num_experts and (i + 1) % model.moe_layer_interval == 0
    )
    if stage.num_moe_layers != exact:
        raise PerfError(
            f"{model.name}: its MoE layers every {model.moe_layer_interval} cannot be split at layer {start} "
            "(not modelled); set VLLM_PP_LAYER_PARTITION so that every stage starts at a multiple of "
            f"{model.moe_layer_interval}"
        )
    return stage


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its rank, its layers and the model cut to them."""

    rank: int
    start: int
    end: int
    model: ModelSpec
    first: bool
    last: bool

    @property
    def num_layers(self) -> int:
        return self.end - self.start


def stages(model: ModelSpec, pp: int, partition: str | Sequence[int] | None = None) -> list[Stage]:
    """The ``pp`` stages of ``model`` in order (one stage: the whole model)."""
    parts = pp_partition(model.num_layers, pp, partition)
    out = []
    start = 0
    for rank, n in enumerate(parts):
        out.append(
            Stage(rank, start, start + n, stage_model(model, start, start + n), rank == 0, rank == pp - 1)
        )
        start += n
    return out


def stage_weights(model: ModelSpec, stage: Stage, tp: int) -> WeightBreakdown:
    """Weight bytes one GPU of ``stage`` holds (``memory.weight_breakdown`` of its layers, then what
    lives on one stage only): the embedding on the first stage and, when the lm_head is tied to
    it, on the last; the lm_head and the final norm on the last; a vision encoder on the first."""
    w = weight_breakdown(stage.model, tp)
    if stage.first and stage.last:
        return weight_breakdown(model, tp)
    embedding = w.embedding if (stage.first or (model.tie_word_embeddings and stage.last)) else 0
    lm_head = w.lm_head if stage.last else 0
    final_norm = 0 if stage.last else model.hidden_size * model.dtype_bytes
    return w.model_copy(
        update={
            "embedding": embedding,
            "lm_head": lm_head,
            "norms": w.norms - final_norm,
            "extra": w.extra if stage.first else 0,
        }
    )


@dataclass(frozen=True)
class PipelineKVCapacity:
    """Every stage's own KV sizing (per GPU of the stage) and the pool the scheduler gets: the
    smallest stage's block count (vLLM's ``get_kv_cache_configs``)."""

    stages: tuple[KVCapacity, ...]
    layers: tuple[int, ...]

    @property
    def num_gpu_blocks(self) -> int:
        return min(c.num_gpu_blocks for c in self.stages)

    @property
    def limiting_stage(self) -> int:
        """The stage whose block count the pool takes (the first of the smallest)."""
        blocks = [c.num_gpu_blocks for c in self.stages]
        return blocks.index(min(blocks))

    @property
    def caveats(self) -> list[str]:
        return list(dict.fromkeys(c for s in self.stages for c in s.caveats))


def pp_kv_capacity(
    model: str | ModelSpec,
    gpu: str | GPUSpec,
    tp: int = 1,
    pp: int = 1,
    *,
    partition: str | Sequence[int] | None = None,
    lora_bytes_per_layer: float = 0.0,
    **kwargs: Any,
) -> PipelineKVCapacity:
    """KV blocks of ``model`` on ``pp`` stages of ``tp`` x ``gpu``: ``memory.kv_capacity`` of each
    stage (its layers, its weights, the sampler's reserve on the last), then vLLM's minimum.
    ``kwargs``: ``kv_capacity``'s sizing arguments (``gpu_memory_utilization``, ``block_size``,
    ``kv_dtype``, ``max_num_batched_tokens``, ``max_num_seqs``, ``max_model_len``, ``hybrid``).
    ``lora_bytes_per_layer``: the LoRA slots' bytes per GPU per layer (each stage holds its layers').
    A stage that does not fit raises ``MemoryFitError`` naming the stage and
    ``pipeline_parallel_size``."""
    m = resolve_model(model)
    g = resolve_gpu(gpu)
    check_pp(m, tp, pp)
    if "max_model_len" not in kwargs or kwargs["max_model_len"] is None:
        kwargs["max_model_len"] = m.max_position_embeddings  # the whole model's, not a stage's
    caps = []
    sts = stages(m, pp, partition)
    for st in sts:
        try:
            cap = kv_capacity(
                st.model,
                g,
                tp,
                weights=stage_weights(m, st, tp),
                sampler=st.last,
                lora_bytes=math.ceil(lora_bytes_per_layer * st.num_layers),
                **kwargs,
            )
        except MemoryFitError as e:
            if pp == 1:
                raise
            raise MemoryFitError(
                f"pipeline stage {st.rank} of {pp} (layers {st.start}-{st.end - 1}): {e}; or raise "
                "pipeline_parallel_size"
            ) from None
        caps.append(cap.model_copy(update={"model": m.name}))
    return PipelineKVCapacity(tuple(caps), tuple(st.num_layers for st in sts))


def p2p_bytes_per_token(model: ModelSpec, tp: int) -> float:
    """Bytes each TP rank of a stage sends the next stage per token: ``hidden_states`` and
    ``residual`` in the activation dtype, split over the TP ranks (the receiver all-gathers)."""
    return INTERMEDIATE_TENSORS * model.hidden_size * model.dtype_bytes / tp


class StageStepTime(RooflineStepTime):
    """The roofline of one stage: its layers, what lives on its stage only, the send onward."""

    kind = "roofline_stage"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        tp: int = 1,
        profile: HardwareProfile | None = None,
        *,
        first: bool = True,
        last: bool = True,
        **kwargs: Any,
    ) -> None:
        self.first = first
        self.last = last
        super().__init__(model, gpu, tp, profile, **kwargs)

    def _precompute(self) -> None:
        super()._precompute()
        m, g, tp, pr = self.model, self.gpu, self.tp, self.profile
        ab = m.dtype_bytes
        if not self.last:  # no lm_head, no logits gathered, nothing sampled
            lm_bytes = math.ceil(m.vocab_size / tp) * m.hidden_size * ab
            self.weight_bytes_read -= lm_bytes
            self._m_weights = self.weight_bytes_read / (g.hbm_bandwidth * pr.gemm_bandwidth_efficiency)
            self._c_sample = 0.0
            self._gather_sample = 0.0
        if not self.first and tp > 1:  # the embedding's all-reduce is the first stage's: 2 L, not 2 L + 1
            scale = (2 * m.num_layers) / (2 * m.num_layers + 1)
            self._fixed -= self._ar_fixed * (1 - scale)
            self._ar_fixed *= scale
            self._ar_tok *= scale
            self._ar_tok_1 *= scale
            self._ar_switch *= scale
        link = g.interconnect_bandwidth * pr.interconnect_efficiency
        if not self.last:
            tok = INTERMEDIATE_TENSORS * m.hidden_size * ab
            # point to point 1/tp of the bytes per rank, then the next stage's all-gather
            self._p2p_tok = (tok / tp + tok * (tp - 1) / tp) / link
            self._p2p_fixed = pr.allreduce_latency_s * (1 + (tp - 1))
        else:
            self._p2p_tok = 0.0
            self._p2p_fixed = 0.0
        self._fixed += self._p2p_fixed

    def _shape_terms(self, t: int, n_seq: int, mixed: bool) -> tuple[float, float, float]:
        """The roofline's terms with the send onward added to the tail (the padded tokens travel:
        the intermediate tensors are the CUDA graph's size)."""
        head, tail, seq = super()._shape_terms(t, n_seq, mixed)
        if self._p2p_tok:
            padded = self._pad[t] if t <= self._cg_max else t
            tail += padded * self._p2p_tok
        return head, tail, seq

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        return {**super().model_dump(mode), "kind": self.kind, "layers": self.model.num_layers}


class PipelineStepTime:
    """The step-time model of a PP deployment: one ``StageStepTime`` per stage.

    ``stage_times(batch)`` is what the engine's batch queue uses (``engine.pipeline_steps``);
    ``step_time(batch)`` is their sum, the time one batch takes through an idle pipeline."""

    kind = "pipeline"

    def __init__(
        self, model: ModelSpec, stage_models: Sequence[StageStepTime], layers: Sequence[int]
    ) -> None:
        self.model = model
        self.stages = list(stage_models)
        self.layers = tuple(layers)
        first = self.stages[0]
        self.gpu = first.gpu
        self.tp = first.tp
        self.pp = len(self.stages)
        self.profile = first.profile
        self.kv_dtype = first.kv_dtype
        self.max_num_seqs = first.max_num_seqs
        self.max_num_batched_tokens = first.max_num_batched_tokens
        self.capture_sizes = first.capture_sizes
        self._fns = [s.step_time for s in self.stages]

    def stage_times(self, batch: BatchComposition) -> list[float]:
        """Each stage's time for ``batch`` (the send onward included), first stage first."""
        return [f(batch) for f in self._fns]

    def step_time(self, batch: BatchComposition) -> float:
        return sum(self.stage_times(batch))

    def adapter_load_times(self) -> Any:
        """With LoRA, what activating an adapter adds to a step: each stage loads its own layers'
        adapter weights at once, so the stage with the most layers sets it (``perf.lora``)."""
        return max(self.stages, key=lambda s: s.model.num_layers).adapter_load_times()

    def drafter(self, spec: SpeculativeConfig) -> None:
        raise ConfigError("speculative decoding with pipeline_parallel_size > 1 is not modelled yet")

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        first = self.stages[0].model_dump(mode)
        return {
            **{k: v for k, v in first.items() if k not in ("kind", "layers", "model")},
            "kind": self.kind,
            "model": self.model.name,
            "pipeline_parallel_size": self.pp,
            "stage_layers": list(self.layers),
        }

    def with_profile(self, profile: HardwareProfile) -> PipelineStepTime:
        return PipelineStepTime(
            self.model,
            [
                StageStepTime(s.model, s.gpu, s.tp, profile, first=s.first, last=s.last, **s.options())
                for s in self.stages
            ],
            self.layers,
        )

    def __repr__(self) -> str:
        where = f"{self.pp} stages of {self.tp}x{self.gpu.name}"
        return f"PipelineStepTime({self.model.name} on {where}, layers {list(self.layers)})"


def build_pipeline_step_time(
    full: RooflineStepTime, pp: int, partition: str | Sequence[int] | None = None
) -> PipelineStepTime:
    """The PP step-time model matching ``full`` (the whole model's roofline on ``tp`` GPUs, built
    by ``roofline.build_step_time_model`` with its profile and settings), cut into ``pp`` stages."""
    m = full.model
    check_pp(m, full.tp, pp)
    sts = stages(m, pp, partition)
    return PipelineStepTime(
        m,
        [
            # the target model's settings (no draft head's extra GEMMs: PP refuses speculation)
            StageStepTime(
                st.model, full.gpu, full.tp, full.profile, first=st.first, last=st.last, **full.options()
            )
            for st in sts
        ],
        [st.num_layers for st in sts],
    )


def describe_split(model: ModelSpec, tp: int, pp: int, cap: PipelineKVCapacity | None = None) -> str:
    """One line for ``timed as``: the stages' layers and, when sized, which stage sets the pool."""
    parts = pp_partition(model.num_layers, pp)
    line = f"{pp} pipeline stages of {tp} GPU{'s' if tp > 1 else ''} (layers {'+'.join(map(str, parts))})"
    if cap is not None:
        w = [c.weight_bytes / GiB for c in cap.stages]
        line += f", weights {'/'.join(f'{x:.1f}' for x in w)} GiB per GPU"
    return line


__all__ = [
    "INTERMEDIATE_TENSORS",
    "PipelineKVCapacity",
    "PipelineStepTime",
    "Stage",
    "StageStepTime",
    "build_pipeline_step_time",
    "check_pp",
    "describe_split",
    "p2p_bytes_per_token",
    "pp_indices",
    "pp_kv_capacity",
    "pp_partition",
    "stage_model",
    "stage_weights",
    "stages",
]
