"""Every size a user controls and its bound: the one table the models, the CLI's parsers, the
trace readers and the README (``tools/bounds_table.py``) read.

Why: a bound checked where the value is parsed turns a typo (1e14 blocks, a million survivors)
into one line naming the field before any work, instead of minutes of CPU or a MemoryError.
"""

from __future__ import annotations

from typing import NamedTuple

MAX_SEQS = 1 << 20  # running requests (max_num_seqs), 1,048,576
MAX_TOKENS = 1 << 24  # tokens per step, per request, per context (16,777,216)
MAX_BLOCK_SIZE = 1 << 12  # tokens per KV block, 4,096
MAX_GPU_BLOCKS = 1 << 22  # 4,194,304 KV blocks (67M tokens at 16 per block): ~0.4 GB of block table
MAX_SEED = (1 << 63) - 1  # a seed: fits JSON's integers, numpy's SeedSequence and SQLite
MAX_REPLICAS = 1024  # replicas of a cluster (cluster --replicas, --cluster FILE)
MAX_POOL_REPLICAS = 64  # replicas of one pool of a disaggregated cluster (prefill or decode)
MAX_TP = 64  # tensor-parallel degree of a replica
MAX_SURVIVORS = 1024  # idle survivors a recovery plan assumes (recover --survivors)
MAX_RATE = 1e6  # requests per second of a load (scenario simulated_qps)
MAX_SCENARIO_PROMPT = 8192  # mean prompt tokens a load scenario draws (its generator's cap)
MAX_SCENARIO_OUTPUT = 2048  # mean output tokens a load scenario draws (its generator's cap)
MAX_REMAINING = 1 << 20  # reschedule: tokens_remaining of one request
MAX_TOTAL_REMAINING = 1 << 21  # reschedule: tokens_remaining of all requests
MAX_RESCHEDULE_REQUESTS = 100_000  # reschedule: interrupted requests
MAX_SCENARIO_REQUESTS = 100_000  # load scenario: num_requests


class Bound(NamedTuple):
    what: str
    where: str
    bound: int | float


#: The README's bounds table, in this order (``tools/bounds_table.py`` prints it).
BOUNDS: tuple[Bound, ...] = (
    Bound("max_num_seqs", "every engine config; recover, reschedule, scenario", MAX_SEQS),
    Bound(
        "tokens per step, per request, per context (max_num_batched_tokens, max_model_len, "
        "prompt/output lengths)",
        "every config, trace format (also with --strict), failure record, scenario",
        MAX_TOKENS,
    ),
    Bound("num_gpu_blocks", "every engine config", MAX_GPU_BLOCKS),
    Bound("block_size", "every engine config; recover, reschedule, scenario", MAX_BLOCK_SIZE),
    Bound("replicas", "--replicas of cluster, saturate, dashboard, advise; --cluster FILE", MAX_REPLICAS),
    Bound(
        "replicas of a prefill or decode pool",
        "--prefill-replicas/--decode-replicas of cluster, dashboard, emulate; a cluster file's pools",
        MAX_POOL_REPLICAS,
    ),
    Bound("tensor-parallel degree (tp)", "every deployment's --tp; a cluster file's pools", MAX_TP),
    Bound("data-parallel size", "--data-parallel-size of simulate and cluster; a deployment spec", MAX_TP),
    Bound("survivors", "recover --survivors", MAX_SURVIVORS),
    Bound("simulated_qps (requests/s)", "load scenario", MAX_RATE),
    Bound("mean_input_tokens", "load scenario", MAX_SCENARIO_PROMPT),
    Bound("mean_output_tokens", "load scenario", MAX_SCENARIO_OUTPUT),
    Bound("num_requests", "load scenario", MAX_SCENARIO_REQUESTS),
    Bound("tokens_remaining, one request", "reschedule", MAX_REMAINING),
    Bound("tokens_remaining, all requests", "reschedule", MAX_TOTAL_REMAINING),
    Bound("interrupted requests", "reschedule", MAX_RESCHEDULE_REQUESTS),
)


def bounds_table() -> str:
    """The bounds as a Markdown table (the README's, between its ``bounds`` markers)."""
    rows = ["| value | checked in | at most |", "| --- | --- | ---: |"]
    for b in BOUNDS:
        shown = f"{b.bound:,}" if isinstance(b.bound, int) else f"{b.bound:,.0f}"
        rows.append(f"| {b.what} | {b.where} | {shown} |")
    return "\n".join(rows) + "\n"


__all__ = ["BOUNDS", "Bound", "bounds_table"] + [n for n in dir() if n.startswith("MAX_")]
