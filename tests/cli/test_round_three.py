"""Issue 47 ("Reliability, round three"): each reproducer is one line naming the flag (exit 2,
no traceback) or the right result; small bundled traces (``-n 50``) keep each case to seconds."""

from __future__ import annotations

import json

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
