"""The roofline step-time model: how long one vLLM engine step takes on given GPUs.

Per step, with ``T`` scheduled tokens (decodes + prefill chunk tokens), on one tensor-parallel
rank (all ranks do the same work, in lockstep):

* **GEMMs** (QKV/O projections, MLP or shared experts, lm_head on the sampled rows, routed
  experts): compute ``c = FLOPs / (peak x gemm_compute_efficiency)`` (``moe_compute_efficiency``
  for the routed experts' grouped GEMMs) against memory
  ``m = bytes moved / (HBM bandwidth x gemm_bandwidth_efficiency)``, where bytes are the
  weights read once per step plus activation traffic. They meet on a smooth roofline
  ``(c^p + m^p)^(1/p)`` (p = ``gemm_roofline_sharpness``). Under CUDA graphs (steps of at
  most the largest capture size) the compute runs on the padded token count, as vLLM pads.
  MoE layers read only the experts the step's tokens touch: with uniform top-k routing,
  ``E x (1 - (1 - k/E)^T)`` of ``E``, but at least ``moe_min_expert_fraction`` of them.
* **Attention**: decodes read their KV cache (``Σ context x kv_bytes_per_token``); a prefill
  chunk of ``c`` tokens after ``p`` cached ones does ``4 x heads x head_dim x c x (p + (c+1)/2)``
  FLOPs per layer and reads ``(p + c)`` tokens of KV; each side is ``max(compute, memory)``.
  MLA (``perf.mla``): decodes score the latent cache with absorbed projections
  (``2 x heads x (2 kv_lora_rank + rope)`` FLOPs per pair), prefills run per head
  (``2 x heads x (head_dim + v_head_dim)``) and decompress each cached token through ``kv_b_proj``.
* **State layers** (Qwen3-Next's GatedDeltaNet, ``perf.layer_pattern``): they have no KV to read;
  each scheduled request reads its recurrent state once per step and writes it back
  (``2 x state layers x state bytes per rank``, at the attention bandwidth efficiency, a per-request
  cost), and each token updates and reads out the state, ``6 x value heads per rank x head_k_dim x
  head_v_dim`` FLOPs per layer (the delta rule's ``S k``, its rank-one update and ``S q``; a
  prefill chunk runs the same FLOPs per token in vLLM's chunked scan), at the attention compute
  efficiency. Their projections count as GEMMs; the causal convolution is left out (a few
  hundred FLOPs per channel).
* **Tensor parallelism**: ``2 x layers + 1`` all-reduces of ``T x hidden`` activations over the
  GPU link: on NVLink, small messages go one-shot (each rank reads ``tp-1`` peers' buffers),
  larger ones two-shot / ring (``2 (tp-1)/tp`` of the bytes), as vLLM's custom all-reduce
  chooses; plus a latency per peer (each all-reduce's barrier); the lm_head's logits are gathered.
* **Overheads**: a fixed per-step cost, per layer, per scheduled request; extra for steps that
  carry prefill (piecewise CUDA graphs with eager attention) and per layer for steps above the
  largest CUDA graph (no graphs at all).

``step_time`` is called once per engine step, so everything that does not depend on the batch
is precomputed in ``__init__`` and the call is plain float arithmetic. ``breakdown`` computes
the same total component by component (for reports and tests).
"""

from __future__ import annotations

import math
import warnings
from bisect import bisect_left
from typing import TYPE_CHECKING, Any

from servesim.engine.step_plan import roofline_step_time
from servesim.engine.step_time import BatchComposition, DraftTimeModel
from servesim.perf import mla
from servesim.perf.catalog import Catalog, GPUSpec, ModelSpec, load_catalog, resolve_gpu, resolve_model
from servesim.perf.lora import AdapterLoadTimes, adapter_load_times, lora_params_per_slot
from servesim.perf.memory import check_tp, kv_bytes_per_token, kv_heads_per_rank, mixer_params_per_rank
from servesim.perf.profile import HardwareProfile, resolve_profile

if TYPE_CHECKING:
    from servesim.engine.speculative import SpeculativeConfig

#: How the note on a token budget past the calibrated step sizes starts (``perf.setup`` finds it).
BUDGET_NOTE = "max_num_batched_tokens"

#: Step shapes whose batch-independent terms a model keeps (a run sees a few thousand).
_MAX_SHAPES = 1 << 16


class ExtrapolationWarning(UserWarning):
    """A profile is used far outside the measurements it was calibrated on."""


def cudagraph_capture_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, blackwell: bool = False
) -> list[int]:
    """vLLM's default CUDA-graph capture sizes: ``[1, 2, 4] + range(8, 256, 8) + range(256, max+1, 16)``
    with ``max = min(2 x max_num_seqs, 512)`` (1024 on data-center Blackwell), at most the token budget."""
    top = min(2 * max_num_seqs, 1024 if blackwell else 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return [s for s in sizes if s <= top and s <= max_num_batched_tokens]


def oneshot_allreduce_bytes(tp: int) -> int:
    """Largest message (exclusive) vLLM's custom all-reduce sends one-shot on fully connected GPUs.

    ``csrc/custom_all_reduce.cuh``: always for 2 GPUs (up to the 8 MiB custom all-reduce
    buffer, above which NCCL runs), under 512 KiB for up to 4, under 256 KiB for up to 8.
    """
    if tp == 2:
        return 8 * 2**20
    if tp <= 4:
        return 512 * 2**10
    if tp <= 8:
        return 256 * 2**10
    return 0


class RooflineStepTime:
    """``StepTimeModel`` for one model on ``tp`` GPUs with a calibration profile."""

    kind = "roofline"

    def __init__(
        self,
        model: ModelSpec,
        gpu: GPUSpec,
        tp: int = 1,
        profile: HardwareProfile | None = None,
        *,
        kv_dtype: str = "auto",
        max_num_seqs: int = 128,
        max_num_batched_tokens: int = 2048,
        cudagraphs: bool = True,
        extra_gemm_params: float = 0.0,
        lora_slots: int = 0,
        lora_rank: int = 16,
    ) -> None:
        check_tp(model, tp)
        self.model = model
        # Parameters per rank of further dense GEMMs every token runs through, in the activation
        # dtype (a draft head's fusion fc: ``perf.drafter``); 0 for a plain model.
        self.extra_gemm_params = extra_gemm_params
        self._drafters: dict[tuple[object, ...], DraftTimeModel | None] = {}
        self.gpu = gpu
        self.tp = tp
        self.profile = profile or HardwareProfile()
        self.kv_dtype = kv_dtype
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.cudagraphs = cudagraphs
        # --enable-lora: vLLM's max_loras adapter slots at max_lora_rank (0: LoRA off).
        self.lora_slots = lora_slots
        self.lora_rank = lora_rank
        self._precompute()

    # ------------------------------------------------------------------ constants
    def _precompute(self) -> None:
        m, g, tp, pr = self.model, self.gpu, self.tp, self.profile
        bw = g.hbm_bandwidth
        p16 = g.bf16_flops
        eta_c = pr.gemm_compute_efficiency
        eta_m = pr.gemm_bandwidth_efficiency
        ab = m.dtype_bytes
        L = m.num_layers
        moe_layers = m.num_moe_layers
        dense_layers = m.num_dense_layers

        # Dense GEMM groups per rank: (parameters, bytes per weight, peak FLOP/s of their kernels).
        # MLA: a decode multiplies by W_UK/W_UV (bf16) where a prefill uses kv_b_proj (its
        # weight dtype); same FLOPs (perf.mla), and decodes stream the weights, so they are counted.
        absorbed = L * mla.absorbed_params(m, tp) if m.is_mla else 0
        groups = [
            (mixer_params_per_rank(m, tp) - absorbed, m.bytes_of("attention"), "attention"),
            (dense_layers * m.dense_mlp_params_per_layer / tp, m.bytes_of("mlp"), "mlp"),
            (
                moe_layers * m.shared_expert_params_per_layer / tp,
                m.bytes_of("shared_experts"),
                "shared_experts",
            ),
        ]
        if absorbed:
            groups.append((absorbed, ab, "absorbed"))  # not a quantized module: bf16 peak
        flops_s_per_token = 0.0  # seconds of GEMM compute per token (dense part)
        weight_bytes = moe_layers * m.router_params_per_layer * ab
        flops_s_per_token += moe_layers * 2 * m.router_params_per_layer / (p16 * eta_c)
        if self.extra_gemm_params:
            weight_bytes += self.extra_gemm_params * ab
            flops_s_per_token += 2 * self.extra_gemm_params / (p16 * eta_c)
        if self.lora_slots:
            # LoRA (perf.lora): each token runs its adapter's shrink and expand (2 FLOPs per A and
            # B parameter of one slot); a step reads every slot's A and B, taken as all in use (an
            # upper bound: vLLM's kernels read the adapters of the batch, at most max_loras).
            lora = lora_params_per_slot(m, tp, self.lora_rank)
            weight_bytes += self.lora_slots * lora * ab
            flops_s_per_token += 2 * lora / (p16 * eta_c)
        for params, bpw, module in groups:
            weight_bytes += params * bpw
            wd = m.weight_dtype if module in m.quantized_modules else None
            flops_s_per_token += 2 * params / (g.peak_flops(wd) * eta_c)
        lm_params = math.ceil(m.vocab_size / tp) * m.hidden_size
        weight_bytes += lm_params * ab
        # State layers: the recurrent update and read-out per token, the state's read and write
        # per scheduled request and step (see the module docstring).
        self._state_seq = 0.0
        st = m.layer_pattern.state if m.layer_pattern is not None else None
        if st is not None:
            Ls = m.num_state_layers
            flops_s_per_token += (Ls * 6.0 * (st.num_v_heads // tp) * st.head_k_dim * st.head_v_dim) / (
                p16 * pr.attention_compute_efficiency
            )
            state_bytes = st.page_bytes(tp, ab)
            self._state_seq = Ls * 2.0 * state_bytes / (bw * pr.attention_bandwidth_efficiency)
        self._c_tok = flops_s_per_token
        self._c_sample = 2 * lm_params / (p16 * eta_c)
        self._m_weights = weight_bytes / (bw * eta_m)
        self.weight_bytes_read = weight_bytes  # per step, excluding routed experts

        # Routed experts (MoE layers): compute per routed (token, expert) pair, bytes per expert.
        self._moe_layers = moe_layers
        self._experts = m.num_experts
        self._topk = m.experts_per_token
        if moe_layers:
            e_params = m.expert_params / tp
            wd = m.weight_dtype if "experts" in m.quantized_modules else None
            self._c_routed = moe_layers * 2 * e_params / (g.peak_flops(wd) * pr.moe_compute_efficiency)
            self._m_expert = moe_layers * e_params * m.bytes_of("experts") / (bw * eta_m)
            self._miss = 1.0 - self._topk / self._experts
            self._touch_floor = pr.moe_min_expert_fraction
        else:
            self._c_routed = 0.0
            self._m_expert = 0.0
            self._miss = 1.0
            self._touch_floor = 0.0

        # Activation traffic per token: norms/residuals (8 h), projections' outputs, MLP intermediates.
        q_r = m.q_dim // tp
        kv_r = mla.latent_head_size(m) if m.is_mla else kv_heads_per_rank(m, tp) * m.head_dim
        attn_act = 8 * m.hidden_size + 2 * q_r + 2 * kv_r
        dense_mlp_act = m.mlp_matrices * m.intermediate_size / tp
        moe_mlp_act = (
            m.mlp_matrices
            * (m.experts_per_token * m.expert_intermediate_size + m.shared_expert_intermediate_size)
            / tp
        )
        act_bytes = ab * (L * attn_act + dense_layers * dense_mlp_act + moe_layers * moe_mlp_act)
        self._m_act_tok = act_bytes / (bw * eta_m)
        self._p = pr.gemm_roofline_sharpness
        self._inv_p = 1.0 / self._p

        # Attention.
        kvb = kv_bytes_per_token(m, tp, self.kv_dtype)
        self.kv_bytes_per_token = kvb
        self._a_mem = kvb / (bw * pr.attention_bandwidth_efficiency)  # seconds per token of context read
        La = m.num_attention_layers  # the state layers have no (query, key) pairs
        flop_pair = 4.0 * (m.num_attention_heads // tp) * m.head_dim * La  # FLOPs per (query, key) pair
        self._a_cmp = flop_pair / (p16 * pr.attention_compute_efficiency)
        self._d_cmp = self._a_cmp  # decode: the same pairs, unless MLA absorbs its projections
        self._a_ctx = 0.0  # per cached token of a prefill chunk: MLA decompresses its latent
        if m.is_mla:
            eta_a = p16 * pr.attention_compute_efficiency
            self._a_cmp = L * mla.prefill_pair_flops(m, tp) / eta_a
            self._d_cmp = L * mla.decode_pair_flops(m, tp) / eta_a
            wd = m.weight_dtype if "attention" in m.quantized_modules else None
            self._a_ctx = L * mla.context_decompress_flops(m, tp) / (g.peak_flops(wd) * eta_c)

        # Tensor parallelism: 2 L + 1 all-reduces of T x hidden activations per step (T padded
        # to the CUDA graph's size, as the graph runs). On NVLink,
        # vLLM's custom all-reduce reads every peer's buffer ("one-shot": (tp-1) x the bytes)
        # below a message size that depends on tp, and reduce-scatters then all-gathers above it
        # ("two-shot", the ring's 2 (tp-1)/tp); elsewhere NCCL's ring. vLLM switches where the two
        # cost the same, so above the switch two-shot's extra synchronisation costs what one-shot
        # read at it (the cost stays continuous). Each all-reduce also waits on a barrier with
        # each of its tp-1 peers: ``allreduce_latency_s`` is per peer.
        if tp > 1:
            n_ar = 2 * L + 1
            link = g.interconnect_bandwidth * pr.interconnect_efficiency
            tok_bytes = m.hidden_size * ab
            self._ar_fixed = n_ar * pr.allreduce_latency_s * (tp - 1)
            self._ar_tok = n_ar * 2.0 * (tp - 1) / tp * tok_bytes / link
            self._ar_tok_1 = n_ar * (tp - 1) * tok_bytes / link
            limit = oneshot_allreduce_bytes(tp) if g.interconnect == "nvlink" else 0
            self._ar_max_1 = math.ceil(limit / tok_bytes) - 1 if limit else 0
            self._ar_switch = self._ar_max_1 * (self._ar_tok_1 - self._ar_tok)
            self._gather_sample = m.vocab_size * ab * (tp - 1) / tp / link
        else:
            self._ar_fixed = self._ar_tok = self._ar_tok_1 = self._ar_switch = self._gather_sample = 0.0
            self._ar_max_1 = 0

        # Overheads and CUDA graphs.
        self._fixed = pr.step_overhead_s + L * pr.per_layer_overhead_s + self._ar_fixed
        self._per_seq = pr.per_sequence_overhead_s
        self._mixed = pr.mixed_step_overhead_s
        self._eager = L * pr.eager_layer_overhead_s
        sizes = (
            cudagraph_capture_sizes(self.max_num_seqs, self.max_num_batched_tokens) if self.cudagraphs else []
        )
        self.capture_sizes = sizes
        self._cg_max = sizes[-1] if sizes else 0
        self._pad = [0] * (self._cg_max + 1)
        for t in range(1, self._cg_max + 1):
            self._pad[t] = sizes[bisect_left(sizes, t)]
        self._terms: dict[tuple[int, int, bool], tuple[float, float, float]] = {}

    # ------------------------------------------------------------------ the model
    def step_time(self, batch: BatchComposition) -> float:
        """``head + attention + tail + seq`` (``step_plan.roofline_step_time``, in the engine's
        compiled core: a speculative run times every step's verification rows twice)."""
        return roofline_step_time(batch, self._a_cmp, self._a_ctx, self._a_mem, self._d_cmp, self._terms_of)

    def _terms_of(self, t: int, n_seq: int, mixed: bool) -> tuple[float, float, float]:
        """``_shape_terms``, kept per shape (up to ``_MAX_SHAPES`` of them)."""
        key = (t, n_seq, mixed)
        terms = self._terms.get(key)
        if terms is None:
            terms = self._shape_terms(t, n_seq, mixed)
            if len(self._terms) < _MAX_SHAPES:
                self._terms[key] = terms
        return terms

    def _shape_terms(self, t: int, n_seq: int, mixed: bool) -> tuple[float, float, float]:
        """What a step's time is besides its attention, which depends on its shape alone (``t``
        tokens, ``n_seq`` requests, prefill or not): (fixed costs + GEMMs, all-reduces, per
        sequence costs). ``step_time`` adds them as ``head + attention + tail + seq``, in that
        order (float sums depend on it), and keeps them per shape: a run repeats few shapes."""
        extra = self._mixed if mixed else 0.0
        padded: float
        if t <= self._cg_max:
            padded = self._pad[t]
        else:
            padded = t
            extra += self._eager
        comp = padded * self._c_tok + n_seq * self._c_sample
        mem = self._m_weights + t * self._m_act_tok
        if self._moe_layers:
            comp += padded * self._topk * self._c_routed
            frac = 1.0 - self._miss**t
            if frac < self._touch_floor:
                frac = self._touch_floor
            mem += self._experts * frac * self._m_expert
        p = self._p
        gemm: float = (comp**p + mem**p) ** self._inv_p
        tail = (
            padded * self._ar_tok_1 if padded <= self._ar_max_1 else padded * self._ar_tok + self._ar_switch
        )
        return (
            self._fixed + extra + gemm,
            tail,
            n_seq * (self._per_seq + self._gather_sample + self._state_seq),
        )

    def decode_terms(self, num_decodes: int) -> tuple[float, float, float, float]:
        """A decode-only step of ``num_decodes`` requests as (head, per context token, tail, seq):
        its time is ``head + ctx * per_ctx + tail + seq`` for a context sum ``ctx``, exactly
        ``step_time``'s float (``StepTimeModel.decode_terms``: the engine's compiled core then
        times a decode stretch without calling back). The decode attention is
        ``max(ctx * a_cmp, ctx * a_mem)``, which is ``ctx * max(a_cmp, a_mem)`` to the bit
        (rounding is monotonic and ``ctx >= 0``)."""
        head, tail, seq = self._terms_of(num_decodes, num_decodes, False)
        return head, max(self._d_cmp, self._a_mem), tail, seq

    def breakdown(self, batch: BatchComposition) -> dict[str, float]:
        """The step time by component (seconds); the values sum to ``step_time(batch)``."""
        pr = self.profile
        nd = batch.num_decodes
        t = batch.num_tokens
        n_seq = nd + len(batch.prefill_chunks)
        graphs = t <= self._cg_max
        tp_ = self._pad[t] if graphs else t
        comp = tp_ * self._c_tok + n_seq * self._c_sample
        mem = self._m_weights + t * self._m_act_tok
        touched = 0.0
        if self._moe_layers:
            comp += tp_ * self._topk * self._c_routed
            touched = self._experts * max(1.0 - self._miss**t, self._touch_floor)
            mem += touched * self._m_expert
        p = self._p
        prefill_attn = 0.0
        for c, ctx in batch.prefill_chunks:
            ac = c * (ctx + 0.5 * (c + 1)) * self._a_cmp + (ctx * self._a_ctx if self._a_ctx else 0.0)
            prefill_attn += max(ac, (ctx + c) * self._a_mem)
        decode_attn = (
            max(batch.decode_ctx_sum * self._d_cmp, batch.decode_ctx_sum * self._a_mem) if nd else 0.0
        )
        return {
            "gemm": (comp**p + mem**p) ** (1.0 / p),
            "gemm_compute_only": comp,
            "gemm_memory_only": mem,
            "experts_touched": touched,
            "decode_attention": decode_attn,
            "prefill_attention": prefill_attn,
            "allreduce": self._ar_fixed
            + (tp_ * self._ar_tok_1 if tp_ <= self._ar_max_1 else tp_ * self._ar_tok + self._ar_switch)
            + n_seq * self._gather_sample,
            "step_overhead": pr.step_overhead_s,
            "layer_overhead": self.model.num_layers * pr.per_layer_overhead_s,
            "sequence_overhead": n_seq * pr.per_sequence_overhead_s,
            "state_io": n_seq * self._state_seq,
            "mixed_overhead": self._mixed if batch.prefill_chunks else 0.0,
            "eager_overhead": 0.0 if graphs else self._eager,
            "padded_tokens": float(tp_),
        }

    @staticmethod
    def breakdown_total(parts: dict[str, float]) -> float:
        keys = (
            "gemm",
            "decode_attention",
            "prefill_attention",
            "allreduce",
            "step_overhead",
            "layer_overhead",
            "sequence_overhead",
            "state_io",
            "mixed_overhead",
            "eager_overhead",
        )
        return sum(parts[k] for k in keys)

    # ------------------------------------------------------------------ description
    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        """JSON-able description (the engine stores it in its reports)."""
        return {
            "kind": self.kind,
            "model": self.model.name,
            "gpu": self.gpu.name,
            "tp": self.tp,
            "kv_dtype": self.kv_dtype,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "cudagraphs": self.cudagraphs,
            "largest_cudagraph": self._cg_max,
            **({"extra_gemm_params": self.extra_gemm_params} if self.extra_gemm_params else {}),
            **({"lora_slots": self.lora_slots, "lora_rank": self.lora_rank} if self.lora_slots else {}),
            "profile": self.profile.model_dump(mode="json"),
        }

    def adapter_load_times(self) -> AdapterLoadTimes | None:
        """With LoRA, what activating one adapter adds to a step (``perf.lora``); None without."""
        if not self.lora_slots:
            return None
        return adapter_load_times(self.model, self.gpu, self.tp, self.lora_rank)

    def __repr__(self) -> str:
        return (
            f"RooflineStepTime({self.model.name} on {self.tp}x{self.gpu.name}, profile={self.profile.name!r})"
        )

    def options(self) -> dict[str, Any]:
        """The keyword settings this model was built with (``__init__``'s after the profile): what
        a model derived from it (another profile, a pipeline stage, a DP rank) keeps."""
        return {
            "kv_dtype": self.kv_dtype,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "cudagraphs": self.cudagraphs,
            "extra_gemm_params": self.extra_gemm_params,
            "lora_slots": self.lora_slots,
            "lora_rank": self.lora_rank,
        }

    def with_profile(self, profile: HardwareProfile) -> RooflineStepTime:
        return RooflineStepTime(
            self.model,
            self.gpu,
            self.tp,
            profile,
            **self.options(),
        )

    # ------------------------------------------------------------------ speculative decoding
    def drafter(self, spec: SpeculativeConfig) -> DraftTimeModel | None:
        """The drafter of ``spec`` timed on this roofline (``engine.step_time.DraftSource``):
        a draft model of the catalog or an EAGLE / MTP head of this model's shape; None for
        n-gram (a CPU lookup: no GPU time). Kept per drafter (a run asks once)."""
        from servesim.perf.drafter import build_drafter

        key = (spec.method, spec.model, spec.draft_tensor_parallel_size, spec.num_speculative_tokens)
        if key not in self._drafters:
            self._drafters[key] = build_drafter(self, spec)
        return self._drafters[key]


def extrapolation_warnings(
    profile: HardwareProfile,
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int,
    max_num_batched_tokens: int | None = None,
) -> list[str]:
    """Ways in which using ``profile`` for this setup goes far beyond its calibration data."""
    out: list[str] = []
    if profile.gpu is not None and profile.gpu != gpu.name:
        out.append(f"profile {profile.name!r} was calibrated on {profile.gpu}, not {gpu.name}")
    r = profile.fitted_range
    if r is None:
        if profile.gpu is None:
            out.append(
                f"no calibrated profile for {gpu.name}: using generic priors (run `servesim calibrate` "
                "on measurements from this GPU)"
            )
        return out
    if r.tp and not min(r.tp) <= tp <= max(r.tp):
        out.append(f"TP={tp} is outside the calibrated TP degrees {sorted(r.tp)}")
    if r.weight_bytes_per_gpu is not None:
        from servesim.perf.memory import weight_bytes_per_gpu

        w = weight_bytes_per_gpu(model, tp)
        lo, hi = r.weight_bytes_per_gpu
        if w < lo / 2 or w > hi * 2:
            out.append(
                f"{model.name} puts {w / 2**30:.1f} GiB of weights on each GPU, far outside the calibrated "
                f"{lo / 2**30:.1f}-{hi / 2**30:.1f} GiB"
            )
    tps = r.tokens_per_step
    if tps is not None and max_num_batched_tokens is not None and max_num_batched_tokens > 2 * tps[1]:
        out.append(
            f"{BUDGET_NOTE} {max_num_batched_tokens} allows steps far above the "
            f"{tps[1]:.0f} tokens the {r.gpu or 'generic'} profile was calibrated on: large prefill "
            "steps are extrapolated on the roofline (compute-bound, usually well modelled)"
        )
    return out


def build_step_time_model(
    model: str | ModelSpec,
    gpu: str | GPUSpec,
    tp: int = 1,
    profile: str | HardwareProfile | None = None,
    *,
    catalog: Catalog | None = None,
    kv_dtype: str = "auto",
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 2048,
    cudagraphs: bool = True,
    warn: bool = True,
    lora_slots: int = 0,
    lora_rank: int = 16,
) -> RooflineStepTime:
    """The roofline ``StepTimeModel`` for ``model`` on ``tp`` x ``gpu``.

    ``model``/``gpu`` are catalog names (or specs; ``model`` may be a local ``config.json``);
    ``profile`` is a ``HardwareProfile``, a JSON path, a shipped profile name, or None for the
    GPU's shipped profile (generic priors when there is none). With ``warn``, emits an
    ``ExtrapolationWarning`` for each way the setup lies far outside the profile's data.
    """
    cat = catalog or load_catalog()
    m = resolve_model(model, cat)
    g = resolve_gpu(gpu, cat)
    prof = resolve_profile(profile, g.name)
    if warn:
        for msg in extrapolation_warnings(prof, m, g, tp, max_num_batched_tokens):
            warnings.warn(msg, ExtrapolationWarning, stacklevel=2)
    return RooflineStepTime(
        m,
        g,
        tp,
        prof,
        kv_dtype=kv_dtype,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        cudagraphs=cudagraphs,
        lora_slots=lora_slots,
        lora_rank=lora_rank,
    )
