"""Two simulation runs side by side: what differs in their settings, and how each metric moved."""

from __future__ import annotations

from typing import Any

from servesim.services.tune import ab_verdict
from servesim.views.compare import FIGURES, LATENCIES, PERCENTILES
from servesim.views.compare import metric_label as _label
from servesim.views.model import Section


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def settings_of(job: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The run's effective engine config (with the KV blocks it got) and its request's other settings
    (its deployment's model, GPU, TP, replicas ...: the engine keys it set are in the config)."""
    flat: dict[str, Any] = {}
    params = {k: v for k, v in job.get("params", {}).items() if k not in ("engine", "trace_id", "label")}
    if isinstance(params.get("deployment"), dict):
        params["deployment"] = {k: v for k, v in params["deployment"].items() if k != "engine"}
    _flat("", params, flat)
    _flat("", result.get("config", {}), flat)
    return flat


def short_digest(digest: str) -> str:
    """A trace's digest as a comparison shows it: 12 hex digits of an uploaded file's
    ``sha256:...``; a generated trace's ``generator:preset:...`` whole (its seed is its identity)."""
    return digest.removeprefix("sha256:")[:12] if digest.startswith("sha256:") else digest[:60]


def workload_warning(traces: list[dict[str, Any] | None]) -> str | None:
    """A warning when the runs did not replay the same trace (by content digest): their metrics
    then differ by workload as well as by settings. None when every run used the same one."""
    digests = {t["digest"] if t else None for t in traces}
    if len(digests) <= 1:
        return None
    names = ", ".join(
        dict.fromkeys(
            f"{t['name']} ({short_digest(t['digest'])})" if t else "an unknown trace" for t in traces
        )
    )
    return (
        f"these runs replayed different workloads ({names}): their metrics differ by the traffic as "
        "well as by the settings"
    )


def compare_runs(
    job_a: dict[str, Any],
    res_a: dict[str, Any],
    job_b: dict[str, Any],
    res_b: dict[str, Any],
    traces: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None),
) -> dict[str, Any]:
    """``traces``: each run's trace (id, name, digest; None when it is gone), named in the answer
    and compared: a warning when the workloads differ."""
    sa, sb = settings_of(job_a, res_a), settings_of(job_b, res_b)
    diff = [
        {"key": k, "a": sa.get(k), "b": sb.get(k)}
        for k in sorted(set(sa) | set(sb))
        if sa.get(k) != sb.get(k)
    ]
    ma, mb = res_a.get("summary", {}), res_b.get("summary", {})
    rows = []
    for metric in LATENCIES:
        label, unit = _label(metric)
        for p in PERCENTILES:
            rows.append(
                _row(
                    f"{metric}.{p}",
                    f"{label} {p}",
                    unit,
                    ma.get(metric, {}).get(p),
                    mb.get(metric, {}).get(p),
                    False,
                )
            )
    for metric, higher_better in FIGURES.items():
        label, unit = _label(metric)
        rows.append(_row(metric, label, unit, ma.get(metric), mb.get(metric), higher_better))
    return {
        "a": job_a,
        "b": job_b,
        "traces": {"a": traces[0], "b": traces[1]},
        "workload_warning": workload_warning(list(traces)),
        "config_diff": diff,
        "metrics": rows,
    }


def _row(key: str, label: str, unit: str | None, a: Any, b: Any, higher_better: bool) -> dict[str, Any]:
    delta = pct = ratio = band = None
    better = None
    if isinstance(a, int | float) and isinstance(b, int | float):
        delta = b - a
        pct = (delta / a) if a else None
        ratio = (b / a) if a > 0 and b >= 0 else None  # B/A: read "x118,762", not "+11,876,002 %"
        gap = ab_verdict(key, float(a), float(b), higher_is_better=higher_better)
        band = None if gap is None else gap.band
        # inside the step-time model's error for this metric: neither run is "better"
        better = None if delta == 0 or gap is None or gap.equivalent else gap.winner == "b"
    return {
        "key": key,
        "label": label,
        "unit": unit,
        "a": a,
        "b": b,
        "delta": delta,
        "pct": pct,
        "ratio": ratio,
        "better": better,
        "noise_band": band,
    }


def legend_name(letter: str, job: dict[str, Any], trace: dict[str, Any] | None) -> str:
    """How an overlay's legend names a run: its letter, title and trace (name and digest); a
    title that starts with the trace's name (the page's own titles do) is not followed by it again."""
    title = str(job.get("title") or job.get("id", ""))[:60]
    if trace is None:
        return f"{letter}: {title} · unknown trace"
    digest = short_digest(trace["digest"])
    if title.startswith(f"{trace['name']}:"):
        return f"{letter}: {title} ({digest})"
    return f"{letter}: {title} · {trace['name']} ({digest})"


def simulation_section(result: dict[str, Any]) -> Section | None:
    """The stored simulation view of a run's result (its histograms and series)."""
    for s in result.get("sections", []):
        if s.get("key") == "simulation":
            return Section.model_validate(s)
    return None


def overlay_sections(names: list[str], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs' latency distributions and time series overlaid (``views.compare.overlay_view``)."""
    from servesim.views.compare import overlay_view

    views = [simulation_section(r) for r in results]
    runs = [(n, v) for n, v in zip(names, views, strict=True) if v is not None]
    return [overlay_view(runs).model_dump(mode="json")] if len(runs) == len(names) else []


def study_sections(kind: str, names: list[str], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sweeps (saturate) or studies (tune) compared (``views.compare_studies``)."""
    from servesim.services.tune import SaturationReport, TuneResult
    from servesim.views.compare_studies import study_compare_view, sweep_compare_view

    if kind == "saturate":
        reps = [SaturationReport.model_validate(r["report"]) for r in results]
        return [sweep_compare_view(list(zip(names, reps, strict=True))).model_dump(mode="json")]
    studies = [TuneResult.model_validate({**r["study"], "trials": r.get("trials", [])}) for r in results]
    return [study_compare_view(list(zip(names, studies, strict=True))).model_dump(mode="json")]


#: The kinds of run a comparison takes (both runs of one kind).
COMPARABLE = ("simulate", "saturate", "tune")
