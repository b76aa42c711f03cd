"""A Prometheus scrape of vLLM's ``/metrics`` as a calibration case: what a running deployment
already records, reduced to the summary ``vllm bench serve`` writes, then re-simulated as one.

Why: most teams never ran ``vllm bench serve`` against production, but they scrape ``/metrics``.
Between two scrapes (or since the server started, for one) vLLM's counters and histograms say
how many requests finished (``vllm:request_success``), their prompt and output tokens
(``vllm:prompt_tokens`` / ``vllm:generation_tokens``) and the sums and counts of TTFT,
inter-token latency, time per output token and E2E latency (``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds``, ``vllm:request_time_per_output_token_seconds``,
``vllm:e2e_request_latency_seconds``). Their means are the targets; the window the caller states
(``window_s``) gives the arrival rate. What a scrape cannot say is assumed and stated: Poisson
arrivals (``burstiness`` 1 unless given), each request at the mean prompt and output length, no
prefix sharing. Every label set (engines, models) is summed: one deployment per scrape.
``vllm:cache_config_info`` (vLLM's own gauge) supplies ``num_gpu_blocks`` when it is there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from servesim.perf.bench_io import BenchServeResult
from servesim.perf.errors import BenchResultError

#: vLLM histogram (base name) -> the ``vllm bench serve`` mean it becomes (ms).
HISTOGRAM_MEANS = {
    "vllm:time_to_first_token_seconds": "mean_ttft_ms",
    "vllm:inter_token_latency_seconds": "mean_itl_ms",
    "vllm:request_time_per_output_token_seconds": "mean_tpot_ms",
    "vllm:e2e_request_latency_seconds": "mean_e2el_ms",
}
COUNTERS = ("vllm:request_success", "vllm:prompt_tokens", "vllm:generation_tokens")


@dataclass
class Scrape:
    """One scrape's totals: every sample's value summed over its label sets."""

    source: str
    totals: dict[str, float] = field(default_factory=dict)
    num_gpu_blocks: int | None = None

    def get(self, name: str) -> float:
        return self.totals.get(name, 0.0)


def _sample_key(sample: str) -> str:
    """``vllm:request_success_total`` -> ``vllm:request_success`` (a counter, whether or not the
    exposition typed it); histograms keep ``_sum``/``_count``."""
    return sample.removesuffix("_total")


def parse_scrape(text: str, source: str) -> Scrape:
    """The totals of a Prometheus text exposition (what ``curl host:8000/metrics`` prints)."""
    from prometheus_client.parser import text_string_to_metric_families

    out = Scrape(source)
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if fam.name == "vllm:cache_config_info" and "num_gpu_blocks" in s.labels:
                    out.num_gpu_blocks = _whole(s.labels["num_gpu_blocks"])
                    continue
                if s.name.endswith(("_bucket", "_created")) or not math.isfinite(s.value):
                    continue
                key = _sample_key(s.name)
                out.totals[key] = out.totals.get(key, 0.0) + float(s.value)
    except (ValueError, TypeError, IndexError) as e:
        raise BenchResultError(
            f"{source}: not a Prometheus text exposition: {e}", [{"field": None, "reason": str(e)}]
        ) from None
    if not any(k.startswith("vllm:") for k in out.totals):
        raise BenchResultError(
            f"{source}: no vllm: metric (is this a scrape of vLLM's /metrics?)",
            [{"field": None, "reason": "no sample whose name starts with vllm:"}],
        )
    return out


def _whole(value: str) -> int | None:
    try:
        n = int(value)
    except ValueError:
        return None
    return n if n > 0 else None


def read_scrape(path: str | Path) -> Scrape:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BenchResultError(
            f"{p}: cannot read the scrape: {e}", [{"field": None, "reason": str(e)}]
        ) from e
    return parse_scrape(text, str(p))


def scrape_summary(
    after: Scrape, before: Scrape | None, window_s: float, burstiness: float = 1.0
) -> BenchServeResult:
    """What ``vllm bench serve`` would have written for the requests that finished between
    ``before`` (None: the server's start) and ``after``, sent over ``window_s`` seconds."""
    where = after.source if before is None else f"{before.source} -> {after.source}"
    if not (math.isfinite(window_s) and window_s > 0):
        raise BenchResultError(
            f"{where}: the window must be a positive number of seconds, not {window_s}",
            [{"field": "window_s", "reason": "the span over which the scraped requests arrived"}],
        )

    def delta(name: str) -> float:
        d = after.get(name) - (before.get(name) if before is not None else 0.0)
        if d < 0:
            raise BenchResultError(
                f"{where}: {name} fell from {before.get(name) if before else 0:g} to {after.get(name):g} "
                "(the server restarted between the scrapes, or they are in the wrong order)",
                [{"field": name, "reason": "a counter went down"}],
            )
        return d

    missing = [c for c in COUNTERS if c not in after.totals]
    if missing:
        raise BenchResultError(
            f"{where}: the scrape has no {', '.join(missing)}",
            [{"field": m, "reason": "missing from the scrape"} for m in missing],
        )
    done = round(delta("vllm:request_success"))
    if done <= 0:
        raise BenchResultError(
            f"{where}: no request finished in the window (vllm:request_success did not grow)",
            [{"field": "vllm:request_success", "reason": "0 requests: nothing to fit"}],
        )
    means: dict[str, float] = {}
    for hist, mean in HISTOGRAM_MEANS.items():
        n, total = delta(f"{hist}_count"), delta(f"{hist}_sum")
        if n > 0:
            means[mean] = 1e3 * total / n
    if not means:
        raise BenchResultError(
            f"{where}: no latency histogram ({', '.join(HISTOGRAM_MEANS)}) grew in the window",
            [{"field": h, "reason": "no observations"} for h in HISTOGRAM_MEANS],
        )
    return BenchServeResult.model_validate(
        {
            "num_prompts": done,
            "completed": done,
            "duration": window_s,
            "request_rate": done / window_s,
            "burstiness": burstiness,
            "total_input_tokens": round(delta("vllm:prompt_tokens")),
            "total_output_tokens": round(delta("vllm:generation_tokens")),
            **means,
        }
    )
