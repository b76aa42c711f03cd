"""The tables of ``servesim perf`` and ``servesim calibrate``: catalogs, memory, a step, a fit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.cli.tables import FitTable

if TYPE_CHECKING:
    from servesim.services.perf import CalibrationReport, Catalog, KVCapacity, ModelSpec, StepAnswer

GiB = 1 << 30


def _gb(x: float) -> str:
    return f"{x / GiB:.2f}"


def _attention(m: ModelSpec) -> str:
    """Full attention / MLA, its windowed or state layers (KV cache groups), or why the model is
    refused (Mamba or linear layers whose state servesim does not know)."""
    p = m.layer_pattern
    if p is not None:
        said = f"{p.kind.replace('_', ' ')} {p.layers}/{m.num_layers}"
        return said if p.modelled else f"refused: {said}"
    return "MLA" if m.is_mla else "full"


def models_table(cat: Catalog) -> FitTable:
    t = FitTable(title="Models")
    for col in ("name", "HF id", "params", "layers", "hidden", "heads/KV", "experts", "dtype", "attention"):
        t.add_column(col)
    for n, m in sorted(cat.models.items()):
        t.add_row(
            n,
            m.hf_id or "-",
            f"{m.num_params / 1e9:.1f}B",
            str(m.num_layers),
            str(m.hidden_size),
            f"{m.num_attention_heads}/{m.num_kv_heads}",
            f"{m.num_experts} top-{m.experts_per_token}" if m.is_moe else "-",
            m.dtype if m.weight_dtype is None else f"{m.weight_dtype}/{m.dtype}",
            _attention(m),
        )
    return t


def gpus_table(cat: Catalog) -> FitTable:
    from servesim.services.perf import load_prices

    prices = load_prices(catalog=cat)
    month = max((p.as_of or "" for p in prices.rows()), default="")
    t = FitTable(
        title="GPUs ($/GPU-hour: on-demand list prices, sourced and dated in servesim/data/perf/"
        f"gpu_prices.yaml, {month}; tune --gpu-price overrides)"
    )
    for col in ("name", "memory GiB", "HBM TB/s", "BF16 TFLOP/s", "FP8 TFLOP/s", "link GB/s (1 dir)"):
        t.add_column(col)
    t.add_column("$/GPU-hour")
    for n, g in sorted(cat.gpus.items()):
        price = prices.get(n)
        t.add_row(
            n,
            f"{g.memory_bytes / GiB:.1f}",
            f"{g.hbm_bandwidth / 1e12:.2f}",
            f"{g.bf16_flops / 1e12:.0f}",
            f"{g.fp8_flops / 1e12:.0f}" if g.fp8_flops else "-",
            f"{g.interconnect_bandwidth / 1e9:.0f} {g.interconnect}",
            f"{price.usd_per_gpu_hour:g}" if price is not None else "-",
        )
    return t


def memory_table(
    cap: KVCapacity, tp: int, gpu_memory_utilization: float, layout: str | None = None
) -> FitTable:
    """``layout``: a data-parallel layout's words (``DP 8 x TP 1, EP``) in the title instead of TP."""
    where = f"{tp} x {cap.gpu} (per GPU)" if layout is None else f"{cap.gpu}, {layout} (per GPU of a rank)"
    t = FitTable(title=f"{cap.model} on {where}")
    t.add_column("item")
    t.add_column("value", justify="right")
    rows = [
        ("total memory", f"{_gb(cap.total_memory_bytes)} GiB"),
        (f"x gpu_memory_utilization {gpu_memory_utilization}", f"{_gb(cap.requested_bytes)} GiB"),
        ("- weights", f"{_gb(cap.weight_bytes)} GiB"),
        ("- start-up reserve", f"{_gb(cap.reserve_bytes)} GiB"),
        ("= KV cache", f"{_gb(cap.kv_cache_bytes)} GiB"),
        ("KV bytes per token", f"{cap.kv_bytes_per_token:,}"),
        (f"blocks of {cap.block_size} tokens (incl. null block)", f"{cap.num_gpu_blocks:,}"),
        ("tokens in usable blocks", f"{cap.max_tokens:,}"),
        (f"sequences of {cap.max_model_len} tokens at once", f"{cap.max_concurrency or 0:.2f}"),
    ]
    if cap.kv_cache_groups:  # a block is one page of one group's layers; each group has a table
        names = [g.label() for g in cap.kv_cache_groups]
        labels = ", ".join(f"{names.count(n)} x {n}" for n in dict.fromkeys(names))
        rows.insert(6, ("KV cache groups (one block table each)", labels))
        rows.insert(7, ("a block: one page of each layer of a group", f"{cap.layers_per_block} layers"))
    for k, v in rows:
        t.add_row(k, v)
    return t


def step_table(answer: StepAnswer, tp: int) -> FitTable:
    st, batch = answer.step_time, answer.batch
    t = FitTable(title=f"{st.model.name} on {tp} x {st.gpu.name}: {batch.num_tokens} tokens")
    t.add_column("component")
    t.add_column("ms", justify="right")
    for k, v in answer.breakdown.items():
        if k in ("padded_tokens", "experts_touched"):
            t.add_row(k, f"{v:.1f}")
        else:
            t.add_row(k, f"{v * 1e3:.3f}")
    t.add_row("[bold]step time[/bold]", f"[bold]{answer.total_s * 1e3:.3f}[/bold]")
    return t


def calibration_tables(report: CalibrationReport) -> list[FitTable]:
    """The fitted coefficients, and the error before and after (and per group)."""
    # SciPy's own words ("`xtol` termination condition is satisfied") stay in --json's message
    status = (
        f"converged in {report.evaluations} evaluations"
        if report.converged
        else f"did not converge ({report.message})"
    )
    t = FitTable(title=f"calibration ({report.kind}): {status}")
    for col in ("coefficient", "start", "fitted", "rel. std. error", "determined"):
        t.add_column(col)
    for p in report.parameters:
        se = f"{p.relative_std_error:.1%}" if p.relative_std_error is not None else "-"
        t.add_row(p.name, f"{p.start:.4g}", f"{p.value:.4g}", se, "yes" if p.determined else "no")
    e = FitTable(title="error (%)")
    for col in ("", "n", "MAPE", "median", "p90", "max"):
        e.add_column(col)
    for label, s in (("before", report.before), ("after", report.after), *report.per_group.items()):
        e.add_row(
            label, str(s.n), f"{s.mape:.2f}", f"{s.median_ape:.2f}", f"{s.p90_ape:.2f}", f"{s.max_ape:.2f}"
        )
    return [t, e]
