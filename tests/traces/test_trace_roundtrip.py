"""Writer -> reader round trips are lossless; chunked reading equals a whole read; writes are atomic."""

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.bounds import MAX_TOKENS
from servesim.traces import (
    FixedLength,
    GeneratorSpec,
    PrefixSpec,
    Trace,
    generate_trace,
    load_trace,
    write_trace,
)
from servesim.traces.frame import check_frame

#: Token counts up to the readers' bound (servesim.bounds: a larger row is dropped with a note,
#: tests/traces test that), the domain over which a round trip must be lossless.
INT64 = st.integers(-(2**63), 2**63 - 1)
# Any text a user might put in an id or label: quotes, commas, CR/LF, unicode; not surrogates or NUL.
TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=8)
FLOAT = st.floats(min_value=0.0, max_value=1e15, allow_nan=False, allow_infinity=False)
SLO = st.none() | st.floats(min_value=0.0, exclude_min=True, max_value=1e12, allow_infinity=False)


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    block = draw(st.sampled_from([1, 16, 512]))
    n = draw(st.integers(0, 8))
    ids = draw(st.lists(TEXT, min_size=n, max_size=n, unique=True))
    records: list[dict[str, Any]] = []
    for rid in ids:
        sharing = draw(st.sampled_from(["none", "group", "hash"]))
        rec: dict[str, Any] = {
            "req_id": rid,
            "arrival_time_s": draw(FLOAT),
            "output_len": draw(st.integers(1, MAX_TOKENS)),
            "priority": draw(INT64),
            "tenant": draw(st.none() | TEXT),
            "sla_ttft_ms": draw(SLO),
            "sla_e2e_ms": draw(SLO),
        }
        if sharing == "hash":
            hashes = draw(st.lists(INT64, max_size=5))
            rec["hash_ids"] = hashes
            rec["prompt_len"] = draw(st.integers(max(1, (len(hashes) - 1) * block + 1), MAX_TOKENS))
        else:
            rec["prompt_len"] = draw(st.integers(1, MAX_TOKENS))
        if sharing == "group":
            rec["prefix_group"] = draw(TEXT)
            rec["prefix_len"] = draw(st.integers(0, rec["prompt_len"]))
        records.append(rec)
    uses_hashes = any("hash_ids" in r for r in records)
    return Trace.from_records(records, hash_block_size=block if uses_hashes else None)


def assert_same(a: Trace, b: Trace) -> None:
    check_frame(b.df)
    pd.testing.assert_frame_equal(a.df, b.df, check_exact=True)
    # assert_frame_equal treats 0.0 == -0.0 and compares lists loosely; be explicit.
    assert a.df["arrival_time_s"].tolist() == b.df["arrival_time_s"].tolist()
    assert a.df["hash_ids"].tolist() == b.df["hash_ids"].tolist()
    assert b.hash_block_size == a.hash_block_size
    assert b.provenance.num_dropped == 0 and not b.provenance.reordered


RT_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl", "t.json", "t.parquet", "t.csv.gz", "t.jsonl.gz"])
@RT_SETTINGS
@given(trace=traces())
def test_round_trip_is_lossless(tmp_path: Path, name: str, trace: Trace) -> None:
    path = write_trace(trace, tmp_path / name)
    # CSV/JSONL cannot store the block size; JSON and Parquet do.
    needs_block = name.startswith(("t.csv", "t.jsonl"))
    back = load_trace(path, hash_block_size=trace.hash_block_size if needs_block else None)
    assert_same(trace, back)
    fmt = {
        "t.csv": "native-csv",
        "t.jsonl": "native-jsonl",
        "t.json": "native-json",
        "t.parquet": "native-parquet",
    }
    assert back.provenance.format == fmt[name.removesuffix(".gz")]


def test_round_trip_of_awkward_text_by_hand(tmp_path: Path) -> None:
    records = [
        {"req_id": rid, "arrival_time_s": i * 0.1, "prompt_len": 5, "output_len": 3, "tenant": rid}
        for i, rid in enumerate(
            ["a,b", 'q"uote', "line\nbreak", "cr\ronly", " padded ", "NA", "nan", "007", "é"]
        )
    ]
    trace = Trace.from_records(records)
    for name in ("t.csv", "t.jsonl", "t.json", "t.parquet"):
        assert_same(trace, load_trace(write_trace(trace, tmp_path / name)))


def test_float_precision_is_exact(tmp_path: Path) -> None:
    values = [0.1, 1 / 3, 5e-324, 2.2250738585072014e-308, 123456789.12345679, 1e15 - 0.125, math.pi]
    records = [
        {"req_id": str(i), "arrival_time_s": v, "prompt_len": 1, "output_len": 1, "sla_ttft_ms": v or None}
        for i, v in enumerate(sorted(values))
    ]
    trace = Trace.from_records(records)
    for name in ("t.csv", "t.jsonl", "t.json", "t.parquet"):
        back = load_trace(write_trace(trace, tmp_path / name))
        assert back.df["arrival_time_s"].tolist() == sorted(values)


def _sample_trace(n: int = 1000) -> Trace:
    spec = GeneratorSpec(
        num_requests=n,
        seed=7,
        prefix=PrefixSpec(num_groups=5, prefix_len=FixedLength(value=300), fraction=0.5),
    )
    trace = generate_trace(spec)
    trace.df["tenant"] = pd.Series(np.where(np.arange(n) % 3 == 0, "t-a", None), dtype=object)
    return trace


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl", "t.json", "t.parquet"])
def test_chunked_read_equals_whole_read(tmp_path: Path, name: str) -> None:
    trace = _sample_trace()
    path = write_trace(trace, tmp_path / name)
    whole = load_trace(path)
    chunked = load_trace(path, chunk_rows=37)
    pd.testing.assert_frame_equal(whole.df, chunked.df, check_exact=True)
    pd.testing.assert_frame_equal(whole.df, trace.df, check_exact=True)
    assert whole.provenance.rows_read == chunked.provenance.rows_read == 1000


def test_chunked_read_reports_the_same_drops(tmp_path: Path) -> None:
    lines = [f"r{i % 40},{(i * 7) % 13},{(i % 11) - 1},3" for i in range(100)]
    path = tmp_path / "t.csv"
    path.write_text("req_id,arrival_time_s,prompt_len,output_len\n" + "\n".join(lines) + "\n")
    a, b = load_trace(path), load_trace(path, chunk_rows=3)
    pd.testing.assert_frame_equal(a.df, b.df, check_exact=True)
    assert a.provenance.dropped == b.provenance.dropped
    assert a.provenance.num_dropped == b.provenance.num_dropped > 0


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "out" / "t.jsonl"
    write_trace(_sample_trace(50), target)
    before = target.read_bytes()
    bad = _sample_trace(50)
    bad.df.loc[30, "tenant"] = object()  # not JSON: the writer fails after 30 rows are written
    with pytest.raises(TypeError):
        write_trace(bad, target)
    assert target.read_bytes() == before  # the old file is untouched
    assert sorted(p.name for p in target.parent.iterdir()) == ["t.jsonl"]  # no temp file left


def test_written_file_permissions_follow_umask(tmp_path: Path) -> None:
    path = write_trace(_sample_trace(5), tmp_path / "t.json")
    assert path.stat().st_mode & 0o044  # readable by others (mkstemp alone would give 0600)


def test_unknown_output_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot tell the output format"):
        write_trace(_sample_trace(5), tmp_path / "t.txt")
    with pytest.raises(ValueError, match="Parquet compresses internally"):
        write_trace(_sample_trace(5), tmp_path / "t.parquet.gz")
    path = write_trace(_sample_trace(5), tmp_path / "t.txt", format="jsonl")
    assert len(load_trace(path, format="jsonl")) == 5
