"""Data-parallel attention with expert parallelism (``vllm serve --data-parallel-size D
[--enable-expert-parallel]``): who holds which weights, and what a lockstep step costs.

What vLLM 0.33 does (``vllm/`` paths of its source):

* **Ranks.** Each of the ``D`` DP ranks is its own engine core with its own scheduler and KV
  cache, its attention (and dense MLP, shared experts, embedding, lm_head) split over its own
  ``tp`` GPUs (``v1/engine/core.py``: ``EngineCoreProc`` per rank). ``D x tp`` GPUs in all.
* **Experts.** ``model_executor/layers/fused_moe/config.py`` ``FusedMoEParallelConfig.make``
  flattens the MoE layers' tensor parallelism over every GPU: ``tp_size = D x tp``
  (``flatten_tp_across_dp_and_pcp``). With ``--enable-expert-parallel`` the same group is an EP
  group instead (``ep_size = D x tp``, the experts' ``tp_size = 1``): each GPU holds whole
  experts, ``E // ep_size`` of them, the first ``E % ep_size`` ranks one more
  (``fused_moe/expert_map_manager.py`` ``determine_expert_map``: vLLM does not refuse an
  uneven split). Without EP each GPU holds ``1/(D x tp)`` of every expert. Both put
  ``E / (D x tp)`` experts' bytes per GPU on average; the fullest GPU under EP holds
  ``ceil(E / ep_size)``, which is what ``expert_shards`` sizes memory by (its KV is smallest).
* **Dispatch and combine.** vLLM 0.33's default ``--all2all-backend`` is
  ``allgather_reducescatter`` (``config/parallel.py``): every MoE layer all-gathers the DP
  ranks' hidden states and router logits over the DP group (``AgRsAll2AllManager
  .dispatch_router_logits``, ``all_gatherv`` of each rank's token count) and reduce-scatters
  the experts' output back (``combine``). The runner does this whenever ``dp_size > 1``, with
  or without EP (``fused_moe/runner/moe_runner.py`` ``do_naive_dispatch_combine``). So each
  GPU runs its experts on all ``S = Σ s_r`` tokens of the DP group, not on ``tokens x top-k``
  sent point to point (DeepEP's / pplx's all-to-all: other backends, not modelled).
* **Lockstep.** MoE DP ranks are ``DPEngineCoreProc`` (``v1/engine/core.py``, asserted MoE
  only): while any rank has work every rank steps, an idle one running a dummy batch of one
  decode token (``v1/worker/gpu_worker.py`` ``execute_dummy_batch``); ranks agree every
  ``dp_sync_interval`` (16) steps whether any has unfinished requests
  (``_has_global_unfinished_reqs``), so a wave ends up to 15 dummy steps after the last request.
  Dense models' DP ranks are independent engines (``reconfigure_for_independent_dp_rank``).
* **Padding.** ``v1/worker/gpu_model_runner.py`` ``_determine_batch_execution_and_padding``
  passes each rank's CUDA-graph size to ``v1/worker/dp_utils.py`` ``coordinate_batch_across_dp``:
  ranks all-reduce their token counts and CUDA-graph modes; unless some rank runs without CUDA
  graphs (the synced mode, a minimum, is NONE), every rank is padded to the largest padded count
  (``_post_process_dp_padding``).

The step-time model (``DataParallelStepTime``): per rank ``r`` with its own tokens ``t_r`` and
padded size ``s_r``, the per-rank roofline (``perf.roofline``) with the routed experts' work
taken over the group: ``S x top-k`` expert FLOPs and the experts ``S`` tokens touch, split over
``D x tp`` GPUs; plus per MoE layer the all-gather of ``(S - s_r) x (hidden + experts)``
activations and the reduce-scatter of ``(S - s_r) x hidden`` over the GPU link, with one
latency per peer each. Every layer of a rank has the same shape, so the rank that is slowest in
one layer's collective is the slowest in every one: the step lasts the slowest rank's step.

Not modelled: routing imbalance between EP ranks (routing is taken uniform, as the roofline's
expert touching is), EPLB, DeepEP / pplx / FlashInfer all-to-all kernels and their FP8 dispatch,
dual-batch overlap (``--enable-dbo``), multi-node DP, the coordinator's 100 ms staleness.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.engine.step_plan import roofline_step_time
from servesim.engine.step_time import BatchComposition
from servesim.perf.catalog import ModelSpec
from servesim.perf.errors import PerfError
from servesim.perf.roofline import RooflineStepTime

#: vLLM's ``ParallelConfig.dp_sync_interval`` default: steps between the DP ranks' agreement
#: on whether any has unfinished requests (``DPEngineCoreProc._has_global_unfinished_reqs``).
DP_SYNC_INTERVAL = 16

#: The batch an idle MoE DP rank runs (``execute_dummy_batch``: one uniform-decode token).
DUMMY_BATCH = BatchComposition(1, 1, [])


def check_data_parallel(model: ModelSpec, tp: int, dp: int, enable_expert_parallel: bool) -> None:
    """Refuse what cannot be the asked layout, naming the flag.

    ``--enable-expert-parallel`` on a dense model: vLLM would accept and ignore it (no FusedMoE
    layer reads it), which is never what the user meant, so it is refused here."""
    if dp < 1:
        raise PerfError(f"--data-parallel-size must be >= 1, got {dp}")
    if enable_expert_parallel and not model.is_moe:
        raise PerfError(
            f"--enable-expert-parallel with {model.name}: a dense model has no experts to split "
            "(vLLM would ignore the flag); drop it, or use a MoE model"
        )


def moe_parallel_sizes(tp: int, dp: int, enable_expert_parallel: bool) -> tuple[int, int]:
    """The MoE layers' (tp_size, ep_size) on each GPU: ``FusedMoEParallelConfig.make``'s rule
    (``use_ep = dp x tp > 1 and enable_expert_parallel``; the flattened TP group becomes the EP
    group)."""
    flat = dp * tp
    if flat > 1 and enable_expert_parallel:
        return 1, flat
    return flat, 1


def local_experts(num_experts: int, ep_size: int) -> list[int]:
    """Experts each EP rank holds (``determine_expert_map``, linear placement): ``E // ep`` each,
    the first ``E % ep`` ranks one more."""
    base, rem = divmod(num_experts, ep_size)
    return [base + (1 if r < rem else 0) for r in range(ep_size)]


def expert_shards(model: ModelSpec, tp: int, dp: int, enable_expert_parallel: bool) -> float:
    """What the routed experts' bytes are divided by on the fullest GPU: ``D x tp`` when they
    split evenly (or without EP, where every expert is sliced), else ``E / ceil(E / ep)``
    (a GPU holding one more expert than the average)."""
    moe_tp, ep = moe_parallel_sizes(tp, dp, enable_expert_parallel)
    if ep == 1 or not model.is_moe:
        return float(moe_tp)
    return model.num_experts / max(local_experts(model.num_experts, ep))


def dispatch_combine_bytes(model: ModelSpec, own: int, total: int) -> tuple[float, float]:
    """Bytes one GPU receives per MoE layer: the all-gather of the other ranks' ``total - own``
    tokens' hidden states and router logits (in the activation dtype), and the reduce-scatter
    of the experts' output for them (``hidden`` per token)."""
    ab = model.dtype_bytes
    others = total - own
    return others * (model.hidden_size + model.num_experts) * ab, others * model.hidden_size * ab


def dp_padded_sizes(tokens: Sequence[int], pad: Sequence[int], largest_graph: int) -> list[int]:
    """Tokens each rank runs (``coordinate_batch_across_dp``): its CUDA-graph size, all padded to
    the largest of them, unless some rank runs eager (above the largest graph), then each its own."""
    if any(t > largest_graph for t in tokens):
        return list(tokens)
    top = max(pad[t] for t in tokens)
    return [top] * len(tokens)


class DataParallelStepTime(RooflineStepTime):
    """The per-rank roofline of ``base`` (one DP rank's ``tp`` GPUs) with the MoE layers spread
    over ``dp`` ranks, and ``lockstep``: one step of the whole group.

    ``step_time`` of a single batch stays ``base``'s (what a rank's engine asks while it
    schedules; the lockstep driver replaces the duration with ``lockstep``'s)."""

    kind = "roofline-dp"

    def __init__(self, base: RooflineStepTime, dp: int, enable_expert_parallel: bool) -> None:
        check_data_parallel(base.model, base.tp, dp, enable_expert_parallel)
        self.dp = dp
        self.enable_expert_parallel = enable_expert_parallel
        super().__init__(base.model, base.gpu, base.tp, base.profile, **base.options())
        m, g, pr = self.model, self.gpu, self.profile
        link = g.interconnect_bandwidth * pr.interconnect_efficiency
        if dp > 1 and self._moe_layers:
            ab = m.dtype_bytes
            self._xfer_gather = self._moe_layers * (m.hidden_size + m.num_experts) * ab / link
            self._xfer_scatter = self._moe_layers * m.hidden_size * ab / link
            self._xfer_fixed = self._moe_layers * 2 * pr.allreduce_latency_s * (dp - 1)
        else:
            self._xfer_gather = self._xfer_scatter = self._xfer_fixed = 0.0

    # ------------------------------------------------------------------ one rank in the group
    def dispatch_combine_time(self, own: int, total: int) -> float:
        """Seconds a GPU spends per step in the MoE layers' all-gather and reduce-scatter."""
        if not self._xfer_gather:
            return 0.0
        return self._xfer_fixed + (total - own) * (self._xfer_gather + self._xfer_scatter)

    def _group_terms(
        self, own: int, size: int, total: int, touched_tokens: int, n_seq: int, mixed: bool, eager: bool
    ) -> tuple[float, float, float]:
        """``_shape_terms`` of a rank with ``own`` tokens run as ``size`` (padded) in a group of
        ``total``: its dense GEMMs on its padded tokens (activation traffic on its own, as the
        single-rank roofline counts them), the routed experts on the group's ``total`` x top-k
        over ``dp`` x ``tp`` GPUs (experts touched by the group's real tokens); ``eager``: some
        rank runs without CUDA graphs, so every rank does (the synced mode is a minimum)."""
        extra = self._mixed if mixed else 0.0
        if eager:
            extra += self._eager
        comp = size * self._c_tok + n_seq * self._c_sample
        mem = self._m_weights + own * self._m_act_tok
        if self._moe_layers:
            comp += total * self._topk * self._c_routed / self.dp
            frac = 1.0 - self._miss**touched_tokens
            if frac < self._touch_floor:
                frac = self._touch_floor
            mem += self._experts * frac * self._m_expert / self.dp
        p = self._p
        gemm: float = (comp**p + mem**p) ** self._inv_p
        tail = size * self._ar_tok_1 if size <= self._ar_max_1 else size * self._ar_tok + self._ar_switch
        tail += self.dispatch_combine_time(size, total)
        return self._fixed + extra + gemm, tail, n_seq * (self._per_seq + self._gather_sample)

    def rank_times(self, batches: Sequence[BatchComposition | None]) -> list[float]:
        """Each rank's time for one lockstep step (None: an idle rank, running the dummy batch)."""
        runs = [b if b is not None else DUMMY_BATCH for b in batches]
        tokens = [b.num_tokens for b in runs]
        sizes = dp_padded_sizes(tokens, self._pad, self._cg_max)
        total = sum(sizes)
        real = sum(tokens)  # a dummy batch's token runs through the experts too (random input)
        eager = max(tokens) > self._cg_max
        out = []
        for b, s in zip(runs, sizes, strict=True):

            def terms(t: int, n_seq: int, mixed: bool, s: int = s) -> tuple[float, float, float]:
                return self._group_terms(t, s, total, real, n_seq, mixed, eager)

            out.append(roofline_step_time(b, self._a_cmp, self._a_ctx, self._a_mem, self._d_cmp, terms))
        return out

    def lockstep(self, batches: Sequence[BatchComposition | None]) -> float:
        """One step of the group: as long as its slowest rank's (see the module docstring)."""
        return max(self.rank_times(batches))

    def model_dump(self, mode: str = "python") -> dict[str, object]:
        moe_tp, ep = moe_parallel_sizes(self.tp, self.dp, self.enable_expert_parallel)
        return {
            **super().model_dump(mode),
            "kind": self.kind,
            "data_parallel_size": self.dp,
            "enable_expert_parallel": self.enable_expert_parallel,
            "moe_tp_size": moe_tp,
            "moe_ep_size": ep,
        }

    def __repr__(self) -> str:
        ep = " EP" if self.enable_expert_parallel else ""
        return f"DataParallelStepTime({self.model.name} DP{self.dp}{ep} x TP{self.tp} on {self.gpu.name})"


def describe_layout(model: ModelSpec, tp: int, dp: int, enable_expert_parallel: bool) -> str:
    """``DP 8 x TP 1, experts EP 8 (16 per GPU)``: the layout in one phrase (``timed as``)."""
    if dp == 1 and not enable_expert_parallel:
        return f"TP {tp}"
    moe_tp, ep = moe_parallel_sizes(tp, dp, enable_expert_parallel)
    if not model.is_moe:
        return f"DP {dp} x TP {tp}"
    if ep > 1:
        per = local_experts(model.num_experts, ep)
        held = f"{per[0]}" if min(per) == max(per) else f"{min(per)}-{max(per)}"
        ranks = f"TP {tp}" if dp == 1 else f"DP {dp} x TP {tp}"
        return f"{ranks}, experts EP {ep} ({held} of {model.num_experts} per GPU)"
    return f"DP {dp} x TP {tp}, experts TP {moe_tp} (1/{moe_tp} of each per GPU)"


def gpus_of(tp: int, dp: int) -> int:
    """GPUs a DP deployment takes (``world_size x data_parallel_size``)."""
    return tp * dp


__all__ = [
    "DP_SYNC_INTERVAL",
    "DUMMY_BATCH",
    "DataParallelStepTime",
    "check_data_parallel",
    "describe_layout",
    "dispatch_combine_bytes",
    "dp_padded_sizes",
    "expert_shards",
    "gpus_of",
    "local_experts",
    "moe_parallel_sizes",
]
