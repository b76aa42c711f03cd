"""`saturate --speculative-config`: the same search with speculation off, both at every rate
either ran, and the load where speculation stops paying, in --json and in words."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.tuning import SaturationReport

runner = CliRunner()
BASE = [
    "saturate",
    "poisson_5_rps",
    "-n",
    "200",
    "--model",
    "llama-3.1-8b",
    "--gpu",
    "h100",
    "--seeds",
    "1",
    "--rtol",
    "0.25",
    "--max-num-seqs",
    "256",
    "--max-num-batched-tokens",
    "8192",
]
LOW = json.dumps({"method": "eagle3", "num_speculative_tokens": 4, "acceptance_rates": [0.4]})


def _run(args: list[str]) -> tuple[int, str, str]:
    res = runner.invoke(app, args)
    return res.exit_code, res.stdout, res.stderr


def test_low_acceptance_stops_paying_at_a_stated_load() -> None:
    code, out, err = _run([*BASE, "--speculative-config", LOW, "--json"])
    assert code == 0, out + err
    rep = SaturationReport.model_validate(json.loads(out))
    sp = rep.speculation
    assert sp is not None and sp.num_speculative_tokens == 4 and sp.method == "eagle3"
    assert sp.rates_rps == sorted(sp.rates_rps) and len(sp.rates_rps) >= 4
    assert sp.tpot_p50_on_ms[0] < sp.tpot_p50_off_ms[0]  # it pays at low load
    assert sp.crossover_rps is not None  # ... and stops paying on this roofline at higher load
    i = sp.rates_rps.index(sp.crossover_rps)
    assert sp.tpot_p50_on_ms[i] >= sp.tpot_p50_off_ms[i]
    assert all(a < b for a, b in zip(sp.tpot_p50_on_ms[:i], sp.tpot_p50_off_ms[:i], strict=True))
    assert sp.pays_up_to_rps == sp.rates_rps[i - 1]
    assert sp.mean_acceptance_length is not None and 1.0 < sp.mean_acceptance_length < 5.0
    assert sp.off_saturation_rps is not None
    # the same in words
    code, human, err = _run([*BASE, "--speculative-config", LOW])
    assert code == 0, human + err
    flat = " ".join(human.split())
    assert f"stops paying at {sp.crossover_rps:,.3g} req/s" in flat
    assert "TPOT p50 on" in flat and "speculative decoding (eagle3, k = 4) on vs off" in flat


def test_without_speculation_or_with_no_compare_off_there_is_no_comparison() -> None:
    code, out, err = _run([*BASE, "--json"])
    assert code == 0, out + err
    assert "speculation" not in json.loads(out)  # the document is what it was
    code, out, err = _run([*BASE, "--speculative-config", LOW, "--no-compare-off", "--json"])
    assert code == 0, out + err
    assert "speculation" not in json.loads(out)
