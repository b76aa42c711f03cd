"""Every structured ``Reason`` of a recommendation or a scenario worded as one English sentence
(``reason_text``): the tuner measures, this module words it, so the CLI, the web workbench, the
TUI and the report say the same thing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servesim.tuning.reasons import Effect, Reason


def ms_text(x: float) -> str:
    """``1,234`` ms from 100 ms up, ``12.3`` below."""
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


METRIC_NAMES = {
    "ttft_p99_ms": "TTFT p99",
    "tpot_p99_ms": "TPOT p99",
    "e2e_p99_ms": "E2E p99",
    "good_fraction": "good fraction",
    "gpus": "GPUs",
}


def ms_unit(x: float) -> str:
    return f"{ms_text(x)} ms"


def rate_text(x: float) -> str:
    return f"{x:,.3g} req/s"


def _value(metric: str, x: float) -> str:
    if metric.endswith("_ms"):
        return ms_unit(x)
    if metric == "good_fraction":
        return f"{x:.1%}"
    if metric == "gpus":
        return f"{x:g}"
    return f"{x:,.3g}"


def effect_text(e: Effect) -> str:
    """'TTFT p99 rises from 120 ms to 180 ms' (from the recommendation to the alternative)."""
    name = METRIC_NAMES.get(e.metric, e.metric)
    if e.recommended is None or e.alternative is None:
        return f"{name} not measured"
    if e.verdict == "same":
        return f"{name} stays at about {_value(e.metric, e.recommended)}"
    word = "rises" if e.alternative > e.recommended else "falls"
    return f"{name} {word} from {_value(e.metric, e.recommended)} to {_value(e.metric, e.alternative)}"


def _effects(r: Reason, metrics: tuple[str, ...]) -> str:
    found = [effect_text(e) for m in metrics for e in r.effects if e.metric == m]
    return " and ".join(found)


def _verdict(r: Reason) -> str:
    parts = []
    if r.alternative_slo_ok is not None:
        parts.append("still within the SLO" if r.alternative_slo_ok else "missing the SLO")
    if r.alternative_status is not None and r.alternative_status != "STABLE":
        parts.append(r.alternative_status)
    return f" ({', '.join(parts)})" if parts else ""


def _onoff(v: Any) -> str:
    return "on" if v else "off"


def _ablation(r: Reason) -> str:
    f = r.facts
    k = r.knob
    if k == "enable_chunked_prefill" and r.value:
        prompts = (
            f"prompts of up to {f.get('prompt_max', 0):,} tokens (p99 {f.get('prompt_p99', 0):,.0f}, "
            f"median {f.get('prompt_p50', 0):,.0f})"
        )
        tpot = next((e for e in r.effects if e.metric == "tpot_p99_ms"), None)
        what = (
            "decodes no longer wait behind whole prompts"
            if tpot is not None and tpot.verdict == "worse"
            else "decodes are not held up by it at this load"
        )
        return (
            f"chunked prefill at {f.get('max_num_batched_tokens', 0):,} tokens per step splits {prompts}, so "
            f"{what}: without it {_effects(r, ('tpot_p99_ms', 'ttft_p99_ms'))}{_verdict(r)}"
        )
    if k == "enable_chunked_prefill":
        return (
            f"chunked prefill off: the {f.get('max_num_batched_tokens', 0):,}-token budget (>= max_model_len "
            f"{f.get('max_model_len', 0):,}) prefills every prompt in one step; with chunking on "
            f"{_effects(r, ('ttft_p99_ms', 'tpot_p99_ms'))}{_verdict(r)}"
        )
    if k == "long_prefill_token_threshold":
        return (
            f"long_prefill_token_threshold {r.value:,} caps one prompt's share of a step; without the cap "
            f"{_effects(r, ('ttft_p99_ms',))}{_verdict(r)}"
        )
    if k == "max_num_seqs":
        line = (
            f"max_num_seqs {r.value}: the batch held {f.get('mean_running', 0):,.1f} requests on average; at "
            f"{r.alternative} {_effects(r, ('ttft_p99_ms', 'e2e_p99_ms'))}{_verdict(r)}"
        )
        if f.get("ttft_p99_tolerance") is not None:
            line += (
                f" (the fewest sequences whose TTFT p99 is within {_f(f, 'ttft_p99_tolerance'):.0%} of the "
                f"default's, at most {ms_unit(_f(f, 'ttft_p99_allowed_ms'))}: the step-time model's "
                f"measured TTFT p99 error; sweep {f.get('sweep')})"
            )
        return line
    if k == "max_num_batched_tokens":
        return (
            f"max_num_batched_tokens {r.value:,}: at half the budget "
            f"{_effects(r, ('ttft_p99_ms', 'tpot_p99_ms'))}{_verdict(r)}"
        )
    if k == "enable_prefix_caching":
        share = f.get("prefix_reuse_ratio") or 0.0
        return (
            f"{share:.0%} of prompt tokens repeat earlier prefixes; with prefix caching "
            f"{_onoff(r.alternative)} {_effects(r, ('ttft_p99_ms',))}{_verdict(r)}"
        )
    if k == "replicas":
        return f"with {r.alternative} replica(s) {_effects(r, ('ttft_p99_ms',))}{_verdict(r)}"
    return f"{k} {r.alternative}: {_effects(r, ('ttft_p99_ms', 'tpot_p99_ms', 'e2e_p99_ms'))}{_verdict(r)}"


def _comparison(r: Reason) -> str:
    f = r.facts
    changes = ", ".join(f"{c.knob} {c.alternative} -> {c.recommended}" for c in r.changes) or "no setting"
    if r.against == "baseline":
        head = f"against the baseline ({changes} changed)"
        ok = r.alternative_slo_ok
        state = "" if ok is None else (" which meets the SLO" if ok else " which misses the SLO")
        miss = f": {f['alternative_violations']}" if (ok is False and f.get("alternative_violations")) else ""
        return f"{head}{state}{miss}; with the recommendation " + "; ".join(
            _flip(e) for e in r.effects if e.metric != "gpus" or e.verdict != "same"
        )
    return (
        "keep what you have: the best candidate found ("
        + ", ".join(f"{c.knob} {c.recommended} -> {c.alternative}" for c in r.changes)
        + ") does not beat it at the target load: "
        + "; ".join(effect_text(e) for e in r.effects)
        + _verdict(r)
    )


def _flip(e: Effect) -> str:
    """An effect read from the alternative (the baseline) to the recommendation."""
    swapped = Effect.of(
        e.metric, e.alternative, e.recommended, higher_is_better=e.metric in ("good_fraction",)
    )
    return effect_text(swapped)


def _f(facts: dict[str, Any], key: str) -> float:
    v = facts.get(key)
    return float(v) if isinstance(v, int | float) else 0.0


def _prediction(r: Reason) -> str:
    f = r.facts
    line = (
        f"at {rate_text(_f(f, 'rate_rps'))} on {f['replicas']} replica(s) x TP "
        f"{f['tensor_parallel_size']} = {f['gpus']} GPU(s): TTFT p99 {ms_unit(_f(f, 'ttft_p99_ms'))}, "
        f"TPOT p99 {ms_unit(_f(f, 'tpot_p99_ms'))}, E2E p99 {ms_unit(_f(f, 'e2e_p99_ms'))} "
        f"(worst of {f['seeds']} fresh seeds)"
    )
    if f.get("slo"):
        bad = f.get("slo_violations")
        line += f"; misses the SLO: {bad}" if bad else f"; within the SLO {f['slo']}"
    return line


def _headroom(r: Reason) -> str:
    """The unstable rate; never "stable" (the SLO may fail well below it: the knee says where)."""
    f = r.facts
    if f.get("saturation_rps") is not None and f.get("headroom") is not None:
        passes = f.get("max_stable_rps")
        test = f"; the queue test passes at {rate_text(float(passes))}" if passes is not None else ""
        return (
            f"the queue grows without bound from {rate_text(_f(f, 'saturation_rps'))} "
            f"({_f(f, 'headroom'):+.0%} over the target{test})"
        )
    top = rate_text(_f(f, "highest_rate_tried_rps"))
    return f"the queue grew without bound at no rate tried, up to {top}"


def _knee(r: Reason) -> str:
    f = r.facts
    return (
        f"the SLOs hold up to {rate_text(float(f['knee_rps'] or 0))} "
        f"({float(f.get('knee_headroom') or 0):+.0%} over the target)"
    )


def _capacity(r: Reason) -> str:
    f = r.facts
    if not f.get("found"):
        return (
            f"no scheduler setting meets the SLO on {f['flags_gpus']} GPU(s), and neither do up to "
            f"{f['max_replicas']} replicas of these flags (tried {f['tried']})"
        )
    goal = str(f.get("criterion") or "meet the SLO")
    line = (
        f"the target load is beyond any scheduler setting on {f['flags_gpus']} GPU(s) "
        f"({r.alternative} replica(s)): capacity is what is missing; {r.value} replicas "
        f"({f['gpus']} GPUs) {goal} (replicas tried: {f['tried']})"
    )
    if f.get("service_rps") is not None and f.get("rate_rps") is not None:
        line += (
            f"; one replica completes {_f(f, 'service_rps'):,.3g} req/s of the {_f(f, 'rate_rps'):,.3g} "
            "arriving"
        )
    if f.get("kv_blocks_needed") is not None:
        line += (
            f"; or one replica with {int(_f(f, 'kv_blocks_needed')):,} KV blocks "
            f"(given {int(_f(f, 'kv_blocks_given')):,})"
        )
    return line


def _refused(r: Reason) -> str:
    f = r.facts
    if r.knob == "enable_chunked_prefill":
        return (
            f"chunked prefill must stay on: with it off vLLM needs max_num_batched_tokens "
            f"({f.get('max_num_batched_tokens', 0):,}) >= max_model_len ({f.get('max_model_len', 0):,}) "
            f"for prompts of up to {f.get('prompt_max', 0):,} tokens"
        )
    return f"{r.knob} {r.alternative} is not possible here: {f.get('refused_because')}"


def _kv_cache(r: Reason) -> str:
    f = r.facts
    origin = (
        f"{f['model']} on {f['tensor_parallel_size']} x {f['gpu']} at gpu_memory_utilization "
        f"{f['gpu_memory_utilization']:g}"
        if f.get("model")
        else "as given by the hardware context"
    )
    groups = f.get("kv_cache_groups")
    held = (
        f"{int(f['tokens'] or 0):,} tokens at max_model_len over {groups} KV cache groups, "
        "as vLLM counts them"
        if groups
        else f"{int(f['tokens'] or 0):,} tokens"
    )
    return (
        f"KV cache: {int(f['blocks'] or 0):,} blocks of {f['block_size']} tokens per replica "
        f"({held}, {origin}); peak use {float(f['peak_use'] or 0):.0%}, "
        f"{float(f['preemptions_per_request'] or 0):.3f} preemptions per request, "
        f"{float(f['kv_exhaustion_events'] or 0):.1f} KV-exhaustion events per run"
    )


def _prefix_sharing(r: Reason) -> str:
    return (
        "the traffic shares no prompt prefixes, so prefix caching neither helps nor hurts here "
        f"(left {_onoff(r.value)})"
    )


def _gateway(r: Reason) -> str:
    return (
        f"queue_timeout_s {r.value:g} is not a vLLM flag: enforce it in the gateway or client "
        f"(at the target rate it rejected {float(r.facts.get('shed_fraction') or 0):.2%} of requests)"
    )


def _admission(r: Reason) -> str:
    f = r.facts
    limits = " and ".join(
        f"{k} {int(v):,}" for k, v in f.items() if k in ("max_num_queued_reqs", "max_num_queued_tokens") and v
    )
    return (
        f"{limits}: vLLM's API server answers HTTP 503 past the limit; on the worst of {f['seeds']} "
        f"fresh seeds it turned away {_f(f, 'rejected_fraction_max'):.2%} of requests (503s and "
        "prompts too long), none of them good"
    )


#: The sentence of each kind of reason.
_WORDS: dict[str, Callable[[Reason], str]] = {
    "prediction": _prediction,
    "headroom": _headroom,
    "slo_knee": _knee,
    "versus_baseline": _comparison,
    "capacity": _capacity,
    "ablation": _ablation,
    "refused": _refused,
    "kv_cache": _kv_cache,
    "prefix_sharing": _prefix_sharing,
    "gateway": _gateway,
    "admission": _admission,
}


def reason_text(r: Reason) -> str:
    """One reason as one sentence."""
    words = _WORDS.get(r.kind)
    return words(r) if words is not None else f"{r.kind}: {r.facts}"


__all__ = ["METRIC_NAMES", "effect_text", "ms_text", "ms_unit", "rate_text", "reason_text"]
