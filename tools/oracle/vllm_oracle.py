#!/usr/bin/env python3
"""Drive vLLM's real V1 scheduler (and its KV cache manager) from a request
trace, on a CPU-only machine with no model, and record every scheduling step.

The output is meant as an oracle for a separate scheduler simulator: same
trace + same config in, per-step decisions out.

What is real and what is faked
------------------------------
* Real: ``vllm.v1.core.sched.scheduler.Scheduler`` (queues, token budget,
  chunked prefill, preemption, priority policy) and the KV cache manager /
  block pool / prefix cache it builds from a ``KVCacheConfig``.
* Faked: the model. After each ``schedule()`` we build a ``ModelRunnerOutput``
  the way the GPU model runner would: a request gets exactly one sampled token
  when the step finishes all of its known tokens (end of prefill, or a decode
  step), and no token while a prefill chunk is still partial. The request then
  finishes through vLLM's own stop check: ``max_tokens=output_len`` with
  ``ignore_eos`` (default), or the fake model emits EOS as its
  ``output_len``-th token (``finish_mode: "eos"``).
* The model itself is only a local ``config.json`` (Llama-like, tiny) written
  into a temp dir, so ``ModelConfig`` can be built without any download.
  The KV layout is one full-attention group with ``num_gpu_blocks`` blocks of
  ``block_size`` tokens; byte sizes are irrelevant to the scheduler.

Clock
-----
The clock is the scheduler step. At step ``k`` the harness first adds every
trace request with ``arrival_step <= k`` (trace order breaks ties; with
``async_scheduling`` and a step in flight, ``<= k - 1``: vLLM schedules step k
while step k-1 runs, right after launching it), then calls
``schedule()``, feeds the fake output to ``update_from_output()``, and writes
one JSONL line. ``arrival_time_s`` is mapped to steps with a fixed
``step_time_s`` (config, default 0.01 s): a request arriving at ``t`` is added
at step ``ceil(t / step_time_s)`` (the first step starting at or after ``t``).
When no request is in the system the clock jumps to the next arrival; such
idle steps are not written (their indices are simply skipped).

Usage
-----
    python vllm_oracle.py --trace trace.jsonl --config cfg.json \
        --out steps.jsonl --summary summary.json [--set key=value ...]

See README.md next to this file for the trace/config/output formats.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

# Never touch the network: any model config is written locally.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

DEFAULT_CONFIG: dict[str, Any] = {
    "block_size": 16,
    "num_gpu_blocks": 10000,
    "max_num_seqs": 128,
    "max_num_batched_tokens": 2048,
    "enable_chunked_prefill": True,
    "enable_prefix_caching": False,
    "long_prefill_token_threshold": 0,
    "policy": "fcfs",  # or "priority" (trace field "priority", lower first)
    # --- less common knobs (vLLM defaults unless noted) ---
    "max_model_len": None,  # None: max(prompt_len + output_len) + 1 over trace
    "scheduler_reserve_full_isl": None,  # None: keep vLLM's default
    "watermark": None,  # None: keep vLLM's default (0.0)
    "max_num_partial_prefills": None,  # only passed if this vLLM knows it
    "max_num_scheduled_tokens": None,  # None: keep vLLM's default (= max_num_batched_tokens)
    "max_num_active_seqs": None,  # None: keep vLLM's default (= max_num_seqs)
    "long_prefill_token_threshold_adaptive": None,  # None: keep vLLM's default (False)
    "prefill_schedule_interval": None,  # None: keep vLLM's default (1)
    "step_time_s": 0.01,  # maps arrival_time_s to steps
    "finish_mode": "max_tokens",  # or "eos"
    "sampled_token_id": 100,  # what the fake model "samples"
    "eos_token_id": 2,
    "vocab_size": 32000,
    "max_steps": 10_000_000,
    "stall_steps": 1000,  # abort after this many empty steps in a row
    # --- CPU KV offload (vLLM's OffloadingConnector, scheduler side; servesim addition) ---
    "kv_offload_chunks": None,  # None: no connector; else CPU tier size in offload chunks
    "kv_offload_blocks_per_chunk": 1,  # GPU blocks per offload chunk (vLLM's default 1)
    "load_delay_steps": 1,  # a load issued in step k is reported finished in step k + this
    "store_delay_steps": 1,  # a store issued in step k is reported finished in step k + this
    # --- P/D disaggregation (vLLM's NixlConnector, scheduler side; servesim addition) ---
    # True: the NixlConnector (kv_both); trace rows with "pd": "decode" arrive with their prompt
    # KV remote (do_remote_prefill), rows with "pd": "prefill" are prefill legs (max_tokens 1,
    # do_remote_decode). A receive issued in step k ends in step k + load_delay_steps; a send
    # handed to the worker in step k ends in step k + store_delay_steps.
    "pd_connector": None,
    # --- speculative decoding (servesim addition) ---
    "spec_method": None,  # None: off; "ngram" (vLLM's real SpeculativeConfig, no model needed)
    "num_speculative_tokens": 0,
    # The fake drafter proposes k drafts after every step that samples; the fake target accepts
    # the i-th with probability spec_accept_rates[i] (given the ones before it), seeded per
    # (spec_accept_seed, request, verification): the accepted counts are written per step.
    "spec_accept_rates": [0.7],
    "spec_accept_seed": 0,
    # Emulate a drafter with its own KV cache (EAGLE/MTP/draft model: vLLM's num_lookahead_tokens
    # = k) on the ngram config, whose proposer needs no weights: the scheduler's lookahead slots
    # are set to this (only meaningful without prefix caching: EAGLE's hash lookahead is not).
    "spec_lookahead_tokens": None,
    # Drafts shorter than k: the fake drafter proposes a seeded length in [spec_draft_min, k] per
    # (spec_accept_seed, request, proposal) (vLLM's scheduler takes any list up to k); None: k.
    "spec_draft_min": None,
    # --- async scheduling (servesim addition) ---
    # True: vLLM's AsyncScheduler driven as EngineCore.step_with_batch_queue drives it (a queue of
    # two): step k is scheduled before step k-1's output is applied. Plain cases, and speculation
    # with eagle/eagle3/mtp (the drafts then live on the worker: the scheduler schedules its k
    # placeholders and is never given the drafts, as EngineCore skips update_draft_token_ids).
    "async_scheduling": False,
    # --- LoRA (servesim addition) ---
    # True: vLLM's real LoRAConfig(max_loras, max_lora_rank) on the VllmConfig; a trace row's
    # "lora" (an adapter name) becomes a LoRARequest (ids 1, 2, ... in trace order of first use,
    # a made-up path: nothing is loaded, the scheduler only counts adapters and hashes their name).
    "enable_lora": False,
    "max_loras": 1,
    "max_lora_rank": 16,
    # --- hybrid KV cache groups (servesim addition) ---
    # One spec per decoder layer, {"kind": "full" | "sliding_window" | "chunked_local" | "mamba",
    # "window": tokens} ("mamba": a MambaSpec state layer, mamba_cache_mode "none", so prefix
    # caching off): the KV cache config is then planned by vLLM's own get_kv_cache_groups /
    # get_kv_cache_config_from_groups (equal page sizes, num_gpu_blocks blocks' worth of memory),
    # and the scheduler runs the HybridKVCacheCoordinator over the groups it made. None: one
    # full-attention group, as before.
    "kv_layers": None,
    # With mamba layers and prefix caching (mamba_cache_mode "align"): MambaSpec's
    # num_prefill_checkpoint_blocks (1: the backend exports the prompt's last block-boundary state
    # inside a chunk, as Qwen3-Next's GatedDeltaNet on FlashInfer does; prefill_checkpoint_alignment
    # then the mamba block size, get_mamba_prefill_checkpoint_grid's default).
    "mamba_prefill_checkpoint_blocks": 0,
    # --- pipeline parallelism (servesim addition) ---
    # P > 1: vLLM's real ParallelConfig(pipeline_parallel_size=P) on the VllmConfig, the
    # AsyncScheduler it runs with (async_scheduling must be true: vLLM 0.33's default with PP), and
    # EngineCore.step_with_batch_queue's queue of max_concurrent_batches steps (P + 1 under the V2
    # model runner): steps are scheduled while the queue has room and requests remain, and the
    # oldest step's output is applied when it is full or nothing is left to schedule.
    "pipeline_parallel_size": 1,
}

_BOOL_KEYS = {
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "scheduler_reserve_full_isl",
    "long_prefill_token_threshold_adaptive",
    "async_scheduling",
    "enable_lora",
}


# ----------------------------------------------------------------------------
# config / trace
# ----------------------------------------------------------------------------
def _parse_value(key: str, raw: str) -> Any:
    if key in _BOOL_KEYS:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        if raw.lower() in ("none", "null"):
            return None
        raise ValueError(f"{key}: not a boolean: {raw!r}")
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def load_config(path: str | None, overrides: list[str]) -> dict[str, Any]:
    cfg = dict(DEFAULT_CONFIG)
    if path:
        with open(path) as f:
            user = json.load(f)
        unknown = set(user) - set(cfg)
        if unknown:
            raise SystemExit(f"unknown config keys: {sorted(unknown)}")
        cfg.update(user)
    for item in overrides:
        key, _, raw = item.partition("=")
        if key not in cfg:
            raise SystemExit(f"unknown config key in --set: {key}")
        cfg[key] = _parse_value(key, raw)
    if cfg["policy"] not in ("fcfs", "priority"):
        raise SystemExit("policy must be 'fcfs' or 'priority'")
    if cfg["finish_mode"] not in ("max_tokens", "eos"):
        raise SystemExit("finish_mode must be 'max_tokens' or 'eos'")
    if cfg["async_scheduling"] and (
        cfg["kv_offload_chunks"] is not None
        or cfg["pd_connector"]
        or cfg["spec_method"] not in (None, "eagle", "eagle3", "mtp")
        or cfg["spec_lookahead_tokens"] is not None
        or cfg["spec_draft_min"] is not None
    ):
        raise SystemExit(
            "async_scheduling: only plain cases and eagle/eagle3/mtp speculation with k drafts "
            "(no KV connector, no emulated lookahead, no short drafts: the scheduler never sees them)"
        )
    if int(cfg["pipeline_parallel_size"]) > 1 and (
        not cfg["async_scheduling"]
        or cfg["kv_offload_chunks"] is not None
        or cfg["pd_connector"]
        or cfg["spec_method"] is not None
        or cfg["kv_layers"] is not None
    ):
        raise SystemExit(
            "pipeline_parallel_size > 1: plain cases with async_scheduling only (vLLM's default with PP)"
        )
    return cfg


def _rng_tokens(seed: str, n: int, vocab: int, avoid: set[int]) -> list[int]:
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < n:
        t = rng.randrange(10, vocab)
        if t not in avoid:
            out.append(t)
    return out


def load_trace(path: str, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Read the JSONL trace and normalise every request.

    Prompt tokens: ``prompt_token_ids`` if given; else, with ``prefix_group``,
    the first ``prefix_len`` tokens (default: the whole prompt) come from a
    deterministic per-group stream and the rest are unique to the request;
    else all tokens are unique to the request (no accidental cache hits).
    """
    dt = float(cfg["step_time_s"])
    avoid = {int(cfg["eos_token_id"]), int(cfg["sampled_token_id"])}
    vocab = int(cfg["vocab_size"])
    reqs: list[dict[str, Any]] = []
    seen: set[str] = set()
    lora_ids: dict[str, int] = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            r = json.loads(line)
            rid = str(r["req_id"])
            if rid in seen:
                raise SystemExit(f"trace line {lineno}: duplicate req_id {rid}")
            seen.add(rid)
            output_len = int(r["output_len"])
            if output_len < 1:
                raise SystemExit(f"trace line {lineno}: output_len must be >= 1")
            if "prompt_token_ids" in r:
                toks = [int(t) for t in r["prompt_token_ids"]]
                prompt_len = int(r.get("prompt_len", len(toks)))
                if prompt_len != len(toks):
                    raise SystemExit(f"trace line {lineno}: prompt_len != len(prompt_token_ids)")
            else:
                prompt_len = int(r["prompt_len"])
                if r.get("prefix_group") is not None:
                    plen = min(int(r.get("prefix_len", prompt_len)), prompt_len)
                    toks = _rng_tokens(f"group:{r['prefix_group']}", plen, vocab, avoid)
                    toks += _rng_tokens(f"req:{rid}", prompt_len - plen, vocab, avoid)
                else:
                    toks = _rng_tokens(f"req:{rid}", prompt_len, vocab, avoid)
            if prompt_len < 1:
                raise SystemExit(f"trace line {lineno}: prompt_len must be >= 1")
            if "arrival_step" in r:
                astep = int(r["arrival_step"])
                atime = astep * dt
            elif "arrival_time_s" in r:
                atime = float(r["arrival_time_s"])
                astep = max(0, math.ceil(atime / dt - 1e-9))
            else:
                astep, atime = 0, 0.0
            reqs.append(
                {
                    "req_id": rid,
                    "arrival_step": astep,
                    "arrival_time": atime,
                    "prompt_len": prompt_len,
                    "output_len": output_len,
                    "prompt_token_ids": toks,
                    "priority": int(r.get("priority", 0)),
                    "pd": r.get("pd"),
                    "lora": r.get("lora"),
                    "lora_int_id": lora_ids.setdefault(r["lora"], len(lora_ids) + 1) if r.get("lora") else 0,
                    "order": len(reqs),
                }
            )
    # stable: same arrival step keeps trace order
    reqs.sort(key=lambda x: (x["arrival_step"], x["order"]))
    return reqs


# ----------------------------------------------------------------------------
# building the real scheduler
# ----------------------------------------------------------------------------
def _write_model_dir(max_model_len: int, cfg: dict[str, Any]) -> str:
    d = tempfile.mkdtemp(prefix="vllm-oracle-model-")
    model_cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": int(cfg["vocab_size"]),
        "max_position_embeddings": max_model_len,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float16",
        "bos_token_id": 1,
        "eos_token_id": int(cfg["eos_token_id"]),
        "tie_word_embeddings": False,
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(model_cfg, f)
    return d


def _accepted_fields(cls) -> set[str]:
    import dataclasses

    try:
        return {f.name for f in dataclasses.fields(cls)} | set(
            getattr(cls, "__dataclass_fields__", {}).keys()
        )
    except TypeError:
        return set()


def layer_spec(
    layer: dict[str, Any],
    block_size: int,
    max_model_len: int,
    mamba_align: bool = False,
    checkpoints: int = 0,
):
    """vLLM's KV cache spec of one layer of a kind (the page size is the same for every kind:
    one KV head of size 1 in float16, as the full-attention cases use). A mamba layer is what
    ``MambaBase.get_kv_cache_spec`` makes: without prefix caching ``mamba_cache_mode`` "none",
    block size ``max_model_len``; with it (``mamba_align``) "align", block size the attention
    block size (``MambaModelConfig``, ``Platform._align_hybrid_block_size``); its state (one
    float16 element) padded to the attention page (``mamba_page_size_padded``)."""
    import torch
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        SlidingWindowSpec,
    )

    common = dict(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float16)
    if layer["kind"] == "mamba":
        page = FullAttentionSpec(**common).page_size_bytes
        return MambaSpec(
            shapes=((1,),),
            dtypes=(torch.float16,),
            block_size=block_size if mamba_align else max_model_len,
            page_size_padded=page,
            mamba_cache_mode="align" if mamba_align else "none",
            num_prefill_checkpoint_blocks=checkpoints if mamba_align else 0,
            prefill_checkpoint_alignment=block_size if mamba_align and checkpoints else None,
        )
    if layer["kind"] == "full":
        return FullAttentionSpec(**common)
    if layer["kind"] == "sliding_window":
        return SlidingWindowSpec(**common, sliding_window=int(layer["window"]))
    if layer["kind"] == "chunked_local":
        return ChunkedLocalAttentionSpec(**common, attention_chunk_size=int(layer["window"]))
    raise SystemExit(f"kv_layers: unknown kind {layer['kind']!r}")


def hybrid_kv_cache_config(
    vllm_config,
    layers: list[dict[str, Any]],
    block_size: int,
    num_blocks: int,
    max_model_len: int,
    checkpoints: int = 0,
):
    """The KV cache config vLLM plans for these layers (``get_kv_cache_groups`` then
    ``get_kv_cache_config_from_groups``) given the memory of ``num_blocks`` blocks; exits when
    vLLM's planning gives another number of blocks. The groups it made are what the case stores."""
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups, get_kv_cache_groups

    # The CPU platform of this harness supports the hybrid manager as a GPU's does; vLLM's own
    # post-init may have turned it off for a platform it could not detect: the GPU default is on.
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = False
    specs = {
        f"model.layers.{i}.self_attn.attn": layer_spec(
            x, block_size, max_model_len, vllm_config.cache_config.mamba_cache_mode == "align", checkpoints
        )
        for i, x in enumerate(layers)
    }
    # The engine core resolves the layout before planning (Triton attention runs sliding-window
    # and chunked-local layers on every platform); equal page sizes plan alike in any layout.
    layouts = [layout.name for layout in get_supported_kv_cache_layouts([TritonAttentionBackend])]
    resolve_kv_cache_layout(vllm_config, [layouts], list(specs.values()))
    groups = get_kv_cache_groups(vllm_config, specs)
    per_block = max(sum(specs[n].page_size_bytes for n in g.layer_names) for g in groups)
    config = get_kv_cache_config_from_groups(vllm_config, groups, per_block * num_blocks)
    if config.num_blocks != num_blocks:
        raise SystemExit(f"vLLM planned {config.num_blocks} blocks, not {num_blocks}")
    return config


def group_layout(kv_cache_config) -> list[dict[str, Any]]:
    """The groups of a planned config, in vLLM's order, as servesim's ``kv_cache_groups``."""
    from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec, MambaSpec, SlidingWindowSpec

    out: list[dict[str, Any]] = []
    for g in kv_cache_config.kv_cache_groups:
        spec = g.kv_cache_spec
        if isinstance(spec, MambaSpec):
            out.append({"kind": "mamba"})
        elif isinstance(spec, SlidingWindowSpec):
            out.append({"kind": "sliding_window", "window": spec.sliding_window})
        elif isinstance(spec, ChunkedLocalAttentionSpec):
            out.append({"kind": "chunked_local", "window": spec.attention_chunk_size})
        else:
            out.append({"kind": "full"})
    return out


def build_scheduler(cfg: dict[str, Any], max_model_len: int):
    import torch
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.structured_output import StructuredOutputManager

    model_dir = _write_model_dir(max_model_len, cfg)
    model_config = ModelConfig(
        model=model_dir,
        tokenizer=model_dir,
        skip_tokenizer_init=True,
        dtype="float16",
        seed=0,
        max_model_len=max_model_len,
    )

    sched_fields = _accepted_fields(SchedulerConfig)
    skw: dict[str, Any] = dict(
        max_num_seqs=int(cfg["max_num_seqs"]),
        max_num_batched_tokens=int(cfg["max_num_batched_tokens"]),
        max_model_len=max_model_len,
        enable_chunked_prefill=bool(cfg["enable_chunked_prefill"]),
        long_prefill_token_threshold=int(cfg["long_prefill_token_threshold"]),
        policy=cfg["policy"],
    )
    # InitVar in newer vLLM; plain field (or absent) in older ones.
    skw["is_encoder_decoder"] = False
    if "async_scheduling" in sched_fields:
        skw["async_scheduling"] = bool(cfg["async_scheduling"])  # AsyncScheduler or the synchronous one
    for key in (
        "scheduler_reserve_full_isl",
        "watermark",
        "max_num_partial_prefills",
        "max_num_scheduled_tokens",
        "max_num_active_seqs",
        "long_prefill_token_threshold_adaptive",
        "prefill_schedule_interval",
    ):
        if cfg.get(key) is not None:
            if key not in sched_fields:
                raise SystemExit(f"this vLLM's SchedulerConfig has no '{key}'")
            skw[key] = cfg[key]
    try:
        scheduler_config = SchedulerConfig(**skw)
    except TypeError:
        skw.pop("is_encoder_decoder", None)
        scheduler_config = SchedulerConfig(**skw)

    cache_config = CacheConfig(
        block_size=int(cfg["block_size"]),
        enable_prefix_caching=bool(cfg["enable_prefix_caching"]),
    )
    kv_transfer_config = None
    if cfg.get("kv_offload_chunks") is not None:
        from vllm.config import KVTransferConfig

        bpc = int(cfg["kv_offload_blocks_per_chunk"])
        kv_transfer_config = KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={
                # one page (4096 B) per chunk: the fake KV spec's chunks are far smaller
                "cpu_bytes_to_use": int(cfg["kv_offload_chunks"]) * 4096,
                **({"blocks_per_chunk": bpc} if bpc != 1 else {}),
            },
        )
    if cfg.get("pd_connector"):
        from vllm.config import KVTransferConfig

        kv_transfer_config = KVTransferConfig(
            kv_connector="NixlConnector", kv_role="kv_both", engine_id="servesim-oracle"
        )
    speculative_config = None
    if cfg.get("spec_method"):
        from vllm.config import SpeculativeConfig

        if cfg["spec_method"] == "ngram":
            speculative_config = SpeculativeConfig(
                method="ngram",
                num_speculative_tokens=int(cfg["num_speculative_tokens"]),
                prompt_lookup_max=3,
                prompt_lookup_min=1,
            )
        elif cfg["spec_method"] in ("eagle", "eagle3", "mtp"):
            # A real SpeculativeConfig without a draft model: its __post_init__ for eagle/mtp loads
            # the draft's HF config (weights, network), so it is validated as an n-gram config
            # (every field at vLLM's default) and its method then set, with no draft model. What
            # vLLM reads from it for the scheduler: num_speculative_tokens (k), the method through
            # use_eagle() (VllmConfig.num_lookahead_tokens = k; num_prefill_lookahead_tokens = 1,
            # as draft_model_config None makes use_multi_module_mtp() False: a one-module MTP),
            # use_eagle_block_drop()/disable_eagle_block_drop/disable_lookahead_block_hashes
            # (num_hash_lookahead_tokens: 1 with prefix caching) and
            # num_speculative_tokens_per_batch_size (None: no dynamic k).
            speculative_config = SpeculativeConfig(
                method="ngram",
                num_speculative_tokens=int(cfg["num_speculative_tokens"]),
                prompt_lookup_max=3,
                prompt_lookup_min=1,
            )
            object.__setattr__(speculative_config, "method", cfg["spec_method"])
            object.__setattr__(speculative_config, "model", None)
            object.__setattr__(speculative_config, "draft_model_config", None)
        else:
            raise SystemExit(f"spec_method: {cfg['spec_method']!r} needs draft weights")
    lora_config = None
    if cfg.get("enable_lora"):
        from vllm.config import LoRAConfig

        lora_config = LoRAConfig(max_loras=int(cfg["max_loras"]), max_lora_rank=int(cfg["max_lora_rank"]))
    from vllm.config import ParallelConfig

    pp_size = int(cfg.get("pipeline_parallel_size", 1))
    vllm_config = VllmConfig(
        parallel_config=ParallelConfig(pipeline_parallel_size=pp_size),
        lora_config=lora_config,
        model_config=model_config,
        scheduler_config=scheduler_config,
        cache_config=cache_config,
        speculative_config=speculative_config,
        kv_transfer_config=kv_transfer_config,
        # No accelerator here: say "cpu" explicitly instead of letting vLLM
        # probe a platform (the CPU platform would rewrite block_size etc.).
        device_config=DeviceConfig(device="cpu"),
    )
    # VllmConfig.__post_init__ may adjust things; put the requested values back
    # and fail loudly if something we cannot override has moved.
    sc, cc = vllm_config.scheduler_config, vllm_config.cache_config
    for key, want in (
        ("max_num_seqs", int(cfg["max_num_seqs"])),
        ("max_num_batched_tokens", int(cfg["max_num_batched_tokens"])),
        ("enable_chunked_prefill", bool(cfg["enable_chunked_prefill"])),
        ("long_prefill_token_threshold", int(cfg["long_prefill_token_threshold"])),
        ("policy", cfg["policy"]),
    ):
        if getattr(sc, key) != want:
            raise SystemExit(f"vLLM changed scheduler_config.{key}: {getattr(sc, key)!r} != {want!r}")
    if cfg.get("enable_lora") and vllm_config.lora_config.max_loras != int(cfg["max_loras"]):
        raise SystemExit(f"vLLM changed lora_config.max_loras to {vllm_config.lora_config.max_loras}")
    if cc.block_size != int(cfg["block_size"]):
        raise SystemExit(f"vLLM changed block_size to {cc.block_size}")
    if bool(cc.enable_prefix_caching) != bool(cfg["enable_prefix_caching"]):
        raise SystemExit(f"vLLM changed enable_prefix_caching to {cc.enable_prefix_caching}")
    if bool(getattr(sc, "async_scheduling", False)) != bool(cfg["async_scheduling"]):
        raise SystemExit(f"vLLM set async_scheduling to {sc.async_scheduling}, not {cfg['async_scheduling']}")

    block_size = int(cfg["block_size"])
    num_blocks = int(cfg["num_gpu_blocks"])
    if cc.enable_prefix_caching and any(x["kind"] == "mamba" for x in cfg.get("kv_layers") or ()):
        # What MambaModelConfig.verify_and_update_config does for a hybrid Mamba model with
        # prefix caching (this harness's stand-in model is not one): mamba_cache_mode "align",
        # the mamba block size the attention block size; chunked prefill is required.
        if not sc.enable_chunked_prefill:
            raise SystemExit("mamba layers with prefix caching need enable_chunked_prefill")
        cc.mamba_cache_mode = "align"
        cc.mamba_block_size = block_size
    if cfg.get("kv_layers"):
        kv_cache_config = hybrid_kv_cache_config(
            vllm_config,
            cfg["kv_layers"],
            block_size,
            num_blocks,
            max_model_len,
            int(cfg.get("mamba_prefill_checkpoint_blocks") or 0),
        )
    else:
        spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float16)
        kv_cache_config = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
        )
    cc.num_gpu_blocks = num_blocks

    # Mirror what EngineCore does before it builds the scheduler.
    hash_block_size = block_size
    try:
        from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

        block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    except ImportError:
        pass
    if hasattr(kv_cache_config, "hash_block_size"):
        kv_cache_config.hash_block_size = hash_block_size
    try:
        from vllm.v1.core.kv_cache_utils import resolve_cache_hit_alignment_tokens

        if hasattr(kv_cache_config, "cache_hit_alignment_tokens"):
            kv_cache_config.cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
                kv_cache_config, vllm_config, block_size, hash_block_size
            )
    except ImportError:
        pass

    import inspect

    sched_params = inspect.signature(Scheduler.__init__).parameters
    kwargs: dict[str, Any] = dict(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        log_stats=True,  # needed for prefix-cache hit stats
    )
    if "block_size" in sched_params:
        kwargs["block_size"] = block_size
    if "hash_block_size" in sched_params:
        kwargs["hash_block_size"] = hash_block_size
    if cfg["async_scheduling"]:
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler

        scheduler = AsyncScheduler(**kwargs)
    else:
        scheduler = Scheduler(**kwargs)
    if cfg.get("spec_method") in ("eagle", "eagle3", "mtp"):  # what the real config gave vLLM
        k = int(cfg["num_speculative_tokens"])
        got = (scheduler.use_eagle, scheduler.num_spec_tokens, scheduler.num_lookahead_tokens)
        if got != (True, k, k) or scheduler.num_prefill_lookahead != 1:
            raise SystemExit(f"{cfg['spec_method']}: vLLM's scheduler read {got}, not (True, {k}, {k})")
    if cfg.get("spec_lookahead_tokens") is not None:
        if cc.enable_prefix_caching:
            raise SystemExit("spec_lookahead_tokens: only without prefix caching")
        scheduler.num_lookahead_tokens = int(cfg["spec_lookahead_tokens"])
    if cfg.get("kv_offload_chunks") is not None:
        n = scheduler.connector.connector_scheduler.manager._num_chunks
        if n != int(cfg["kv_offload_chunks"]):
            raise SystemExit(f"vLLM sized the CPU tier at {n} chunks, not {cfg['kv_offload_chunks']}")

    block_hasher = None
    if cc.enable_prefix_caching:
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        try:
            from vllm.utils.hashing import get_hash_fn_by_name
        except ImportError:  # older layout
            from vllm.utils import get_hash_fn_by_name  # type: ignore
        hash_fn = get_hash_fn_by_name(cc.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        lookahead = getattr(vllm_config, "num_hash_lookahead_tokens", 0) or 0
        try:
            block_hasher = get_request_block_hasher(hash_block_size, hash_fn, lookahead)
        except TypeError:
            block_hasher = get_request_block_hasher(hash_block_size, hash_fn)
    return scheduler, block_hasher, vllm_config


def make_request(r: dict[str, Any], cfg: dict[str, Any], block_hasher):
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    if cfg["finish_mode"] == "eos":
        sp = SamplingParams(max_tokens=r["output_len"] + 1, ignore_eos=False)
        sp.update_from_generation_config({}, int(cfg["eos_token_id"]))
    else:
        sp = SamplingParams(max_tokens=r["output_len"], ignore_eos=True)
    if r.get("pd") == "decode":  # the prompt's KV waits on a prefill instance
        sp.extra_args = {
            "kv_transfer_params": {
                "do_remote_prefill": True,
                "do_remote_decode": False,
                "remote_block_ids": [[1]],
                "remote_engine_id": "prefill-0",
                "remote_request_id": r["req_id"],
                "remote_host": "localhost",
                "remote_port": 5600,
                "tp_size": 1,
            }
        }
    elif r.get("pd") == "prefill":  # the prefill leg: one token, KV kept for the decode side
        if r["output_len"] != 1:
            raise SystemExit(f"request {r['req_id']}: a prefill leg has output_len 1")
        sp.extra_args = {"kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}}
    kwargs: dict[str, Any] = dict(
        request_id=r["req_id"],
        prompt_token_ids=list(r["prompt_token_ids"]),
        sampling_params=sp,
        pooling_params=None,
        # tiny per-order offset keeps trace order as the tie-break (priority policy)
        arrival_time=r["arrival_time"] + 1e-9 * r["order"],
        priority=r["priority"],
        block_hasher=block_hasher,
    )
    if r.get("lora"):
        if not cfg.get("enable_lora"):
            raise SystemExit(f"request {r['req_id']}: lora {r['lora']!r} without enable_lora")
        from vllm.lora.request import LoRARequest

        kwargs["lora_request"] = LoRARequest(
            lora_name=r["lora"], lora_int_id=r["lora_int_id"], lora_path=f"/servesim-oracle/{r['lora']}"
        )
    try:
        return Request(**kwargs)
    except TypeError:  # older signatures want eos_token_id on the Request
        kwargs["eos_token_id"] = int(cfg["eos_token_id"]) if cfg["finish_mode"] == "eos" else None
        return Request(**kwargs)


def _accept(cfg: dict[str, Any], rid: str, nth: int, n: int) -> int:
    """Accepted drafts of the nth verification of ``rid``: a seeded chain of per-position draws."""
    rates = [float(x) for x in cfg["spec_accept_rates"]]
    rng = random.Random(f"{cfg['spec_accept_seed']}:{rid}:{nth}")
    a = 0
    while a < n and rng.random() < rates[min(a, len(rates) - 1)]:
        a += 1
    return a


def _draft_len(cfg: dict[str, Any], rid: str, nth: int) -> int:
    """Drafts of the nth applied proposal for ``rid``: seeded, uniform in [spec_draft_min, k]."""
    k = int(cfg["num_speculative_tokens"])
    rng = random.Random(f"{cfg['spec_accept_seed']}:{rid}:{nth}:draft")
    return rng.randint(min(int(cfg["spec_draft_min"]), k), k)


# ----------------------------------------------------------------------------
# the step loop
# ----------------------------------------------------------------------------
def _event_line(rec: dict[str, Any]) -> str:
    """One compact human-readable line for a step where something changed."""
    parts = [f"step {rec['step']:>6}"]
    sched = rec["num_scheduled_tokens"]
    prefill = {k: v for k, v in sched.items() if v > 1}
    parts.append(
        f"tokens={rec['total_scheduled_tokens']} (decode x{len(sched) - len(prefill)}"
        + (f", chunks {prefill}" if prefill else "")
        + ")"
    )
    for key in ("arrived", "new_reqs", "resumed_reqs", "preempted"):
        if rec[key]:
            parts.append(f"{key}={rec[key]}")
    if rec["finished"]:
        parts.append(f"finished={sorted(rec['finished'])}")
    if rec["prefix_hit_tokens"]:
        parts.append(f"prefix_hits={rec['prefix_hit_tokens']}")
    parts.append(
        f"run={rec['num_running']} wait={rec['num_waiting']} "
        f"kv_used={rec['kv_blocks_used']}/{rec['kv_blocks_total']}"
    )
    return " ".join(parts)


def run(
    cfg: dict[str, Any],
    trace: list[dict[str, Any]],
    out_path: str,
    summary_path: str | None,
    quiet: bool = False,
    events=None,
) -> dict[str, Any]:
    t_setup = time.perf_counter()
    import torch
    import vllm
    from vllm.v1.outputs import ModelRunnerOutput

    max_model_len = cfg["max_model_len"] or (
        max(r["prompt_len"] + r["output_len"] for r in trace) + 1 if trace else 2048
    )
    max_model_len = int(max_model_len)
    for r in trace:
        need = r["prompt_len"] + r["output_len"] + (1 if cfg["finish_mode"] == "eos" else 0)
        if need > max_model_len:
            raise SystemExit(f"request {r['req_id']} needs {need} tokens > max_model_len {max_model_len}")

    scheduler, block_hasher, vllm_config = build_scheduler(cfg, max_model_len)
    kvm = scheduler.kv_cache_manager
    pool = kvm.block_pool
    usable_blocks = pool.num_gpu_blocks - 1  # block 0 is vLLM's reserved null block
    setup_s = time.perf_counter() - t_setup

    prefix_caching = bool(vllm_config.cache_config.enable_prefix_caching)
    sampled_tok = int(cfg["sampled_token_id"])
    eos_tok = int(cfg["eos_token_id"])
    eos_mode = cfg["finish_mode"] == "eos"
    by_id = {r["req_id"]: r for r in trace}
    per_req: dict[str, dict[str, Any]] = {
        r["req_id"]: {
            "arrival_step": r["arrival_step"],
            "prompt_len": r["prompt_len"],
            "output_len": r["output_len"],
            "added_step": None,
            "first_scheduled_step": None,
            "first_token_step": None,
            "finish_step": None,
            "finish_reason": None,
            "num_preemptions": 0,
            "prefix_hit_tokens_first": None,
            "output_tokens": 0,
        }
        for r in trace
    }

    spec_on = bool(cfg.get("spec_method"))
    spec_count: dict[str, int] = {}
    draft_count: dict[str, int] = {}
    pending = list(trace)
    nxt = 0
    step = 0
    steps_written = 0
    total_preemptions = 0
    empty_streak = 0
    step_times: list[float] = []
    pc_tot = {"queries": 0, "hits": 0, "preempted_queries": 0, "preempted_hits": 0}
    xfer_jobs: dict[int, tuple[int, str, bool]] = {}  # job id -> (due step, request, is load)
    pd_jobs: dict[tuple[str, str], int] = {}  # (recv | send, request) -> due step
    load_delay = int(cfg["load_delay_steps"])
    store_delay = int(cfg["store_delay_steps"])
    offload_totals = {"loads": 0, "stores": 0, "blocks_loaded": 0, "blocks_stored": 0}
    async_mode = bool(cfg["async_scheduling"])
    # Async: the step scheduled but not yet applied (EngineCore's batch queue holds two steps:
    # step k is scheduled, then step k-1's output is applied).
    # PP: EngineCore's batch queue holds vllm_config.max_concurrent_batches steps (P + 1).
    from collections import deque

    inflight: deque[tuple] = deque()
    queue_size = int(vllm_config.max_concurrent_batches) if async_mode else 1
    if async_mode and int(cfg["pipeline_parallel_size"]) == 1 and queue_size != 2:
        raise SystemExit(f"vLLM's batch queue holds {queue_size} steps, not 2")
    out = open(out_path, "w")
    t_loop = time.perf_counter()
    try:
        while True:
            unfinished = scheduler.get_num_unfinished_requests()
            flush = async_mode and bool(inflight) and unfinished == 0
            if flush:  # nothing left to schedule: apply the step in flight, consume no step
                prev = inflight.popleft()
                (
                    rec_step,
                    arrived,
                    so,
                    mro,
                    sched,
                    req_ids,
                    got_token,
                    spec_sched,
                    accepted,
                    num_running,
                    num_waiting,
                    free_during,
                    pcs,
                    t0,
                    xfer_log,
                ) = prev
            # EngineCore steps on while finished requests wait for their sends (P/D only)
            elif (
                unfinished == 0
                and not xfer_jobs
                and not pd_jobs
                and not (cfg.get("pd_connector") and scheduler.has_finished_requests())
            ):
                if nxt >= len(pending):
                    break
                step = max(step, pending[nxt]["arrival_step"])  # idle: jump the clock
            if not flush:
                if step >= cfg["max_steps"]:
                    raise SystemExit(f"max_steps ({cfg['max_steps']}) reached")
                arrived = []
                # Async: step k is scheduled as step k-1 starts (right after k-1 is launched), so
                # it sees the requests that arrived by then; with nothing in flight, at its start.
                cutoff = step - 1 if inflight else step
                while nxt < len(pending) and pending[nxt]["arrival_step"] <= cutoff:
                    r = pending[nxt]
                    scheduler.add_request(make_request(r, cfg, block_hasher))
                    per_req[r["req_id"]]["added_step"] = step
                    arrived.append(r["req_id"])
                    nxt += 1

                t0 = time.perf_counter()
                xfer_log: dict[str, Any] = {"loads": [], "stores": [], "flushed": [], "done": []}
                # async: the drafter ran on the worker for the requests already running; one
                # admitted in this step has only the scheduler's padding rows (never accepted)
                was_running = {r.request_id for r in scheduler.running}
                so = scheduler.schedule()
                # ---- fake model runner --------------------------------------
                sched = so.num_scheduled_tokens
                req_ids = list(sched.keys())
                sampled: list[list[int]] = []
                got_token: list[str] = []
                spec_sched = {rid: len(t) for rid, t in (so.scheduled_spec_decode_tokens or {}).items()}
                accepted: dict[str, int] = {}
                for rid in req_ids:
                    req = scheduler.requests[rid]
                    # schedule() already advanced num_computed_tokens by this step.
                    # async: the token count lags by the steps in flight; vLLM's own flag says
                    if (
                        (not req.is_prefill_chunk)
                        if async_mode
                        else req.num_computed_tokens >= req.num_tokens
                    ):
                        tok = sampled_tok
                        n_out = req.num_output_tokens + max(req.num_output_placeholders, 1)
                        if eos_mode and n_out >= by_id[rid]["output_len"]:
                            tok = eos_tok
                        drafts = so.scheduled_spec_decode_tokens.get(rid) if spec_on else None
                        a = 0
                        if drafts:
                            # padding rows (-1) are never accepted; async drafts are all -1
                            # placeholders, filled on the worker for a request already running
                            real = rid in was_running if async_mode else all(t >= 0 for t in drafts)
                            if real:
                                n_ver = spec_count.get(rid, 0)
                                spec_count[rid] = n_ver + 1
                                a = _accept(cfg, rid, n_ver, len(drafts))
                            accepted[rid] = a
                        sampled.append([tok] * (1 + a))
                        got_token.append(rid)
                    else:  # partial prefill chunk: the runner discards its sample
                        sampled.append([])
                mro = ModelRunnerOutput(
                    req_ids=req_ids,
                    req_id_to_index={rid: i for i, rid in enumerate(req_ids)},
                    sampled_token_ids=sampled,
                )
                # ---- fake offload worker: every transfer ends a chosen number of steps later ----
                xfer = None
                meta = getattr(so, "kv_connector_metadata", None)
                if meta is not None and hasattr(meta, "load_jobs"):
                    for jid, job in meta.load_jobs.items():
                        xfer_jobs[jid] = (step + load_delay, job.req_id, True)
                        xfer_log["loads"].append([jid, job.req_id, len(job.dst_spec.block_ids)])
                    for jid, job in meta.store_jobs.items():
                        xfer_jobs[jid] = (step + store_delay, job.req_id, False)
                        xfer_log["stores"].append([jid, job.req_id, len(job.src_spec.block_ids)])
                    for jid in meta.jobs_to_flush or ():  # the worker waits for them in this step
                        if jid in xfer_jobs:
                            xfer_jobs[jid] = (step,) + xfer_jobs[jid][1:]
                            xfer_log["flushed"].append(jid)
                    done = sorted(j for j, (due, _, _) in xfer_jobs.items() if due <= step)
                    if done:
                        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
                            OffloadingWorkerMetadata,
                        )
                        from vllm.v1.outputs import KVConnectorOutput

                        recv = {xfer_jobs[j][1] for j in done if xfer_jobs[j][2]}
                        xfer = KVConnectorOutput(
                            finished_recving=recv or None,
                            kv_connector_worker_meta=OffloadingWorkerMetadata(
                                completed_jobs={j: 1 for j in done}
                            ),
                        )
                        xfer_log["done"] = done
                        for j in done:
                            del xfer_jobs[j]
                    mro.kv_connector_output = xfer
                # ---- fake NIXL worker: receives and sends end a chosen number of steps later ----
                if meta is not None and hasattr(meta, "reqs_to_recv"):
                    from vllm.v1.outputs import KVConnectorOutput

                    xfer_log = {"recvs": [], "sends": [], "recv_done": [], "send_done": []}
                    for rid, rm in meta.reqs_to_recv.items():
                        nb = len(rm.local_block_ids[0]) if rm.local_block_ids else 0
                        pd_jobs[("recv", rid)] = step + load_delay
                        xfer_log["recvs"].append([rid, nb])
                    for rid in meta.reqs_to_send:
                        pd_jobs[("send", rid)] = step + store_delay
                        xfer_log["sends"].append(rid)
                    done = [k for k, due in pd_jobs.items() if due <= step]  # in issue order
                    for k in done:
                        del pd_jobs[k]
                    recv = [rid for kind, rid in done if kind == "recv"]
                    sent = [rid for kind, rid in done if kind == "send"]
                    xfer_log["recv_done"], xfer_log["send_done"] = recv, sent
                    if recv or sent:
                        # lists, not sets: vLLM frees finished sends in this order (deterministic)
                        mro.kv_connector_output = KVConnectorOutput(
                            finished_recving=recv or None,
                            finished_sending=sent or None,  # type: ignore[arg-type]
                        )
                # snapshot state as seen during this step (after allocation)
                num_running, num_waiting = scheduler.get_request_counts()
                free_during = pool.get_num_free_blocks()
                # each KV cache group's blocks in use: the distinct real blocks its manager's
                # tables hold (the null block left out); they add up to the pool's
                group_used = [
                    len({b.block_id for held in m.req_to_blocks.values() for b in held if not b.is_null})
                    for m in kvm.coordinator.single_type_managers
                ]
                pcs = kvm.make_prefix_cache_stats()
            if async_mode and not flush:  # schedule k before applying k-1 (the batch queue)
                cur = (
                    step,
                    arrived,
                    so,
                    mro,
                    sched,
                    req_ids,
                    got_token,
                    spec_sched,
                    accepted,
                    num_running,
                    num_waiting,
                    free_during,
                    pcs,
                    t0,
                    xfer_log,
                )
                inflight.append(cur)
                if len(inflight) < queue_size:  # step_with_batch_queue: not full, requests left
                    step += 1
                    continue
                prev = inflight.popleft()
                (
                    rec_step,
                    arrived,
                    so,
                    mro,
                    sched,
                    req_ids,
                    got_token,
                    spec_sched,
                    accepted,
                    num_running,
                    num_waiting,
                    free_during,
                    pcs,
                    t0,
                    xfer_log,
                ) = prev
            elif not async_mode:
                rec_step = step
            engine_outs = scheduler.update_from_output(so, mro)
            proposed: dict[str, int] = {}
            # the drafter proposes k drafts for every request that ran (EngineCore.post_step); async:
            # they stay on the worker (EngineCore skips update_draft_token_ids)
            if spec_on and not async_mode:
                from vllm.v1.outputs import DraftTokenIds

                k = int(cfg["num_speculative_tokens"])
                lens = []
                for rid in req_ids:
                    n_d = k
                    req = scheduler.requests.get(rid)
                    # the proposals vLLM applies (update_draft_token_ids skips the others)
                    live = req is not None and not req.is_finished() and not req.is_prefill_chunk
                    if live and cfg.get("spec_draft_min") is not None:
                        nth = draft_count.get(rid, 0)
                        draft_count[rid] = nth + 1
                        n_d = _draft_len(cfg, rid, nth)
                    if live:
                        proposed[rid] = n_d
                    lens.append(n_d)
                scheduler.update_draft_token_ids(
                    DraftTokenIds(req_ids=list(req_ids), draft_token_ids=[[sampled_tok] * n for n in lens])
                )
            step_times.append(time.perf_counter() - t0)
            # ---------------------------------------------------------------

            finished: dict[str, str] = {}
            for eco in engine_outs.values():
                for o in eco.outputs:
                    info = per_req[o.request_id]
                    if o.new_token_ids:
                        info["output_tokens"] += len(o.new_token_ids)
                        if info["first_token_step"] is None:
                            info["first_token_step"] = rec_step
                    if o.finish_reason is not None:
                        reason = str(getattr(o.finish_reason, "name", o.finish_reason)).lower()
                        finished[o.request_id] = reason
                        info["finish_step"] = rec_step
                        info["finish_reason"] = reason

            # vLLM re-sends a request resumed after preemption as "new" data
            # (or flags it in resumed_req_ids, depending on the version): split
            # first-time admissions from resumptions ourselves.
            new_ids: list[str] = []
            resumed: list[str] = []
            hit_tokens: dict[str, int] = {}
            for nr in so.scheduled_new_reqs:
                if nr.num_computed_tokens:
                    hit_tokens[nr.req_id] = nr.num_computed_tokens
                info = per_req[nr.req_id]
                if info["first_scheduled_step"] is None:
                    info["first_scheduled_step"] = rec_step
                    info["prefix_hit_tokens_first"] = nr.num_computed_tokens
                    new_ids.append(nr.req_id)
                else:
                    resumed.append(nr.req_id)
            cached = so.scheduled_cached_reqs
            flagged = getattr(cached, "resumed_req_ids", None) or ()
            if flagged:
                idx = {rid: i for i, rid in enumerate(cached.req_ids)}
                for rid in flagged:
                    resumed.append(rid)
                    n = cached.num_computed_tokens[idx[rid]]
                    if n:
                        hit_tokens[rid] = n
            preempted = sorted(so.preempted_req_ids or [])
            for rid in preempted:
                per_req[rid]["num_preemptions"] += 1
            total_preemptions += len(preempted)
            pc = None
            if pcs is not None and prefix_caching:
                pc = {
                    "queries": pcs.queries,
                    "hits": pcs.hits,
                    "preempted_queries": getattr(pcs, "preempted_queries", 0),
                    "preempted_hits": getattr(pcs, "preempted_hits", 0),
                }
                for k in pc_tot:
                    pc_tot[k] += pc[k]

            rec = {
                "step": rec_step,
                "arrived": arrived,
                "num_scheduled_tokens": dict(sched),
                "total_scheduled_tokens": so.total_num_scheduled_tokens,
                "new_reqs": new_ids,
                "resumed_reqs": sorted(resumed),
                "sampled": got_token,
                "preempted": preempted,
                "finished": finished,
                "num_running": num_running,
                "num_waiting": num_waiting,
                "kv_blocks_total": usable_blocks,
                "kv_blocks_used": usable_blocks - free_during,
                "kv_blocks_free": free_during,
                "kv_group_blocks": group_used,
                "kv_blocks_free_after_update": pool.get_num_free_blocks(),
                "prefix_hit_tokens": hit_tokens,
                "prefix_cache": pc,
            }
            if spec_on:
                rec["spec_scheduled"] = spec_sched
                rec["spec_accepted"] = accepted
                rec["spec_proposed"] = proposed
            if scheduler.connector is not None:
                rec["offload"] = xfer_log
                rec["waiting_for_kv"] = sorted(
                    r.request_id
                    for r in scheduler.requests.values()
                    if r.status.name == "WAITING_FOR_REMOTE_KVS"
                )
                if "loads" in xfer_log:
                    offload_totals["loads"] += len(xfer_log["loads"])
                    offload_totals["stores"] += len(xfer_log["stores"])
                    offload_totals["blocks_loaded"] += sum(x[2] for x in xfer_log["loads"])
                    offload_totals["blocks_stored"] += sum(x[2] for x in xfer_log["stores"])
            out.write(json.dumps(rec, separators=(",", ":")) + "\n")
            steps_written += 1
            if events and (arrived or new_ids or resumed or preempted or finished):
                print(_event_line(rec), file=events)

            if so.total_num_scheduled_tokens == 0:
                empty_streak += 1
                if empty_streak >= cfg["stall_steps"]:
                    raise SystemExit(
                        f"stalled: {empty_streak} steps in a row scheduled nothing at step {rec_step} "
                        f"(running={num_running}, waiting={num_waiting}); a request probably "
                        "cannot fit in the KV cache"
                    )
            else:
                empty_streak = 0
            if not flush:
                step += 1
    finally:
        out.close()
    loop_s = time.perf_counter() - t_loop

    ms = [t * 1e3 for t in step_times]
    summary = {
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "config": {**cfg, "max_model_len": max_model_len},
        "num_requests": len(trace),
        "total_steps": steps_written,
        "last_step": step - 1 if steps_written else None,
        "total_preemptions": total_preemptions,
        "prefix_cache_totals": pc_tot if prefix_caching else None,
        "offload_totals": offload_totals if scheduler.connector is not None else None,
        "kv_cache_groups": group_layout(scheduler.kv_cache_config) if cfg.get("kv_layers") else None,
        "timing": {
            "setup_s": round(setup_s, 3),
            "loop_s": round(loop_s, 3),
            "sched_ms_per_step_mean": round(statistics.fmean(ms), 4) if ms else None,
            "sched_ms_per_step_p50": round(statistics.median(ms), 4) if ms else None,
            "sched_ms_per_step_max": round(max(ms), 4) if ms else None,
            "loop_ms_per_step_mean": round(loop_s * 1e3 / steps_written, 4) if steps_written else None,
        },
        "per_request": per_req,
    }
    unfinished_ids = [rid for rid, i in per_req.items() if i["finish_step"] is None]
    if unfinished_ids:
        summary["unfinished"] = unfinished_ids
    if summary_path:
        with open(summary_path, "w") as f:
            json.dump(summary, f, indent=1)
    if not quiet:
        t = summary["timing"]
        print(
            f"vllm {summary['vllm_version']}: {len(trace)} requests, {steps_written} steps, "
            f"{total_preemptions} preemptions, {t['sched_ms_per_step_mean']} ms/step "
            f"(schedule+update), {t['loop_ms_per_step_mean']} ms/step (loop), setup {t['setup_s']} s",
            file=sys.stderr,
        )
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True, help="JSONL, one request per line")
    ap.add_argument("--config", help="JSON object with scheduler/cache settings")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key (repeatable)"
    )
    ap.add_argument("--out", required=True, help="per-step JSONL output")
    ap.add_argument("--summary", help="summary JSON output")
    ap.add_argument(
        "--events",
        action="store_true",
        help="print one line per step where a request arrived, was admitted, "
        "resumed, preempted or finished (to stdout)",
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, args.set)
    trace = load_trace(args.trace, cfg)
    run(cfg, trace, args.out, args.summary, quiet=args.quiet, events=sys.stdout if args.events else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
