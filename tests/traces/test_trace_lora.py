"""The optional ``lora`` column (a request's LoRA adapter) and the generator's adapters.

A trace without adapters writes the same files as before the column existed; one with adapters
keeps every name (any text) through every native format; the generator draws adapters on a
stream of their own, seeded, with the stated Zipf popularity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.traces import GeneratorSpec, LoRASpec, Trace, generate_trace, load_trace, write_trace
from servesim.traces.frame import check_frame

NAMES = st.none() | st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=8
).filter(lambda s: s.strip() == s and s != "")
FORMATS = ["t.csv", "t.jsonl", "t.json", "t.parquet", "t.csv.gz"]


@pytest.mark.parametrize("name", FORMATS)
@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(adapters=st.lists(NAMES, min_size=1, max_size=6))
def test_adapter_names_survive_every_native_format(
    tmp_path: Path, name: str, adapters: list[str | None]
) -> None:
    records = [
        {"req_id": f"q{i}", "arrival_time_s": i * 0.5, "prompt_len": 5, "output_len": 2}
        | ({"lora": a} if a is not None else {})
        for i, a in enumerate(adapters)
    ]
    trace = Trace.from_records(records)
    back = load_trace(write_trace(trace, tmp_path / name))
    check_frame(back.df)
    assert back.df["lora"].tolist() == adapters


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl", "t.json"])
def test_a_trace_without_adapters_writes_no_lora_column(tmp_path: Path, name: str) -> None:
    trace = generate_trace(GeneratorSpec(num_requests=20, seed=1))
    text = write_trace(trace, tmp_path / name).read_text()
    assert "lora" not in text
    assert "lora" not in trace.provenance.generator  # the spec dumps as before too


def test_a_bad_adapter_name_drops_the_row_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"arrival_time_s": 0, "prompt_len": 3, "output_len": 1, "lora": [1]}\n'
        '{"arrival_time_s": 1, "prompt_len": 3, "output_len": 1, "lora": "ok"}\n'
    )
    back = load_trace(path)
    assert back.df["lora"].tolist() == ["ok"]
    (drop,) = back.provenance.dropped
    assert drop.row == 1 and drop.field == "lora"


def test_the_generator_draws_adapters_by_zipf_and_changes_nothing_else() -> None:
    base = GeneratorSpec(num_requests=20_000, seed=4)
    spec = base.model_copy(update={"lora": LoRASpec(num_adapters=5, zipf_s=1.0, fraction=0.75)})
    plain, with_lora = generate_trace(base), generate_trace(spec)
    assert with_lora.df.drop(columns="lora").equals(plain.df.drop(columns="lora"))
    assert generate_trace(spec).df["lora"].tolist() == with_lora.df["lora"].tolist()  # seeded
    names = with_lora.df["lora"]
    assert abs(names.notna().mean() - 0.75) < 0.02
    counts = names.value_counts()
    share = np.array([counts.get(f"lora-{i}", 0) for i in range(5)]) / names.notna().sum()
    want = (1 / np.arange(1, 6)) / (1 / np.arange(1, 6)).sum()  # P(i) ∝ 1/(i+1)
    assert np.abs(share - want).max() < 0.02
    assert with_lora.provenance.generator["lora"] == {"num_adapters": 5, "zipf_s": 1.0, "fraction": 0.75}
