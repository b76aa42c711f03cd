"""``servesim generate`` and ``servesim trace convert``: options, determinism, help text."""

import json
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.traces import (
    PRESETS,
    DiurnalArrivals,
    FixedLength,
    GammaArrivals,
    GeneratorSpec,
    LogNormalLength,
    OnOffArrivals,
    PoissonArrivals,
    RampArrivals,
    ResampledLength,
    generate_trace,
    load_trace,
)

runner = CliRunner()


def run_json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def spec_of(*args: str) -> GeneratorSpec:
    return GeneratorSpec.model_validate(run_json("generate", *args)["spec"])


def test_generate_writes_the_trace_of_the_spec(tmp_path: Path) -> None:
    out = tmp_path / "g.csv"
    data = run_json("generate", "poisson_100_rps", "-n", "500", "--seed", "3", "--out", str(out))
    spec = GeneratorSpec.model_validate(data["spec"])
    assert spec.arrival == PoissonArrivals(rate=100) and spec.num_requests == 500 and spec.seed == 3
    assert data["out"] == str(out) and data["stats"]["num_requests"] == 500
    assert abs(data["stats"]["mean_rate_rps"] - 100) < 10
    pd.testing.assert_frame_equal(load_trace(out).df, generate_trace(spec).df, check_exact=True)


def test_generate_is_reproducible_byte_for_byte(tmp_path: Path) -> None:
    for name in ("a.jsonl", "b.jsonl"):
        result = runner.invoke(
            app, ["generate", "prefix_heavy", "--seed", "11", "--out", str(tmp_path / name)]
        )
        assert result.exit_code == 0, result.output
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    runner.invoke(app, ["generate", "prefix_heavy", "--seed", "12", "--out", str(tmp_path / "c.jsonl")])
    assert (tmp_path / "a.jsonl").read_bytes() != (tmp_path / "c.jsonl").read_bytes()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--rate", "20"], PoissonArrivals(rate=20)),
        (
            ["--arrival", "gamma", "--burstiness", "0.25", "--rate", "20"],
            GammaArrivals(rate=20, burstiness=0.25),
        ),
        (["--burstiness", "4"], GammaArrivals(rate=10, burstiness=4)),
        (["--no-rescale"], PoissonArrivals(rate=10, rescale=False)),
        (
            ["--arrival", "onoff", "--rate", "30", "--rate-off", "1", "--on-s", "5", "--off-s", "20"],
            OnOffArrivals(rate_on=30, rate_off=1, mean_on_s=5, mean_off_s=20),
        ),
        (
            ["--arrival", "ramp", "--rate-start", "1", "--rate", "9", "--ramp-s", "30"],
            RampArrivals(rate_start=1, rate_end=9, duration_s=30),
        ),
        (
            ["--arrival", "diurnal", "--rate", "5", "--amplitude", "0.9", "--period-s", "60"],
            DiurnalArrivals(mean_rate=5, amplitude=0.9, period_s=60),
        ),
    ],
)
def test_arrival_options(args: list[str], expected: object) -> None:
    assert spec_of("-n", "50", *args).arrival == expected


def test_preset_parameters_are_kept_when_only_the_rate_changes() -> None:
    spec = spec_of("onoff", "--rate", "40", "-n", "100")
    assert spec.arrival == OnOffArrivals(rate_on=40, rate_off=0.5, mean_on_s=20, mean_off_s=40)


def test_length_and_prefix_options() -> None:
    spec = spec_of("-n", "50", "--prompt-mean", "500", "--prompt-sigma", "0.3", "--output-mean", "80")
    assert spec.prompt == LogNormalLength(mean=500, sigma=0.3, max=8192)
    assert spec.output == LogNormalLength(mean=80, sigma=0.8, max=2048)
    spec = spec_of("-n", "50", "--lengths-from", "azure-conv")
    assert spec.prompt == spec.output == ResampledLength(source="azure-conv")
    spec = spec_of(
        "-n", "50", "--prefix-groups", "3", "--prefix-len", "64", "--zipf", "0", "--prefix-fraction", "0.5"
    )
    assert spec.prefix is not None
    assert (spec.prefix.num_groups, spec.prefix.prefix_len, spec.prefix.zipf_s, spec.prefix.fraction) == (
        3,
        FixedLength(value=64),
        0.0,
        0.5,
    )


def test_spec_file(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(
        "name: mine\nnum_requests: 40\narrival: {kind: constant, rate: 4}\noutput: {kind: fixed, value: 7}\n"
    )
    data = run_json("generate", "--spec", str(path))
    assert data["spec"]["name"] == "mine" and data["stats"]["num_requests"] == 40
    assert data["stats"]["output"]["mean"] == 7 and data["stats"]["mean_rate_rps"] == pytest.approx(4)


@pytest.mark.parametrize(
    "args",
    [
        ["nope"],
        ["--lengths-from", "azure-conv", "--prompt-mean", "5"],
        ["--arrival", "poisson", "--burstiness", "0.5"],
        ["--rate", "-1"],
        ["--prefix-groups", "0"],
        ["--spec", "/nonexistent/spec.yaml"],
        ["--arrival", "ramp", "--rate", "0", "--rate-start", "1", "-n", "10000"],
    ],
)
def test_generate_bad_options_exit_2_with_one_line(args: list[str]) -> None:
    result = runner.invoke(app, ["generate", *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1


def test_list_presets() -> None:
    result = runner.invoke(app, ["generate", "--list-presets"])
    assert result.exit_code == 0
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(PRESETS)


def test_convert(tmp_path: Path) -> None:
    out = tmp_path / "conv.parquet"
    result = runner.invoke(app, ["trace", "convert", "azure-code", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote 8,819 requests" in result.stdout
    pd.testing.assert_frame_equal(load_trace(out).df, load_trace("azure-code").df, check_exact=True)


def test_every_option_has_help() -> None:
    group = typer.main.get_command(app)
    commands = {
        "generate": group.commands["generate"],
        "trace inspect": group.commands["trace"].commands["inspect"],
        "trace convert": group.commands["trace"].commands["convert"],
    }
    for name, command in commands.items():
        assert command.help, name
        for param in command.params:
            assert getattr(param, "help", None), f"{name}: {param.name} has no help"
