"""The GPU rows against the datasheets they cite: dense (not sparse) tensor peaks, transcribed as the
source says them, and the ratios the datasheets satisfy between formats (a row that took a sparse
figure for one format and a dense one for another breaks them)."""

from __future__ import annotations

import re

import pytest

from servesim.perf import load_catalog

GPUS = load_catalog().gpus
FLOPS = ("bf16_flops", "fp8_flops", "fp4_flops")


def _spellings(v: float) -> set[str]:
    """The per-GPU figure as a datasheet writes it, in TFLOPS or PFLOPS."""
    return {f"{v / 1e12:,g}", f"{v / 1e15:,g}"}


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_peak_is_the_dense_figure_its_source_gives(name: str) -> None:
    g = GPUS[name]
    for field in FLOPS:
        v = getattr(g, field)
        if v is None:
            continue
        src = g.sources[field]
        dense = [rf"(?<![\d.,]){re.escape(s)}( [TP]FLOPS)? dense" for s in _spellings(v)]
        assert any(re.search(d, src) for d in dense), (name, field, v, src)


@pytest.mark.parametrize("name", sorted(n for n in GPUS if GPUS[n].fp8_flops))
def test_fp8_is_twice_bf16(name: str) -> None:
    """Hopper, Blackwell, CDNA 3/4: exactly 2x (dense to dense). Ada's L4/L40S datasheets print a
    bf16 figure a little under half the fp8 one (362.05 vs 733), so 2.5 % there."""
    g = GPUS[name]
    assert g.fp8_flops is not None
    tol = 0.025 if name in ("l4", "l40s") else 1e-3
    assert g.fp8_flops / g.bf16_flops == pytest.approx(2.0, rel=tol)


@pytest.mark.parametrize(("name", "ratio"), [("b200", 2.0), ("gb200", 2.0), ("b300", 3.0), ("mi355x", 2.0)])
def test_fp4_over_fp8(name: str, ratio: float) -> None:
    """Blackwell and CDNA 4 double FP8 for FP4; Blackwell Ultra (B300) triples it."""
    g = GPUS[name]
    assert g.fp4_flops is not None and g.fp8_flops is not None
    assert g.fp4_flops / g.fp8_flops == pytest.approx(ratio, rel=1e-3)


def test_only_blackwell_and_cdna4_have_fp4_tensor_cores() -> None:
    assert {n for n, g in GPUS.items() if g.fp4_flops} == {"b200", "gb200", "b300", "mi355x"}


@pytest.mark.parametrize(
    ("name", "memory_gb", "hbm_tbs", "link_gbs"),
    [
        ("gb200", 186, 8.0, 900),
        ("b300", 288, 8.0, 900),
        ("h20", 96, 4.0, 450),
        ("mi325x", 256, 6.0, 448),
        ("mi355x", 288, 8.0, 537.6),
    ],
)
def test_the_new_rows(name: str, memory_gb: float, hbm_tbs: float, link_gbs: float) -> None:
    g = load_catalog().gpu(name)
    assert g.memory_bytes == memory_gb * 1e9 and g.hbm_bandwidth == hbm_tbs * 1e12
    assert g.interconnect_bandwidth == pytest.approx(link_gbs * 1e9)  # one direction: half the bidirectional
    assert "https://" in g.sources["memory_bytes"] or "product brief" in g.sources["memory_bytes"]


@pytest.mark.parametrize(
    ("name", "defaults"),
    [("gb200", (1024, 16384)), ("b300", (1024, 16384)), ("mi325x", (1024, 16384)),
     ("mi355x", (1024, 16384)), ("h20", (1024, 8192))],
)  # fmt: skip
def test_vllm_serve_defaults_of_the_new_rows(name: str, defaults: tuple[int, int]) -> None:
    """vLLM 0.33's ``get_batch_defaults``: 16384 tokens from 160 GiB of device memory, 8192 from
    70 GiB (not an A100); the H20's 96 GB is 89.4 GiB."""
    from servesim.perf.serve_defaults import vllm_serve_defaults

    assert vllm_serve_defaults(name) == defaults
