"""How every metric is defined: the one text behind each interface's "?".

The definitions follow vLLM (``vllm/v1/metrics``, ``vllm bench serve``); the engine's formulas are
in ``servesim.engine.results`` (its module docstring) and these words must agree with them.
"""

from __future__ import annotations

from typing import NamedTuple


class MetricDef(NamedTuple):
    label: str
    unit: str | None
    definition: str


METRICS: dict[str, MetricDef] = {
    "ttft_ms": MetricDef(
        "TTFT", "ms", "Time to first token: first output token minus arrival (queueing and prefill included)."
    ),
    "tpot_ms": MetricDef(
        "TPOT",
        "ms",
        "Time per output token: (last token - first token) / (outputs - 1), per request with 2+ outputs.",
    ),
    "itl_ms": MetricDef(
        "ITL", "ms", "Inter-token latency: every gap between consecutive outputs of a request, pooled."
    ),
    "e2e_ms": MetricDef("E2E", "ms", "End-to-end latency: last output token minus arrival."),
    "queue_ms": MetricDef(
        "queue", "ms", "Queue time: first scheduled minus arrival (a later preemption does not reset it)."
    ),
    "prefill_ms": MetricDef(
        "prefill", "ms", "First token minus first scheduled: the prompt's computation (chunks included)."
    ),
    "decode_ms": MetricDef("decode", "ms", "Last token minus first token: the output's generation."),
    "goodput": MetricDef(
        "goodput",
        "req/s",
        "Finished requests meeting every SLO (and their own SLA), per second of the run "
        "(first arrival to last completion).",
    ),
    "good_fraction": MetricDef("SLO attainment", None, "Share of all requests that are good."),
    "request_throughput": MetricDef("requests/s", "req/s", "Finished requests per second of the run."),
    "output_token_throughput": MetricDef("output tok/s", "tok/s", "Output tokens per second of the run."),
    "total_token_throughput": MetricDef(
        "total tok/s", "tok/s", "Prompt plus output tokens of finished requests per second of the run."
    ),
    "num_running": MetricDef("running", None, "Requests in the running batch at a step."),
    "num_waiting": MetricDef(
        "waiting",
        None,
        "Requests in the waiting queue (preempted included) right after the scheduler picked a step's "
        "batch, drawn at the step's start; a request arriving during a step counts from the next one.",
    ),
    "num_tokens": MetricDef(
        "tokens/step", "tokens", "Tokens scheduled in one engine step (≤ max_num_batched_tokens)."
    ),
    "accepted_tokens_per_step": MetricDef(
        "accepted tokens/step",
        "tokens",
        "Speculative decoding: tokens a verifying request emits per step, 1 + accepted drafts / "
        "verifications (vLLM's mean acceptance length; 1 = no draft accepted, k + 1 = all).",
    ),
    "spec_acceptance_rate": MetricDef(
        "acceptance rate",
        None,
        "Speculative decoding: accepted draft tokens / draft tokens verified (vLLM's draft acceptance rate).",
    ),
    "kv_usage": MetricDef("KV usage", None, "KV blocks in use / usable blocks (vLLM's null block excluded)."),
    "preemptions": MetricDef(
        "preemptions", None, "Requests evicted from the batch to free KV blocks (recomputed later)."
    ),
    "prefix_cache_hit_rate": MetricDef(
        "prefix hit rate", None, "vLLM's: prompt tokens found in the prefix cache / prompt tokens queried."
    ),
    "starved": MetricDef(
        "STARVED", None, "Requests preempted starvation_threshold times (default 3) in a row of cycles."
    ),
    "offered_rps": MetricDef("offered rate", "req/s", "Arrivals per second: (n - 1) / arrival span."),
    "saturation_rps": MetricDef(
        "saturation", "req/s", "Lowest arrival rate at which the waiting queue grows without bound."
    ),
    "goodput_knee_rps": MetricDef(
        "goodput knee", "req/s", "Highest arrival rate at which every seed meets the SLO."
    ),
}


def define(key: str) -> str | None:
    """The definition of a metric, or None when it has none here."""
    m = METRICS.get(key)
    return m.definition if m else None


__all__ = ["METRICS", "MetricDef", "define"]
