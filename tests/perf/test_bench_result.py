"""vllm bench serve result files: field-level validation and the measured per-request samples."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.perf.bench_io import bench_requests, bench_samples, parse_bench_result
from servesim.perf.errors import BenchResultError

DETAILED = {
    "num_prompts": 3,
    "request_rate": "inf",
    "mean_ttft_ms": 50.0,
    "p99_ttft_ms": 70.0,
    "input_lens": [100, 200, 300],
    "output_lens": [3, 1, 0],
    "ttfts": [0.05, 0.04, 0.0],
    "itls": [[0.01, 0.02], [], []],
    "latencies": [0.08, 0.04, 0.0],
    "errors": ["", "", "timeout"],
}


def test_samples_follow_vllm_bench() -> None:
    r = parse_bench_result(DETAILED, "b.json")
    assert r.detailed and r.rate == float("inf")
    assert r.stats() == {"ttft_ms": {"mean": 50.0, "p99": 70.0}}
    s = bench_samples(r)
    assert s["ttft_ms"].tolist() == pytest.approx([50.0, 40.0])  # the failed request is left out
    assert s["e2e_ms"].tolist() == pytest.approx([80.0, 40.0])
    assert s["tpot_ms"].tolist() == pytest.approx([15.0])  # (80 - 50) / (3 - 1); one token: no TPOT
    assert s["itl_ms"].tolist() == pytest.approx([10.0, 20.0])
    rs = bench_requests(r, "b.json")
    assert rs.prompt_len.tolist() == [100, 200, 300] and np.all(rs.scheduled == 0)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"num_prompts": "many"}, "num_prompts"),
        ({"p99_ttft_ms": float("nan")}, "p99_ttft_ms"),
        ({"mean_e2el_ms": -3}, "mean_e2el_ms"),
        ({"mean_itl_ms": True}, "mean_itl_ms"),
        ({**DETAILED, "ttfts": [0.1, 0.2]}, "ttfts"),
        ({"itls": [[0.1, -0.2]]}, "itls"),
        ({"request_rate": "soon"}, "request_rate"),
        ({"burstiness": 0}, "burstiness"),
    ],
)
def test_each_bad_field_is_named(data: dict[str, object], field: str) -> None:
    with pytest.raises(BenchResultError) as e:
        parse_bench_result(data, "b.json")
    assert field in [x["field"] for x in e.value.errors]
    assert str(e.value).startswith("b.json: ")


def test_not_an_object() -> None:
    with pytest.raises(BenchResultError, match="JSON object, not a list"):
        parse_bench_result([1], "b.json")
