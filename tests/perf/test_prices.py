"""The GPU price table: every catalog GPU priced with a source and a month; overrides by flag and
file; bad input refused in one line naming the flag."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.errors import InputError
from servesim.perf import load_catalog
from servesim.perf.prices import GIVEN, load_prices, parse_price_overrides, read_price_file

#: Catalog GPUs without a recorded list price (gpu_prices.yaml's header says why).
UNPRICED = {"gb200", "b300", "h20", "mi325x", "mi355x"}


def test_every_catalog_gpu_has_a_sourced_dated_price() -> None:
    table = load_prices()
    for name in sorted(set(load_catalog().gpus) - UNPRICED):
        p = table.price(name)
        assert p.usd_per_gpu_hour > 0 and "http" in p.source
        assert p.as_of is not None and re.fullmatch(r"\d{4}-\d{2}", p.as_of)
    assert table.price("nvidia-h100-80gb-hbm3").gpu == "h100"  # aliases resolve through the catalog
    for name in UNPRICED:  # no list price: the one line asks for the flag, nothing is made up
        assert table.get(name) is None
        with pytest.raises(InputError, match=f"--gpu-price: no price for GPU '{name}'"):
            table.price(name)


def test_overrides_by_flag_and_file(tmp_path: Path) -> None:
    over = parse_price_overrides("h100=2.5, l40s=0.9")
    assert over == {"h100": 2.5, "l40s": 0.9}
    table = load_prices(over)
    assert table.price("h100").usd_per_gpu_hour == 2.5 and table.price("h100").source == GIVEN
    assert table.price("h200").source != GIVEN  # the others keep their list price
    plain = tmp_path / "p.yaml"
    plain.write_text("h200: 3.1\nl4: 0.5\n")
    assert read_price_file(plain) == {"h200": 3.1, "l4": 0.5}
    shaped = tmp_path / "s.yaml"
    shaped.write_text("prices:\n  a10g:\n    usd_per_gpu_hour: 0.75\n")
    t = load_prices({"a10g": 0.8}, file=shaped)
    assert t.price("a10g").usd_per_gpu_hour == 0.8  # the flag wins over the file
    assert load_prices(file=shaped).price("a10g").usd_per_gpu_hour == 0.75


@pytest.mark.parametrize(
    ("text", "words"),
    [("h100=abc", "not a number"), ("h100=-1", "positive"), ("h100", "GPU=PRICE"), ("h100=nan", "positive")],
)
def test_bad_flag_values(text: str, words: str) -> None:
    with pytest.raises(InputError, match=words) as e:
        parse_price_overrides(text)
    assert "--gpu-price" in str(e.value)


def test_unknown_gpu_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--gpu-price: unknown GPU 'tpu9'"):
        load_prices({"tpu9": 1.0})
    f = tmp_path / "p.yaml"
    f.write_text("tpu9: 1\n")
    with pytest.raises(InputError, match="--gpu-prices: unknown GPU 'tpu9'"):
        load_prices(file=f)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--gpu-price", "h100=abc"], "--gpu-price: h100='abc' is not a number"),
        (["--gpu-price", "tpu9=2"], "--gpu-price: unknown GPU 'tpu9'"),
        (["--gpu-types", "h100,tpu9"], "--gpu-types: unknown GPU 'tpu9'"),
        (["--gpu-types", "h100", "--gpu-hour-usd", "2"], "--gpu-hour-usd prices one GPU"),
        (["--gpu-types", "h100", "--gpu", "l40s"], "--gpu sets one GPU, --gpu-types compares several"),
        (["--gpu-types", "h100", "--gpus", "2"], "--gpu-types searches the flag study's GPU type"),
        (["--gpu-types", "h100", "--no-recommend"], "drop --no-recommend"),
        (["--gpu-types", " "], "--gpu-types: name at least one GPU"),
    ],
)
def test_cli_refuses_bad_prices_in_one_line(flags: list[str], words: str) -> None:
    res = CliRunner().invoke(app, ["tune", "poisson_5_rps", "-n", "50", "--storage", "memory", *flags])
    assert res.exit_code == 2, res.output
    assert words in res.output and len(res.output.strip().splitlines()) == 1, res.output


def test_perf_gpus_lists_the_list_prices() -> None:
    res = CliRunner().invoke(app, ["perf", "gpus"])
    assert res.exit_code == 0, res.output
    assert "$/GPU-hour" in res.output and f"{load_prices().price('h100').usd_per_gpu_hour:g}" in res.output
