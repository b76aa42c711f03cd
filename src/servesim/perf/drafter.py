"""The drafter's roofline: speculative decoding's draft passes timed like the target's steps.

vLLM 0.33's proposers (``vllm/v1/spec_decode/eagle.py``, ``draft_model.py``) run after the
target's forward pass, in the same step: a first pass over every token the target computed
(verifications, prefill chunks, decodes: the drafter's KV cache must cover them), with logits on
one row per request, then ``k - 1`` passes of one token per request (every request of the batch:
partial prefills too, whose drafts are discarded), each attending over its context plus the drafts
so far. servesim times each pass on the same roofline as the target (``RooflineStepTime``: weight
reads, the drafter's own KV reads, GEMMs, CUDA-graph padding, TP all-reduces), so the drafter's
cost grows with the batch as the target's does:

* ``draft_model``: ``speculative_config.model`` names a model of servesim's catalog (or a local
  ``config.json``); it runs on ``draft_tensor_parallel_size`` GPUs, vLLM's default the target's TP
  (``SpeculativeConfig._verify_and_get_draft_tp``: only 1 or the target's TP is allowed), and must
  share the target's vocabulary (vLLM refuses otherwise).
* ``eagle`` / ``eagle3`` / ``mtp``: a head of the target's shape, derived from the target's card
  (``speculative_config.model``, the head's checkpoint, is not read): one decoder layer (its own
  one-layer KV cache) and an LM head, on the target's TP (``head_spec`` states each assumption).
* ``ngram``: no GPU time (a CPU prompt lookup; its few microseconds per request are not charged).

A draft pass pays no per-step fixed overhead (``step_overhead_s``, ``mixed_step_overhead_s``:
scheduling, input preparation and output processing happen once per engine step, in the target's
time); it pays the profile's per-layer overhead, and the first pass the per-request overhead
(the proposer prepares each request's next input once a step; the later passes update theirs
on the GPU, batched).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engine.step_time import BatchComposition
from servesim.errors import ConfigError
from servesim.perf.catalog import ModelSpec, load_catalog, resolve_model
from servesim.perf.errors import PerfError
from servesim.perf.memory import attention_params_per_rank

if TYPE_CHECKING:
    from servesim.engine.speculative import SpeculativeConfig
    from servesim.perf.roofline import RooflineStepTime

#: LM-head rows of an EAGLE-3 head: the published EAGLE-3 heads (e.g.
#: ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``, config ``draft_vocab_size``) predict over a reduced
#: draft vocabulary of 32,000 tokens, mapped to the target's by ``d2t``; EAGLE-1 and MTP heads
#: use the target's full vocabulary.
EAGLE3_DRAFT_VOCAB = 32_000

#: EAGLE-3 fuses the target's hidden states of three layers into its input.
EAGLE3_FUSED_LAYERS = 3

_LABELS = {"eagle": "EAGLE head", "eagle3": "EAGLE-3 head", "mtp": "MTP module", "draft_model": "draft model"}


class HeadShape:
    """A draft head derived from its target: the one-layer ``spec`` the roofline times, and the
    parameters per rank of its extra GEMMs, in every pass and in the first pass only."""

    __slots__ = ("every_pass_params", "first_pass_params", "notes", "spec")

    def __init__(
        self, spec: ModelSpec, every_pass_params: float, first_pass_params: float, notes: str
    ) -> None:
        self.spec = spec
        self.every_pass_params = every_pass_params
        self.first_pass_params = first_pass_params
        self.notes = notes


def head_spec(target: ModelSpec, method: str, tp: int) -> HeadShape:
    """The ``eagle`` / ``eagle3`` / ``mtp`` head of ``target`` on ``tp`` GPUs.

    * EAGLE (vLLM ``llama_eagle.py``): an fc of 2 h -> h (embedding and target hidden state,
      replicated on every rank) and one dense decoder layer of the target's attention and MLP
      widths, every pass; the LM head over the target's vocabulary.
    * EAGLE-3 (``llama_eagle3.py``): the fusion fc of 3 h -> h (replicated) on the first pass only
      (vLLM's ``combine_hidden_states`` runs on the target's states; later passes feed the head's
      own); one dense decoder layer whose QKV projection reads 2 h (embedding and hidden state
      concatenated); an LM head over ``EAGLE3_DRAFT_VOCAB`` rows (the target's vocabulary if smaller).
    * MTP (DeepSeek-V3's module, ``deepseek_mtp.py``): an ``eh_proj`` of 2 h -> h (replicated)
      and one decoder layer of the target's own kind (an MoE layer when the target's last layer
      is one), every pass; the target's (shared) LM head.

    EAGLE heads are dense bf16 layers whatever the target (MoE or quantized targets included);
    MTP keeps the target's weight dtype. Embedding lookups and norms are not charged.
    """
    h = target.hidden_size
    if method == "mtp":
        last_is_moe = target.is_moe and target.num_layers % target.moe_layer_interval == 0
        if target.is_moe and not last_is_moe:
            layer = target.model_copy(
                update={"num_experts": 0, "experts_per_token": 0, "shared_expert_intermediate_size": 0}
            )
        else:
            layer = target
        spec = layer.model_copy(
            update={"name": f"{target.name} MTP module", "num_layers": 1, "moe_layer_interval": 1}
        )
        kind = "MoE" if spec.is_moe else "dense"
        notes = f"1 {kind} decoder layer + eh_proj 2h->h + the target's LM head ({target.vocab_size:,} rows)"
        return HeadShape(spec, 2 * h * h, 0.0, notes)
    dense = {
        "name": f"{target.name} {'EAGLE-3' if method == 'eagle3' else 'EAGLE'} head",
        "num_layers": 1,
        "num_experts": 0,
        "experts_per_token": 0,
        "moe_intermediate_size": None,
        "shared_expert_intermediate_size": 0,
        "moe_layer_interval": 1,
        "weight_dtype": None,
        "extra_params": 0,
    }
    if method == "eagle":
        spec = target.model_copy(update=dense)
        notes = f"1 dense decoder layer + fc 2h->h + the target's LM head ({target.vocab_size:,} rows)"
        return HeadShape(spec, 2 * h * h, 0.0, notes)
    if method != "eagle3":
        raise ConfigError(f"speculative_config.method {method!r} has no head of the target's shape")
    vocab = min(EAGLE3_DRAFT_VOCAB, target.vocab_size)
    spec = target.model_copy(update={**dense, "vocab_size": vocab})
    # The QKV projection's second input half (the head's own hidden state), split like QKV.
    qkv_extra = attention_params_per_rank(spec, tp) - spec.q_dim // tp * h
    notes = (
        f"1 dense decoder layer (QKV over 2h) + fusion fc {EAGLE3_FUSED_LAYERS}h->h on the first pass "
        f"+ an LM head over a {vocab:,}-token draft vocabulary"
    )
    return HeadShape(spec, float(qkv_extra), float(EAGLE3_FUSED_LAYERS * h * h), notes)


class RooflineDrafter:
    """``DraftTimeModel``: the drafter's k passes, each on its own ``RooflineStepTime``."""

    def __init__(
        self,
        first: RooflineStepTime,
        later: RooflineStepTime,
        k: int,
        label: str,
    ) -> None:
        self.first = first  # the first pass (over every token the target computed)
        self.later = later  # passes 2..k (one token per request)
        self.k = k
        self.label = label
        self._later_terms: dict[int, tuple[float, float, float, float]] = {}  # by rows

    def draft_time(self, batch: BatchComposition, num_rows: int, ctx_sum: int) -> float:
        """The first pass over ``batch``, then k - 1 decode-only passes of ``num_rows`` rows,
        timed from ``decode_terms`` (``step_time``'s float to the bit for a decode-only batch)
        without building a batch and walking ``step_time`` per pass (kept per row count): every
        speculative step pays this, so it is a run's hot path."""
        t = self.first.step_time(batch)
        if self.k > 1:
            terms = self._later_terms.get(num_rows)
            if terms is None:
                terms = self._later_terms[num_rows] = self.later.decode_terms(num_rows)
            head, per_ctx, tail, seq = terms
            for i in range(1, self.k):
                t += head + (ctx_sum + i * num_rows) * per_ctx + tail + seq
        return t

    def describe(self) -> str:
        return self.label

    def __repr__(self) -> str:
        return f"RooflineDrafter({self.label})"


def draft_tp(spec: SpeculativeConfig, target_tp: int) -> int:
    """vLLM's draft TP: the target's unless given; only 1 or the target's is allowed."""
    given = spec.draft_tensor_parallel_size
    if given is None:
        return target_tp
    if given not in (1, target_tp):
        raise ConfigError(
            f"speculative_config.draft_tensor_parallel_size {given}: vLLM allows only 1 or the "
            f"target's tensor_parallel_size ({target_tp})"
        )
    return given


def _pass_model(
    target: RooflineStepTime, model: ModelSpec, tp: int, extra: float = 0.0, *, first: bool
) -> RooflineStepTime:
    """A drafter pass on the target's GPUs, profile and CUDA graphs, without the per-step fixed
    costs (scheduling, input preparation, output processing: paid once, in the target's time);
    the per-request overhead on the ``first`` pass only (the proposer prepares each request's
    inputs once a step; later passes update them on the GPU, batched)."""
    from servesim.perf.roofline import RooflineStepTime

    update = {"step_overhead_s": 0.0, "mixed_step_overhead_s": 0.0}
    if not first:
        update["per_sequence_overhead_s"] = 0.0
    profile = target.profile.model_copy(update=update)
    return RooflineStepTime(
        model,
        target.gpu,
        tp,
        profile,
        kv_dtype=target.kv_dtype,
        max_num_seqs=target.max_num_seqs,
        max_num_batched_tokens=target.max_num_batched_tokens,
        cudagraphs=target.cudagraphs,
        extra_gemm_params=extra,
    )


def build_drafter(target: RooflineStepTime, spec: SpeculativeConfig) -> RooflineDrafter | None:
    """The roofline drafter of ``spec`` for ``target`` (None for n-gram: no GPU time)."""
    if spec.method == "ngram":
        return None
    tp = draft_tp(spec, target.tp)
    k = spec.num_speculative_tokens
    where = f"on {tp} x {target.gpu.name}"
    try:
        if spec.method == "draft_model":
            model = _draft_model(spec, target.model)
            first = _pass_model(target, model, tp, first=True)
            label = (
                f"draft model {model.name} {where}, its roofline: k = {k} passes "
                f"({_weights(first, 'a pass')})"
            )
            return RooflineDrafter(first, _pass_model(target, model, tp, first=False), k, label)
        shape = head_spec(target.model, spec.method, tp)
        first = _pass_model(
            target, shape.spec, tp, shape.every_pass_params + shape.first_pass_params, first=True
        )
        later = _pass_model(target, shape.spec, tp, shape.every_pass_params, first=False)
    except PerfError as e:
        raise ConfigError(f"speculative_config: the drafter cannot run {where}: {e}") from None
    label = (
        f"{_LABELS[spec.method]} of {target.model.name} {where}, its roofline: {shape.notes}; "
        f"k = {k} passes ({_weights(later, 'a later pass')})"
    )
    return RooflineDrafter(first, later, k, label)


def _weights(pass_model: RooflineStepTime, when: str) -> str:
    said = f"{pass_model.weight_bytes_read / 1e9:.2f} GB of weights read {when} per GPU"
    return f"{said}, plus the routed experts it touches" if pass_model.model.is_moe else said


def _draft_model(spec: SpeculativeConfig, target: ModelSpec) -> ModelSpec:
    """The catalog model ``speculative_config.model`` names, checked as vLLM checks it."""
    if spec.model is None:
        raise ConfigError(
            "speculative_config.model: method 'draft_model' needs the draft model's name, one of "
            f"servesim's catalog ({', '.join(sorted(load_catalog().models))}), or give "
            "draft_step_fraction"
        )
    try:
        model = resolve_model(spec.model)
    except PerfError:
        raise ConfigError(
            f"speculative_config.model {spec.model!r} is not a model of servesim's catalog; known models: "
            f"{', '.join(sorted(load_catalog().models))} (or a local config.json; or give "
            "draft_step_fraction to time the drafter as a fraction of the target's step)"
        ) from None
    if model.vocab_size != target.vocab_size:
        raise ConfigError(
            f"speculative_config.model {spec.model!r}: its vocabulary ({model.vocab_size:,} tokens) differs "
            f"from {target.name}'s ({target.vocab_size:,}); vLLM's draft_model requires the same vocabulary"
        )
    return model
