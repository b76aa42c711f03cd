"""The recommendation's deployable answer and its one-change-at-a-time table, for people.

``deploy_lines``: "N replicas x this command behind this router, with this gateway timeout", the
``max_model_len`` explained, the cost, the headroom to the SLO knee and to instability.
``changes_table``: each knob changed from the baseline with what it does alone.
``tolerance_text``: the step-time model's error a change had to beat.
"""

from __future__ import annotations

from typing import Any

from servesim.tuning.choice import Tolerance
from servesim.tuning.deploy import DeployPlan
from servesim.tuning.recommend import SchedulerRecommendation
from servesim.views.model import Column, Table


def tolerance_text(tol: Tolerance) -> str:
    """'TTFT p99 24 %, TPOT p99 12 %, E2E p99 15 %, goodput/capacity per GPU 13 %'."""
    pct = tol.percent()
    names = {"ttft": "TTFT p99", "tpot": "TPOT p99", "e2e": "E2E p99"}
    parts = [f"{names[m]} {pct[m]:.0%}" for m in ("ttft", "tpot", "e2e") if m in pct]
    parts.append(f"goodput and capacity per GPU {pct['objective']:.0%}")
    return ", ".join(parts)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.0%}"


def _rate(x: float | None) -> str:
    return "not found in the rates searched" if x is None else f"{x:,.3g} req/s"


def headroom_text(p: DeployPlan) -> str:
    """Headroom to the SLO knee first (what the user can rely on), then to queue instability."""
    knee = (
        f"the SLO holds up to {_rate(p.slo_knee_rps)} ({_pct(p.headroom_to_slo_knee)} over the target "
        f"{p.target_rate_rps:,.3g} req/s)"
        if p.slo_knee_rps is not None
        else "no SLO knee measured"
    )
    grows = f"{_rate(p.unstable_rps)} ({_pct(p.headroom_to_instability)})"
    return f"headroom: {knee}; the queue grows from {grows}"


def max_model_len_text(p: DeployPlan) -> str:
    if p.max_model_len_source == "trace_max":
        return (
            f"--max-model-len {p.max_model_len:,} is the trace's longest request "
            f"({p.longest_request_tokens:,} tokens) + 1: vLLM refuses any longer request; raise it (up "
            "to the model's context) if your traffic can be longer, and re-run (the KV cache must hold "
            "one such sequence)"
        )
    return (
        f"--max-model-len {p.max_model_len:,} as given (the trace's longest request is "
        f"{p.longest_request_tokens:,} tokens)"
    )


def price_origin(p: DeployPlan) -> str:
    """Where the plan's $/GPU-hour comes from, in words."""
    src = p.price_source
    if src is None or src == "given":
        return "given"
    return f"list price: {src}; override with --gpu-price"


def cost_text(p: DeployPlan) -> str:
    gpu = f" {p.gpu}" if p.gpu else ""
    text = f"{p.gpus}{gpu} GPU(s): {p.gpu_hours_per_day:,.0f} GPU-hours a day"
    if p.host_memory_gib:
        text += f", plus {p.host_memory_gib:g} GiB of host memory for the CPU KV tier(s)"
    if p.usd_per_gpu_hour is None:
        return text + " (give --gpu-hour-usd for $ figures)"
    if p.usd_per_host_gib_hour is not None:
        text += f" (at ${p.usd_per_host_gib_hour:g}/GiB-hour, servesim's host memory assumption)"
    per_m = "n/a" if p.usd_per_1m_tokens is None else f"${p.usd_per_1m_tokens:,.3g}"
    per_out = "n/a" if p.usd_per_1m_output_tokens is None else f"${p.usd_per_1m_output_tokens:,.3g}"
    hour = f" (${p.usd_per_hour:,.2f} an hour)" if p.usd_per_hour is not None else ""
    return (
        f"{text}, ${p.usd_per_day:,.2f} a day{hour} at ${p.usd_per_gpu_hour:g}/GPU-hour ({price_origin(p)}); "
        f"{per_m} per 1M tokens (prompt + output), {per_out} per 1M output tokens at the predicted throughput"
    )


def deploy_lines(p: DeployPlan) -> list[str]:
    """The answer as lines: what to run, then the commands, then why max_model_len, cost, headroom."""
    gateway = (
        f"a gateway queue timeout of {p.gateway_queue_timeout_s:g} s (not a vLLM flag: set it in the gateway)"
        if p.gateway_queue_timeout_s is not None
        else "no gateway queue timeout"
    )
    router = f", behind a {p.router} router," if p.replicas > 1 else " (one replica, no router)"
    head = (
        f"deploy: {p.replicas} replica(s) x TP {p.tensor_parallel_size}"
        + (f" x PP {pp}" if (pp := p.gpus // max(1, p.replicas * p.tensor_parallel_size)) > 1 else "")
        + f" = {p.gpus} GPU(s) of this command"
        f"{router} with {gateway}:"
    )
    return [head, *p.commands, max_model_len_text(p), cost_text(p), headroom_text(p)]


def value_text(x: Any) -> str:
    if isinstance(x, bool):
        return "on" if x else "off"
    if x is None:
        return "none"
    if isinstance(x, float):
        return f"{x:g}"
    return str(x)


def changes_table(rec: SchedulerRecommendation) -> Table:
    """Each knob changed from the baseline, alone: baseline + it, on the first fresh seed."""
    cols = [
        Column(key="flag", label="change", kind="str"),
        Column(key="from", label="from", kind="str"),
        Column(key="to", label="to", kind="str"),
        Column(key="ttft_p99_ms", label="TTFT p99 alone", unit="ms"),
        Column(key="tpot_p99_ms", label="TPOT p99 alone", unit="ms"),
        Column(key="slo_ok", label="SLO alone", kind="str"),
    ]
    rows: list[list[Any]] = []
    for c in rec.changes:
        slo = "n/a" if c.slo_ok is None else ("met" if c.slo_ok else "missed")
        if not c.valid:
            slo = f"not alone: {c.reason}"
        was, now = value_text(c.baseline_value), value_text(c.value)
        rows.append([c.flag, was, now, c.ttft_p99_ms, c.tpot_p99_ms, slo])
    notes = []
    if rec.changes:
        c0 = rec.changes[0]
        base = "n/a" if c0.baseline_slo_ok is None else ("met" if c0.baseline_slo_ok else "missed")
        notes.append(
            f"your configuration on the same seed ({c0.seed}): TTFT p99 {c0.baseline_ttft_p99_ms:,.1f} ms, "
            f"TPOT p99 {c0.baseline_tpot_p99_ms:,.1f} ms, SLO {base}"
        )
    title = "each change alone (your configuration + it)"
    return Table(key="changes", title=title, columns=cols, rows=rows, notes=notes)
