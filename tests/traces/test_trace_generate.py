"""Synthetic traces: requested rate / mean / CV within sampling error, reproducible, presets, grammar.

Statistical bounds are 5 standard errors computed from the model's own moments (delta method
for the CV, the MMPP index of dispersion for on/off traffic). Hypothesis runs derandomized, so
every run checks the same cases.
"""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.traces import (
    PRESETS,
    BurstArrivals,
    ConstantArrivals,
    DiurnalArrivals,
    FixedLength,
    GammaArrivals,
    GeneratorSpec,
    LogNormalLength,
    OnOffArrivals,
    PoissonArrivals,
    PrefixSpec,
    RampArrivals,
    ResampledLength,
    TraceError,
    UniformLength,
    generate_trace,
    inspect_trace,
    load_trace,
    parse_arrival_name,
    preset_spec,
)
from servesim.traces.arrivals import sample_arrivals, stream_rng
from servesim.traces.frame import check_frame
from servesim.traces.lengths import sample_parametric

STATS = settings(max_examples=25, deadline=None, derandomize=True)
Z = 5.0  # standard errors allowed


def gamma_cv_se(k: float, n: int) -> float:
    """Delta-method standard error of the sample CV of n Gamma(k, 1) draws."""
    mean, var = k, k
    mu3, mu4 = 2 * k, 3 * k * k + 6 * k
    g_m = -math.sqrt(var) / mean**2
    g_v = 1 / (2 * mean * math.sqrt(var))
    return math.sqrt((g_m**2 * var + g_v**2 * (mu4 - var**2) + 2 * g_m * g_v * mu3) / n)


def arrivals(model: object, n: int, seed: int = 0) -> np.ndarray:
    trace = generate_trace(GeneratorSpec(num_requests=n, seed=seed, arrival=model))
    check_frame(trace.df)
    return trace.df["arrival_time_s"].to_numpy()


@STATS
@given(
    rate=st.floats(0.5, 500),
    k=st.floats(0.25, 4.0),
    rescale=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_gamma_rate_and_cv(rate: float, k: float, rescale: bool, seed: int) -> None:
    n = 20_000
    t = arrivals(GammaArrivals(rate=rate, burstiness=k, rescale=rescale), n, seed)
    gaps = np.diff(t)
    cv = gaps.std() / gaps.mean()
    assert abs(cv - 1 / math.sqrt(k)) <= Z * gamma_cv_se(k, n - 1)
    measured_rate = (n - 1) / (t[-1] - t[0])
    assert abs(measured_rate / rate - 1) <= Z / math.sqrt(k * n)
    if rescale:  # vLLM: the last of N requests is sent at exactly N / rate
        assert t[-1] == n / rate


def test_rescale_matches_vllm_definition() -> None:
    n, rate, k = 1000, 10.0, 0.5
    raw = np.cumsum(stream_rng(3, "arrivals").gamma(shape=k, scale=1 / (rate * k), size=n))
    expected = raw * (n / rate / raw[-1])
    got = sample_arrivals(GammaArrivals(rate=rate, burstiness=k), n, stream_rng(3, "arrivals"))
    np.testing.assert_allclose(got, expected, rtol=1e-15)
    plain = sample_arrivals(
        GammaArrivals(rate=rate, burstiness=k, rescale=False), n, stream_rng(3, "arrivals")
    )
    np.testing.assert_array_equal(plain, raw)
    assert got[-1] == 100.0 and plain[-1] != 100.0


@STATS
@given(rate=st.floats(1, 200), seed=st.integers(0, 2**32))
def test_poisson_is_gamma_one(rate: float, seed: int) -> None:
    n = 20_000
    t = arrivals(PoissonArrivals(rate=rate, rescale=False), n, seed)
    gaps = np.diff(t)
    assert abs(gaps.std() / gaps.mean() - 1) <= Z * gamma_cv_se(1.0, n - 1)
    assert abs(gaps.mean() * rate - 1) <= Z / math.sqrt(n)
    a = sample_arrivals(PoissonArrivals(rate=rate), 50, stream_rng(seed, "arrivals"))
    b = sample_arrivals(GammaArrivals(rate=rate, burstiness=1.0), 50, stream_rng(seed, "arrivals"))
    np.testing.assert_array_equal(a, b)


def test_constant_and_burst() -> None:
    np.testing.assert_array_equal(arrivals(ConstantArrivals(rate=4), 5), [0.25, 0.5, 0.75, 1.0, 1.25])
    np.testing.assert_array_equal(arrivals(BurstArrivals(), 5), np.zeros(5))
    stats = inspect_trace(generate_trace(GeneratorSpec(num_requests=100, arrival=ConstantArrivals(rate=20))))
    assert stats.mean_rate_rps == pytest.approx(20) and stats.iat_cv == pytest.approx(0, abs=1e-9)


def mmpp_dispersion(m: OnOffArrivals) -> float:
    """Asymptotic index of dispersion of counts of a 2-state MMPP."""
    r1, r2 = 1 / m.mean_on_s, 1 / m.mean_off_s  # rates of leaving on / off
    return 1 + 2 * (m.rate_on - m.rate_off) ** 2 * r1 * r2 / ((r1 + r2) ** 3 * m.mean_rate())


@settings(max_examples=10, deadline=None, derandomize=True)
@given(
    rate_on=st.floats(5, 50),
    rate_off=st.floats(0, 2),
    on=st.floats(1, 20),
    off=st.floats(1, 40),
    seed=st.integers(0, 2**32),
)
def test_onoff_mean_rate_and_burstiness(
    rate_on: float, rate_off: float, on: float, off: float, seed: int
) -> None:
    model = OnOffArrivals(rate_on=rate_on, rate_off=rate_off, mean_on_s=on, mean_off_s=off)
    n = 50_000
    t = arrivals(model, n, seed)
    disp = mmpp_dispersion(model)
    assert abs(n / t[-1] / model.mean_rate() - 1) <= Z * math.sqrt(disp / n)
    assert np.diff(t).std() / np.diff(t).mean() > 1  # burstier than Poisson


def test_ramp_follows_the_linear_rate() -> None:
    model = RampArrivals(rate_start=5, rate_end=45, duration_s=400)
    t = arrivals(model, 12_000, seed=1)
    for lo, hi in [(0, 100), (100, 200), (200, 300), (300, 400)]:
        expected = (hi - lo) * (model.rate_at(np.array([lo]))[0] + model.rate_at(np.array([hi]))[0]) / 2
        count = np.count_nonzero((t >= lo) & (t < hi))
        assert abs(count - expected) <= Z * math.sqrt(expected)
    after = t[t >= 400]  # then constant at rate_end
    assert abs(len(after) - 1 - 45 * (after[-1] - after[0])) <= Z * math.sqrt(len(after))


def test_ramp_to_zero_with_too_many_requests_is_an_error() -> None:
    with pytest.raises(ValueError, match="reaches rate 0"):
        arrivals(RampArrivals(rate_start=2, rate_end=0, duration_s=10), 1000)


def test_diurnal_follows_the_sine() -> None:
    model = DiurnalArrivals(mean_rate=20, amplitude=0.8, period_s=100)
    t = arrivals(model, 20_000, seed=2)
    periods = int(t[-1] // 100)
    inside = t < periods * 100
    full = np.count_nonzero(inside)
    assert abs(full - 20 * 100 * periods) <= Z * math.sqrt(20 * 100 * periods)
    # the first half of each period has the positive half of the sine: mean*P/2 + mean*A*P/pi
    expected_high = periods * (20 * 50 + 20 * 0.8 * 100 / math.pi)
    high = np.count_nonzero(inside & ((t % 100) < 50))
    assert abs(high - expected_high) <= Z * math.sqrt(expected_high)


@STATS
@given(mean=st.floats(20, 5000), sigma=st.floats(0.0, 1.0), seed=st.integers(0, 2**32))
def test_lognormal_mean(mean: float, sigma: float, seed: int) -> None:
    n = 20_000
    spec = GeneratorSpec(num_requests=n, seed=seed, prompt=LogNormalLength(mean=mean, sigma=sigma))
    x = generate_trace(spec).df["prompt_len"].to_numpy()
    sd = mean * math.sqrt(math.expm1(sigma**2))
    assert abs(x.mean() - mean) <= Z * sd / math.sqrt(n) + 0.5  # +0.5: rounding to integers
    if sigma > 0.1:  # the median of a log-normal is exp(mu)
        assert np.median(x) == pytest.approx(math.exp(math.log(mean) - sigma**2 / 2), rel=0.05)


def test_lognormal_clipping_and_uniform_and_fixed() -> None:
    spec = GeneratorSpec(
        num_requests=5000,
        prompt=LogNormalLength(mean=1000, sigma=1.5, min=100, max=2000),
        output=UniformLength(min=3, max=9),
    )
    df = generate_trace(spec).df
    assert df["prompt_len"].between(100, 2000).all()
    assert (df["prompt_len"] == 2000).any() and (df["prompt_len"] == 100).any()
    assert set(df["output_len"]) == set(range(3, 10))
    assert abs(df["output_len"].mean() - 6) <= Z * math.sqrt((7**2 - 1) / 12 / 5000)
    fixed = generate_trace(GeneratorSpec(num_requests=10, output=FixedLength(value=42))).df
    assert (fixed["output_len"] == 42).all()


def test_resample_keeps_pairs_from_the_source() -> None:
    spec = GeneratorSpec(
        num_requests=3000,
        prompt=ResampledLength(source="azure-code"),
        output=ResampledLength(source="azure-code"),
    )
    df = generate_trace(spec).df
    source = load_trace("azure-code").df
    pairs = set(zip(source["prompt_len"], source["output_len"], strict=True))
    assert all(p in pairs for p in zip(df["prompt_len"], df["output_len"], strict=True))
    # bootstrap of 3000 draws: the mean is within 5 standard errors of the source mean
    assert abs(df["prompt_len"].mean() - source["prompt_len"].mean()) <= Z * source[
        "prompt_len"
    ].std() / math.sqrt(3000)


def test_resample_from_vidur_length_only_file(fixtures: Path) -> None:
    path = str(fixtures / "vidur_arxiv_lengths_300.csv")
    spec = GeneratorSpec(
        num_requests=500, prompt=ResampledLength(source=path), output=ResampledLength(source=path)
    )
    df = generate_trace(spec).df
    source = pd.read_csv(path)
    assert set(df["prompt_len"]) <= set(source["num_prefill_tokens"])
    assert set(df["output_len"]) <= set(source["num_decode_tokens"])


def test_resample_from_a_bad_source_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        generate_trace(GeneratorSpec(prompt=ResampledLength(source=str(tmp_path / "missing.csv"))))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(
    groups=st.integers(1, 20),
    s=st.floats(0, 2),
    fraction=st.floats(0, 1),
    policy=st.sampled_from(["clip_prefix", "extend_prompt"]),
    seed=st.integers(0, 2**32),
)
def test_prefix_groups(groups: int, s: float, fraction: float, policy: str, seed: int) -> None:
    n = 5000
    prefix = PrefixSpec(
        num_groups=groups,
        prefix_len=UniformLength(min=50, max=3000),
        zipf_s=s,
        fraction=fraction,
        on_short_prompt=policy,
    )
    trace = generate_trace(GeneratorSpec(num_requests=n, seed=seed, prefix=prefix))
    check_frame(trace.df)
    df = trace.df
    users = df["prefix_group"].notna().to_numpy()
    assert abs(users.mean() - fraction) <= Z * math.sqrt(fraction * (1 - fraction) / n) + 1e-12
    assert (df.loc[~users, "prefix_len"] == 0).all()
    assert (df["prefix_len"] < df["prompt_len"]).all()  # at least one own token
    if users.sum() > 100:
        p0 = prefix.popularity()[0]
        share0 = (df.loc[users, "prefix_group"] == "group-0").mean()
        assert abs(share0 - p0) <= Z * math.sqrt(p0 * (1 - p0) / users.sum()) + 1e-12
    # Exact rule: group g's prefix is drawn once; short prompts clip it or are lengthened.
    group_len = sample_parametric(prefix.prefix_len, groups, stream_rng(seed, "prefix"))
    base = generate_trace(GeneratorSpec(num_requests=n, seed=seed)).df["prompt_len"].to_numpy()
    g = df.loc[users, "prefix_group"].str.removeprefix("group-").astype(int).to_numpy()
    if policy == "clip_prefix":
        np.testing.assert_array_equal(df["prompt_len"], base)  # lengths untouched
        np.testing.assert_array_equal(df.loc[users, "prefix_len"], np.minimum(group_len[g], base[users] - 1))
    else:
        np.testing.assert_array_equal(df.loc[users, "prefix_len"], group_len[g])
        np.testing.assert_array_equal(df.loc[users, "prompt_len"], np.maximum(base[users], group_len[g] + 1))


def test_prefix_reuse_is_reported() -> None:
    trace = generate_trace(preset_spec("prefix_heavy"))
    stats = inspect_trace(trace)
    assert stats.prefix_reuse_from == "prefix_group" and stats.num_prefix_groups == 8
    assert 0.2 < stats.prefix_reuse_ratio < 0.6


def test_same_seed_same_trace_different_seed_different_trace() -> None:
    spec = preset_spec("prefix_heavy")
    a, b = generate_trace(spec), generate_trace(spec)
    pd.testing.assert_frame_equal(a.df, b.df, check_exact=True)
    c = generate_trace(spec.model_copy(update={"seed": 1}))
    for col in ("arrival_time_s", "prompt_len", "output_len", "prefix_group"):
        assert not a.df[col].equals(c.df[col])


def test_streams_are_independent() -> None:
    """Changing the output model leaves arrivals and prompts exactly as they were."""
    a = generate_trace(GeneratorSpec(num_requests=500, seed=5))
    b = generate_trace(GeneratorSpec(num_requests=500, seed=5, output=UniformLength(min=1, max=10)))
    pd.testing.assert_series_equal(a.df["arrival_time_s"], b.df["arrival_time_s"])
    pd.testing.assert_series_equal(a.df["prompt_len"], b.df["prompt_len"])
    assert not a.df["output_len"].equals(b.df["output_len"])


def test_seed_json_arrivals_equal_the_generator(tmp_path: Path) -> None:
    path = tmp_path / "seed.json"
    reqs = ",".join(f'{{"req_id": "q{i}", "prompt_len": {10 + i}, "expected_out": 5}}' for i in range(300))
    path.write_text(f'{{"arrival_distribution": "poisson_100_rps", "requests": [{reqs}], "note": "x"}}')
    trace = load_trace(path, seed=9)
    gen = generate_trace(GeneratorSpec(num_requests=300, seed=9, arrival=PoissonArrivals(rate=100)))
    np.testing.assert_array_equal(trace.df["arrival_time_s"], gen.df["arrival_time_s"])
    assert trace.df["req_id"].tolist() == [f"q{i}" for i in range(300)]
    assert trace.df["output_len"].eq(5).all()
    assert trace.provenance.generator == {
        "arrival_distribution": "poisson_100_rps",
        "arrival_model": {"kind": "poisson", "rate": 100.0, "rescale": True},
        "seed": 9,
    }
    assert any("'note'" in n for n in trace.provenance.notes)
    assert not load_trace(path, seed=10).df["arrival_time_s"].equals(trace.df["arrival_time_s"])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("poisson_100_rps", PoissonArrivals(rate=100)),
        ("POISSON_0p5_RPS", PoissonArrivals(rate=0.5)),
        ("constant_2.5_rps", ConstantArrivals(rate=2.5)),
        ("gamma_10_rps_cv2", GammaArrivals(rate=10, burstiness=0.25)),
        ("gamma_10_rps_k4", GammaArrivals(rate=10, burstiness=4)),
        ("burst", BurstArrivals()),
        ("burst_empty", BurstArrivals()),
    ],
)
def test_arrival_grammar(name: str, expected: object) -> None:
    assert parse_arrival_name(name) == expected


@pytest.mark.parametrize("name", ["poisson_rps", "poisson_0_rps", "gamma_10_rps", "uniform_3_rps", "bursty"])
def test_arrival_grammar_rejects(name: str) -> None:
    with pytest.raises(ValueError, match="poisson_<rate>_rps"):
        parse_arrival_name(name)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_generates(name: str) -> None:
    spec = preset_spec(name)
    trace = generate_trace(spec)
    check_frame(trace.df)
    assert len(trace) == spec.num_requests
    assert trace.provenance.format == "synthetic" and trace.provenance.generator == spec.model_dump(
        mode="json"
    )


def test_named_presets() -> None:
    default = preset_spec("default")
    assert default.num_requests == 1000 and default.arrival == PoissonArrivals(rate=10)
    assert default.prompt == LogNormalLength(mean=1200, sigma=0.6, max=8192)
    assert default.output == LogNormalLength(mean=150, sigma=0.8, max=2048)
    assert len(generate_trace(preset_spec("burst_empty"))) == 0
    assert preset_spec("gamma_7_rps_cv3").arrival == GammaArrivals(rate=7, burstiness=1 / 9)
    with pytest.raises(ValueError, match="unknown preset"):
        preset_spec("nope")
