"""Histograms of pooled samples (``shape.pooled_histogram``) binned a chunk at a time are the
histogram of the concatenated sample, field for field, whatever the chunk size; and a run's
whole ``simulate`` document (summary, ITL figures, views, records) is the same bytes with tiny
chunks as with the default ones, so the memory-saving paths cannot move an output byte."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

import servesim
from servesim.engine import pooled
from servesim.report.documents import simulation_document
from servesim.views import shape
from servesim.views.shape import histogram, pooled_histogram

values = st.lists(st.one_of(st.floats(-1e3, 1e3), st.just(float("nan")), st.just(float("inf"))), max_size=60)


@settings(max_examples=examples(150), deadline=None)
@given(
    values,
    values,
    st.booleans(),
    st.sampled_from([1, 2, 5, 1 << 20]),
    st.integers(1, 12),
    st.data(),
)
def test_pooled_histogram_is_the_histogram_of_the_concatenation(
    a: list[float], b: list[float], weighted: bool, chunk: int, bins: int, data: st.DataObject
) -> None:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    wa = np.asarray(data.draw(st.lists(st.integers(0, 4), min_size=len(a), max_size=len(a))), dtype=np.int64)
    parts: list[shape.Part] = [(va, wa if weighted else None, 1e3), (vb, None, 1e3)]
    expected = histogram(
        "k",
        "t",
        np.concatenate([va * 1e3, vb * 1e3]),
        "ms",
        bins=bins,
        weights=np.concatenate([wa, np.ones(len(b))]) if weighted else None,
        slo=5.0,
        percentiles=(1.0, 2.0, 3.0),
        label="x",
        count_label="token gaps",
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shape, "CHUNK", chunk)
        got = pooled_histogram(
            "k",
            "t",
            parts,
            "ms",
            bins=bins,
            slo=5.0,
            percentiles=(1.0, 2.0, 3.0),
            label="x",
            count_label="token gaps",
        )
    assert got == expected


def test_a_fixed_range_is_kept() -> None:
    v = np.array([1.0, 2.0, 9.0])
    got = pooled_histogram("k", "t", [(v, None, None)], "tokens", bins=4, value_range=(0.0, 10.0))
    assert got == histogram("k", "t", v, "tokens", bins=4, value_range=(0.0, 10.0))
    assert got.edges[0] == 0.0 and got.edges[-1] == 10.0 and got.counts == [2, 0, 0, 1]


def _document(chunk: int | None) -> bytes:
    trace = servesim.open_trace("bursty", num_requests=400, seed=7)
    config = servesim.EngineConfig(num_gpu_blocks=600, max_num_seqs=24, max_num_batched_tokens=1024)
    with pytest.MonkeyPatch.context() as mp:
        if chunk is not None:
            mp.setattr(shape, "CHUNK", chunk)
            mp.setattr(pooled, "CHUNK", chunk)
        result = servesim.simulate(trace, config)
        doc = simulation_document(result, trace=trace, title="t", include_requests=True)
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY, default=str)


def test_the_document_does_not_depend_on_the_chunk_size() -> None:
    whole = _document(None)
    assert b'"itl_ms"' in whole and b'"num_tokens"' in whole  # the chunked figures are in it
    assert _document(3) == whole
    assert _document(64) == whole


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 100), st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=80),
    st.sampled_from([1, 4, 1 << 20]),
    st.sampled_from(["sum", "mean"]),
    st.integers(1, 9),
)
def test_integer_series_binned_and_down_sampled_as_their_floats(
    rows: list[tuple[float, int]], chunk: int, how: str, bins: int
) -> None:
    """Integer counts take the chunked, copy-free paths; their float64 copies the one-pass ones
    (the paths before): the bins and the points are the same."""
    t = np.sort(np.asarray([a for a, _ in rows], dtype=np.float64))
    y = np.asarray([b for _, b in rows], dtype=np.int32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(shape, "CHUNK", chunk)
        x_int, v_int = shape.time_binned(t, y, 0.0, 100.0, bins, how=how)
    x_flt, v_flt = shape.time_binned(t, y.astype(np.float64), 0.0, 100.0, bins, how=how)
    assert x_int.tolist() == x_flt.tolist() and v_int.tolist() == v_flt.tolist()
    assert shape.downsample(t, y, max_points=4) == shape.downsample(t, y.astype(np.float64), max_points=4)
