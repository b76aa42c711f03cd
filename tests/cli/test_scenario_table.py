"""``servesim scenario``'s human table: answers in words and rounded numbers, never a Python
structure (issue 46: its reasons and capacity were printed as dicts of 17-digit floats)."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.tuning.scenario_explain import ScenarioCapacity
from servesim.views.scenario import capacity_text, cell

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "inputs"
#: A float printed as Python prints it: ten or more decimals.
RAW_FLOAT = re.compile(r"\d\.\d{10,}")


def test_a_load_scenario_reads_as_words() -> None:
    res = CliRunner().invoke(app, ["scenario", str(EXAMPLES / "s001_stable.input.json")])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "{'" not in out and "[{" not in out and not RAW_FLOAT.search(out), out
    assert "recommended_max_num_seqs" in out and "capacity" in out
    assert re.search(r"recommended_chunked_prefill\s*│\s*(yes|no)\b", out), out
    assert "  - max_num_seqs 16:" in out  # the reasons, as sentences below the table


def test_the_capacity_of_an_overloaded_scenario_is_one_sentence() -> None:
    cap = ScenarioCapacity(
        replicas=4,
        replicas_tried=[(2, "QUEUE_SATURATED"), (4, "STABLE")],
        replicas_ttft_p99_ms=1189.5524522205606,
        kv_blocks=25600,
        kv_blocks_tried=[(25600, "STABLE")],
        kv_ttft_p99_ms=864.4810193500534,
        service_rps=7.532809616367641,
    )
    assert capacity_text(cap) == (
        "4 replicas (TTFT p99 1,189.6 ms) or one replica with 25,600 KV blocks (TTFT p99 864.5 ms); "
        "one replica completes 7.53 req/s"
    )
    none = cap.model_copy(update={"replicas": None, "kv_blocks": None})
    assert capacity_text(none).startswith("no replica count or KV size tried keeps the queue stable")
    assert capacity_text(None) == "-"
    assert (cell(93689.59234299281), cell(True), cell(16)) == ("93,689.6", "yes", "16")
