"""Real and documented-layout traces: bundled Azure files, Vidur fixtures, BurstGPT, Mooncake."""

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from trace_oracles import reuse_oracle
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.traces import (
    BUNDLED_TRACES,
    TraceError,
    bundled_trace_path,
    inspect_trace,
    load_trace,
    write_trace,
)
from servesim.traces.frame import check_frame

runner = CliRunner()

# The numbers of the public-traces README (compute_stats.py), rounded as printed there.
AZURE_EXPECTED = {
    "azure-code": {
        "rows": 8819,
        "span": 3435.9,
        "rate": 2.57,
        "iat_cv": 13.15,
        "dispersion": 13.18,
        "peak": 67,
        "prompt": (2047.8, 1469, 7436, 3, 7437),  # mean, p50, p99, min, max
        "output": (27.9, 13, 251.5, 6, 1899),
    },
    "azure-conv": {
        "rows": 19366,
        "span": 3501.7,
        "rate": 5.53,
        "iat_cv": 1.09,
        "dispersion": 1.39,
        "peak": 16,
        "prompt": (1154.7, 1020, 4142, 2, 14050),
        "output": (211.1, 129, 601, 7, 1000),
    },
}


def _check_azure_stats(stats: dict, exp: dict) -> None:
    assert stats["num_requests"] == exp["rows"]
    assert stats["num_dropped"] == 0
    assert stats["time_span_s"] == pytest.approx(exp["span"], abs=0.05)
    assert stats["mean_rate_rps"] == pytest.approx(exp["rate"], abs=0.005)
    assert stats["iat_cv"] == pytest.approx(exp["iat_cv"], abs=0.005)
    assert stats["dispersion_1s"] == pytest.approx(exp["dispersion"], abs=0.005)
    assert stats["peak_1s"] == exp["peak"]
    for key in ("prompt", "output"):
        mean, p50, p99, lo, hi = exp[key]
        got = stats[key]
        assert got["mean"] == pytest.approx(mean, abs=0.05)
        assert got["p50"] == p50
        assert got["p99"] == pytest.approx(p99, abs=0.05)
        assert (got["min"], got["max"]) == (lo, hi)


@pytest.mark.parametrize("name", sorted(AZURE_EXPECTED))
def test_bundled_azure_matches_published_stats_via_cli(name: str) -> None:
    result = runner.invoke(app, ["trace", "inspect", name, "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["format"] == "azure"
    _check_azure_stats(stats, AZURE_EXPECTED[name])


@pytest.mark.parametrize("name", sorted(AZURE_EXPECTED))
def test_bundled_azure_via_api(name: str) -> None:
    trace = load_trace(name)
    check_frame(trace.df)
    assert trace.df["arrival_time_s"].iloc[0] == 0.0
    assert trace.df["req_id"].iloc[0] == "1"  # row numbers, file order (the files are sorted)
    assert not trace.provenance.reordered
    _check_azure_stats(inspect_trace(trace).model_dump(mode="json"), AZURE_EXPECTED[name])


def test_bundled_files_ship_inside_the_package_with_attribution() -> None:
    root = Path(__import__("servesim").__file__).parent
    for name in BUNDLED_TRACES:
        path = bundled_trace_path(name)
        assert path.is_file()
        assert root in path.parents  # under src/servesim: hatchling puts it in the wheel
    attribution = (bundled_trace_path("azure-conv").parent / "ATTRIBUTION.md").read_text()
    assert "CC BY 4.0" in attribution and "Splitwise" in attribution and "Patel" in attribution
    with pytest.raises(KeyError, match="azure-conv"):
        bundled_trace_path("nope")


def test_human_inspect_output_is_a_table() -> None:
    result = runner.invoke(app, ["trace", "inspect", "azure-code"])
    assert result.exit_code == 0, result.output
    assert "8,819" in result.stdout and "13.15" in result.stdout


@pytest.mark.parametrize("which", ["code", "conv"])
def test_vidur_fixture_equals_azure_rows(fixtures: Path, which: str) -> None:
    """Vidur's splitwise files are the Azure trace in seconds since the first request."""
    vidur = load_trace(fixtures / f"vidur_splitwise_{which}_300.csv")
    assert vidur.provenance.format == "vidur"
    assert len(vidur) == 300 and vidur.provenance.num_dropped == 0
    azure = load_trace(f"azure-{which}").df.iloc[:300]
    np.testing.assert_array_equal(vidur.df["prompt_len"], azure["prompt_len"])
    np.testing.assert_array_equal(vidur.df["output_len"], azure["output_len"])
    np.testing.assert_allclose(vidur.df["arrival_time_s"], azure["arrival_time_s"], atol=1e-6)


def test_vidur_fixture_via_cli(fixtures: Path) -> None:
    result = runner.invoke(
        app, ["trace", "inspect", str(fixtures / "vidur_splitwise_conv_300.csv"), "--json"]
    )
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["num_requests"] == 300 and stats["format"] == "vidur"


def test_vidur_length_only_file_is_refused_with_advice(fixtures: Path) -> None:
    path = fixtures / "vidur_arxiv_lengths_300.csv"
    with pytest.raises(TraceError, match="length source for the generator"):
        load_trace(path)
    result = runner.invoke(app, ["trace", "inspect", str(path)])
    assert result.exit_code == 2
    assert "--lengths-from" in result.stderr and "Traceback" not in result.output


def test_burstgpt_fixture(fixtures: Path) -> None:
    trace = load_trace(fixtures / "burstgpt_synthetic.csv")
    raw = pd.read_csv(fixtures / "burstgpt_synthetic.csv")
    failed = raw.index[raw["Response tokens"] == 0] + 1
    assert trace.provenance.format == "burstgpt"
    assert len(trace) == len(raw) - len(failed) == 36
    assert [d.row for d in trace.provenance.dropped] == list(failed)
    assert all(d.reason == "failed request (Response tokens = 0)" for d in trace.provenance.dropped)
    assert all(d.field == "Response tokens" for d in trace.provenance.dropped)
    assert set(trace.df["tenant"]) == {"ChatGPT", "GPT-4"}
    kept = raw[raw["Response tokens"] > 0]
    assert sorted(trace.df["arrival_time_s"]) == sorted(kept["Timestamp"].astype(float))
    assert inspect_trace(trace).num_tenants == 2


def test_burstgpt_via_cli_reports_drops(fixtures: Path) -> None:
    result = runner.invoke(app, ["trace", "inspect", str(fixtures / "burstgpt_synthetic.csv"), "--json"])
    stats = json.loads(result.stdout)
    assert stats["num_requests"] == 36 and stats["num_dropped"] == 4
    assert stats["dropped_examples"][0]["row"] == 7


def test_mooncake_fixture(fixtures: Path) -> None:
    path = fixtures / "mooncake_synthetic.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    trace = load_trace(path)
    assert trace.provenance.format == "mooncake"
    assert len(trace) == 30 and trace.hash_block_size == 512
    np.testing.assert_allclose(trace.df["arrival_time_s"], [x["timestamp"] / 1000 for x in lines])
    assert trace.df["hash_ids"].tolist() == [x["hash_ids"] for x in lines]
    assert all(
        len(h) == math.ceil(p / 512)
        for h, p in zip(trace.df["hash_ids"], trace.df["prompt_len"], strict=True)
    )
    stats = inspect_trace(trace)
    assert stats.prefix_reuse_from == "hash_ids"
    expected = reuse_oracle([x["hash_ids"] for x in lines], [x["input_length"] for x in lines], 512)
    assert expected > 0.1
    assert stats.prefix_reuse_ratio == pytest.approx(expected)


def test_mooncake_block_size_override(fixtures: Path) -> None:
    path = fixtures / "mooncake_synthetic.jsonl"
    smaller = load_trace(path, hash_block_size=256)  # more blocks per prompt: every row still fits
    assert smaller.hash_block_size == 256 and len(smaller) == 30
    # With 4096-token blocks most prompts have fewer blocks than ids: those rows are dropped.
    larger = load_trace(path, hash_block_size=4096)
    assert larger.provenance.num_dropped > 0
    assert len(larger) + larger.provenance.num_dropped == 30
    assert all("hash blocks but" in d.reason and d.field == "hash_ids" for d in larger.provenance.dropped)
    with pytest.raises(TraceError, match=r"row 1: field 'hash_ids': 10 hash blocks but a 4704-token prompt"):
        load_trace(path, hash_block_size=4096, strict=True)


def test_cli_inspect_reads_every_format(tmp_path: Path, fixtures: Path) -> None:
    """One trace in every container and layout: the CLI sees the right format and row count."""
    source = load_trace(fixtures / "vidur_splitwise_conv_300.csv")
    cases: list[tuple[Path, str, int]] = []
    for name, fmt in [
        ("t.csv", "native-csv"),
        ("t.jsonl", "native-jsonl"),
        ("t.json", "native-json"),
        ("t.parquet", "native-parquet"),
        ("t.csv.gz", "native-csv"),
    ]:
        cases.append((write_trace(source, tmp_path / name), fmt, 300))
    seed = tmp_path / "seed.json"
    seed.write_text(
        json.dumps(
            {
                "arrival_distribution": "gamma_5_rps_cv2",
                "requests": [
                    {"req_id": f"s{i}", "prompt_len": 100 + i, "expected_out": 10} for i in range(25)
                ],
            }
        )
    )
    cases += [
        (seed, "seed-json", 25),
        (fixtures / "mooncake_synthetic.jsonl", "mooncake", 30),
        (fixtures / "burstgpt_synthetic.csv", "burstgpt", 36),
        (fixtures / "vidur_splitwise_code_300.csv", "vidur", 300),
    ]
    for path, fmt, rows in cases:
        result = runner.invoke(app, ["trace", "inspect", str(path), "--json"])
        assert result.exit_code == 0, (path, result.output)
        stats = json.loads(result.stdout)
        assert (stats["format"], stats["num_requests"]) == (fmt, rows), path


def test_windows_line_endings_bom_and_gzip_without_extension(tmp_path: Path) -> None:
    text = "\ufeffreq_id,arrival_time_s,prompt_len,output_len\r\na,0.5,10,2\r\nb,1.5,20,3\r\n"
    plain = tmp_path / "win.csv"
    plain.write_bytes(text.encode("utf-8"))
    zipped = tmp_path / "trace.data"
    zipped.write_bytes(gzip.compress(text.encode("utf-8")))
    for path in (plain, zipped):
        trace = load_trace(path)
        assert trace.df["req_id"].tolist() == ["a", "b"]
        assert trace.df["prompt_len"].tolist() == [10, 20]
        assert trace.provenance.format == "native-csv"
