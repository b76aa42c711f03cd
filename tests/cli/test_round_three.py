"""Issue 47 ("Reliability, round three"): each reproducer is one line naming the flag (exit 2,
no traceback) or the right result; small bundled traces (``-n 50``) keep each case to seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
NGRAM = '{"method":"ngram","num_speculative_tokens":3}'


def refused(args: list[str]) -> str:
    """The one line ``args`` is refused with (exit 2, no traceback)."""
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and len(res.stderr.strip().splitlines()) == 1, res.stderr
    return res.stderr.strip()


def test_pd_with_speculation_runs_and_names_no_offloading() -> None:
    """P/D with a speculative config used to be refused as 'speculative decoding with KV
    offloading' though no offloading was asked: it runs, and speculation shows in TPOT."""
    base = ["cluster", "poisson_20_rps", "-n", "50", "--prefill-replicas", "1", "--decode-replicas", "1"]
    res = runner.invoke(app, [*base, "--speculative-config", NGRAM, "--json"])
    assert res.exit_code == 0, res.output
    assert "offloading" not in res.output
    off = runner.invoke(app, [*base, "--json"])
    assert off.exit_code == 0, off.output
    spec_tpot = json.loads(res.stdout)["summary"]["tpot_p50_ms"]
    plain_tpot = json.loads(off.stdout)["summary"]["tpot_p50_ms"]
    assert spec_tpot < plain_tpot  # the decode pool speculates


def test_speculation_with_a_cpu_tier_is_refused_naming_both() -> None:
    """The one combination the engine does not model, named before any work (it used to fail in
    the engine after the run's header was printed)."""
    for cmd in (["simulate"], ["cluster", "--replicas", "2"]):
        line = refused(
            [*cmd, "poisson_20_rps", "-n", "50", "--kv-offloading-size", "16", "--speculative-config", NGRAM]
        )
        assert (
            "speculative_config (ngram) with kv_offloading_size 16 GiB: speculative decoding with a CPU KV "
            "offload tier is not modelled; drop one of them" in line
        ), line


@pytest.mark.parametrize(
    ("item", "said"),
    [
        (
            "max_num_seqs=1..2:0.5",
            "error: --space 'max_num_seqs=1..2:0.5': max_num_seqs takes whole numbers: its range's step 0.5 "
            "is not one (e.g. max_num_seqs=1..2:1)",
        ),
        (
            "max_num_seqs=1.5..4",
            "error: --space 'max_num_seqs=1.5..4': max_num_seqs: '1.5' is not a valid int",
        ),
        (
            "kv_offloading_size=inf",
            "error: --space 'kv_offloading_size=inf': kv_offloading_size: 'inf' is not a finite number",
        ),
        (
            "kv_offloading_size=1e400",
            "error: --space 'kv_offloading_size=1e400': kv_offloading_size: '1e400' is not a finite number",
        ),
        ("queue_timeout_s=none,nan", "queue_timeout_s: 'nan' is not a finite number"),
        ("gpu_memory_utilization=0.8..0.9:inf", "gpu_memory_utilization: 'inf' is not a finite number"),
    ],
)
def test_a_search_space_takes_whole_steps_and_finite_numbers(item: str, said: str) -> None:
    """Issue 47: a half step of an integer knob was a traceback (range() arg 3 must not be zero);
    inf simulated an infinite CPU tier."""
    line = refused(["tune", "poisson_20_rps", "-n", "50", "--trials", "1", "--space", item])
    assert said in line, line


def test_a_space_file_takes_finite_numbers_and_whole_steps(tmp_path: Path) -> None:
    for text, said in (
        ("kv_offloading_size: [.inf]\n", "inf is not a finite number"),
        ("max_num_seqs: {low: 1, high: 4, step: 0.5}\n", "max_num_seqs takes whole numbers"),
    ):
        path = tmp_path / "space.yaml"
        path.write_text(text)
        line = refused(["tune", "poisson_20_rps", "-n", "50", "--trials", "1", "--space-file", str(path)])
        assert said in line, line


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "-inf"])
@pytest.mark.parametrize("cmd", ["saturate", "tune"])
def test_a_target_rate_is_a_finite_number_named_as_the_flag(cmd: str, value: str) -> None:
    """Issue 47: refused as ``target_rate`` (the service's field), not the flag the user typed."""
    line = refused([cmd, "poisson_20_rps", "-n", "50", "--target-rate", value])
    shown = "inf" if value == "1e400" else value
    assert line == f"error: --target-rate {shown}: Input should be a finite number", line


def test_saturate_rtol_nan_is_not_said_to_be_too_large() -> None:
    line = refused(["saturate", "poisson_20_rps", "-n", "50", "--rtol", "nan"])
    assert line == "error: --rtol nan: Input should be a finite number", line


TUNE = ["tune", "poisson_20_rps", "-n", "50"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (  # issue 47: --out-dir was ignored by the layouts question (no file written, none said)
            ["--layouts", "agg,disagg", "--gpus", "2", "--out-dir", "D"],
            "error: --out-dir D: the flag search's, which tune --layouts does not run; drop them "
            "(--out FILE writes the layouts' document)",
        ),
        (
            ["--layouts", "agg", "--gpus", "2", "--trials", "3", "--no-recommend", "--target-rate", "5"],
            "error: --trials 3, --no-recommend, --target-rate 5: the flag search's",
        ),
        (
            ["--layouts", "", "--gpus", "2"],
            "error: --layouts: use agg, disagg, dpep or a list of them, e.g. agg,disagg (got nothing)",
        ),
        (
            ["--gpus", "2"],
            "error: --gpus N is the GPU budget of --layouts: give --layouts agg,disagg with it (the flag "
            "search's GPU budget is --max-gpus)",
        ),
        (
            ["--link", "tcp-100g", "--no-break-even"],
            "error: --link tcp-100g, --no-break-even: the layouts question's; give --layouts and --gpus "
            "with them",
        ),
    ],
)
def test_flags_a_tune_mode_does_not_read_are_refused(tmp_path: Path, flags: list[str], said: str) -> None:
    """Issue 47: a flag one mode of ``tune`` does not read is refused, not ignored."""
    args = [str(tmp_path / a) if a == "D" else a for a in TUNE + flags]
    line = refused(args)
    assert line.startswith(said.replace(" D:", f" {tmp_path / 'D'}:")), line
    assert not (tmp_path / "D").exists()


@pytest.mark.parametrize("cmd", ["simulate", "saturate", "tune"])
def test_a_speculative_seed_past_json_is_refused_by_flag_and_by_file(tmp_path: Path, cmd: str) -> None:
    """Issue 47: ``acceptance_seed`` 2**64 simulated and then failed writing JSON; it is bounded
    by servesim.bounds.MAX_SEED (as --seed) wherever the config is read."""
    seed = 18446744073709551616
    flag = refused(
        [
            cmd,
            "poisson_20_rps",
            "-n",
            "50",
            "--speculative-config",
            f'{{"method":"ngram","num_speculative_tokens":3,"acceptance_seed":{seed}}}',
        ]
    )
    assert flag == (
        "error: --speculative-config: acceptance_seed: Input should be less than or equal to "
        "9223372036854775807"
    ), flag
    path = tmp_path / "engine.yaml"
    path.write_text(
        f"speculative_config:\n  method: ngram\n  num_speculative_tokens: 3\n  acceptance_sed: {seed}\n"
    )
    line = refused([cmd, "poisson_20_rps", "-n", "50", "-c", str(path)])
    assert line == (
        f"error: {path}: speculative_config.acceptance_sed: unknown key; did you mean 'acceptance_seed'?"
    ), line
