"""inspect_trace: hand-checked statistics, empty traces, prefix reuse against brute force."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_oracles import group_reuse_oracle, reuse_oracle
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.traces import Trace, inspect_trace, load_trace, write_trace

runner = CliRunner()


def rec(i: int, t: float, prompt: int = 10, output: int = 5, **kw: object) -> dict[str, object]:
    return {"req_id": f"r{i}", "arrival_time_s": t, "prompt_len": prompt, "output_len": output, **kw}


def test_empty_trace_is_all_zeros() -> None:
    stats = inspect_trace(Trace.empty())
    assert stats.num_requests == 0 and stats.time_span_s == 0 and stats.mean_rate_rps == 0
    assert stats.iat_cv == 0 and stats.dispersion_1s == 0 and stats.peak_1s == 0
    assert stats.prompt.mean == 0 and stats.output.max == 0
    assert stats.prefix_reuse_ratio is None and stats.num_tenants == 0


def test_single_request_and_burst() -> None:
    one = inspect_trace(Trace.from_records([rec(0, 4.0)]))
    assert (one.num_requests, one.time_span_s, one.mean_rate_rps, one.iat_cv) == (1, 0.0, 0.0, 0.0)
    burst = inspect_trace(Trace.from_records([rec(i, 0.0) for i in range(5)]))
    assert (burst.mean_rate_rps, burst.iat_cv, burst.peak_1s) == (0.0, 0.0, 5)


def test_hand_computed_numbers() -> None:
    trace = Trace.from_records(
        [rec(0, 0.0, 100, 1, tenant="a"), rec(1, 1.0, 200, 2, tenant="b"), rec(2, 3.0, 300, 3, tenant="a")]
    )
    s = inspect_trace(trace)
    assert s.time_span_s == 3.0
    assert s.mean_rate_rps == pytest.approx(2 / 3)
    assert s.iat_cv == pytest.approx(0.5 / 1.5)  # gaps 1, 2
    assert s.dispersion_1s == pytest.approx(0.1875 / 0.75)  # counts per second 1, 1, 0, 1
    assert s.peak_1s == 1
    assert (s.prompt.mean, s.prompt.p50, s.prompt.min, s.prompt.max, s.prompt.total) == (
        200,
        200,
        100,
        300,
        600,
    )
    assert s.prompt.p90 == pytest.approx(280) and s.prompt.p99 == pytest.approx(298)
    assert s.num_tenants == 2 and s.num_prefix_groups == 0


def test_group_reuse_by_hand() -> None:
    trace = Trace.from_records(
        [
            rec(0, 0, 200, prefix_group="g", prefix_len=100),
            rec(1, 1, 60, prefix_group="g", prefix_len=50),
            rec(2, 2, 300, prefix_group="g", prefix_len=100),
            rec(3, 3, 20, prefix_group="h", prefix_len=10),
        ]
    )
    s = inspect_trace(trace)
    assert s.prefix_reuse_from == "prefix_group" and s.num_prefix_groups == 2
    assert s.prefix_reuse_ratio == pytest.approx((50 + 100) / (200 + 60 + 300 + 20))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    data=st.lists(
        st.tuples(st.lists(st.integers(0, 3), max_size=6), st.integers(1, 100)), min_size=1, max_size=12
    ),
    block=st.sampled_from([1, 4, 16]),
)
def test_hash_reuse_matches_brute_force(data: list[tuple[list[int], int]], block: int) -> None:
    records = []
    for i, (ids, extra) in enumerate(data):
        prompt = max(1, (len(ids) - 1) * block + 1) + extra % block  # ids never exceed the blocks
        records.append(rec(i, float(i), prompt, hash_ids=ids))
    trace = Trace.from_records(records, hash_block_size=block)
    expected = reuse_oracle(trace.df["hash_ids"].tolist(), trace.df["prompt_len"].tolist(), block)
    assert inspect_trace(trace).prefix_reuse_ratio == pytest.approx(expected)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    data=st.lists(
        st.tuples(st.none() | st.sampled_from(["a", "b", "c"]), st.integers(0, 50), st.integers(1, 60)),
        min_size=1,
        max_size=15,
    )
)
def test_group_reuse_matches_brute_force(data: list[tuple[str | None, int, int]]) -> None:
    records = [
        rec(i, float(i), plen + extra, prefix_group=g, prefix_len=plen if g else 0)
        for i, (g, plen, extra) in enumerate(data)
    ]
    trace = Trace.from_records(records)
    df = trace.df
    expected = group_reuse_oracle(
        df["prefix_group"].tolist(), df["prefix_len"].tolist(), df["prompt_len"].tolist()
    )
    got = inspect_trace(trace).prefix_reuse_ratio
    if any(g for g, _, _ in data):
        assert got == pytest.approx(expected)
    else:
        assert got is None


def test_cli_json_is_deterministic_and_sorted(tmp_path: Path) -> None:
    trace = Trace.from_records([rec(i, i * 0.5, tenant="t") for i in range(20)])
    path = write_trace(trace, tmp_path / "t.parquet")
    first = runner.invoke(app, ["trace", "inspect", str(path), "--json"])
    second = runner.invoke(app, ["trace", "inspect", str(path), "--json"])
    assert first.exit_code == 0 and first.stdout == second.stdout
    data = json.loads(first.stdout)
    assert list(data) == sorted(data)
    assert data["num_requests"] == 20 and data["num_tenants"] == 1 and data["format"] == "native-parquet"
    assert (data.pop("kind"), data.pop("schema_version")) == ("trace", 1)
    assert data == inspect_trace(load_trace(path)).model_dump(mode="json")
