""" "Which GPU type is cheapest for my traffic?" in real headless Chromium (the fixtures of
test_web_browser.py): two GPU types chosen on the Tune tab, a tiny study each, and what a person
sees: the comparison table with both types, $/hour and $ per 1M output tokens, the type
recommended, above the recommendation's vllm serve command."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_web_browser import EXPECTED, browser, drop_file, page, server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

#: 120 requests at 20 req/s (the parity tests' trace): a tiny study per type.
CSV = b"req_id,arrival_time_s,prompt_len,output_len\n" + b"".join(
    f"r{i},{i * 0.05:.2f},{200 + 37 * (i % 11)},{20 + 7 * (i % 5)}\n".encode() for i in range(120)
)
SPACE = {
    "tensor_parallel_size": [1],
    "replicas": [1, 2],
    "max_num_seqs": [64],
    "max_num_batched_tokens": [2048],
}
TABLE = "#tune-results [data-section='gpu_types'] table[data-key='gpu_types']"


def test_two_gpu_types_compared_with_their_cost_and_the_cheapest_recommended(
    page: Any,  # noqa: F811 (the fixture)
) -> None:
    drop_file(page, "small.csv", CSV)
    page.wait_for_selector("#trace-status:has-text('120 requests stored')")
    page.click("#tab-tune")
    page.fill("#tune-trials", "2")
    page.fill("#tune-verify", "1")
    page.fill("#tune-trial-seeds", "1")
    page.fill("#slo-ttft_p99_ms", "2000")
    page.fill("#tune-space", json.dumps(SPACE))
    page.select_option("#tune-gpu-types", ["h100", "l40s"])
    page.fill("#tune-gpu-prices", "l40s=0.9")
    page.click("#tune-submit")
    page.wait_for_selector(TABLE, timeout=180_000)
    heads = page.eval_on_selector_all(f"{TABLE} th", "hs => hs.map(h => h.textContent)")
    assert {"GPU", "$/GPU-hour", "$/hour", "$/1M output tokens"} <= set(heads)
    rows = page.eval_on_selector_all(
        f"{TABLE} tbody tr", "rs => rs.map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    col = {h: i for i, h in enumerate(heads)}
    by_gpu = {r[col["GPU"]].removeprefix("* "): r for r in rows}
    assert set(by_gpu) == {"h100", "l40s"}
    assert by_gpu["l40s"][col["$/GPU-hour"]] == "0.900"  # the price given, over the list price
    for r in rows:  # each type that ran is priced: an hour and a million output tokens
        assert r[col["$/hour"]] not in ("", "–") and r[col["$/1M output tokens"]] not in ("", "–")
    chosen = [r[col["GPU"]].removeprefix("* ") for r in rows if r[col["GPU"]].startswith("* ")]
    assert len(chosen) == 1
    text = page.text_content("#tune-results [data-section='gpu_types']") or ""
    assert f"cheapest GPU type: {chosen[0]}" in text
    toolbar = page.text_content("#tune-results .toolbar") or ""
    assert f"{chosen[0]} recommended" in toolbar and "cheapest of l40s, h100: 2 trials each" in toolbar
    # the comparison comes first, then the chosen type's recommendation and its command
    order = page.evaluate(
        """() => { const t = document.querySelector("[data-section='gpu_types']");
                   const c = document.getElementById("recommendation-card");
                   return !!c && !!(t.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING); }"""
    )
    assert order
    assert (page.text_content("#vllm-command") or "").startswith("vllm serve")
    settings = page.text_content("#tune-results .run-settings") or ""
    assert "l40s | h100" in settings  # the types asked (in the catalog's order), not one GPU
    # "Load these settings" puts the types compared and the prices given back in the form
    page.select_option("#tune-gpu-types", [])
    page.fill("#tune-gpu-prices", "")
    page.fill("#tune-trials", "40")
    page.click("#tune-load-settings")
    picked = page.eval_on_selector("#tune-gpu-types", "s => Array.from(s.selectedOptions).map(o => o.value)")
    assert sorted(picked) == ["h100", "l40s"]
    assert page.input_value("#tune-gpu-prices") == "l40s=0.9"
    study = [page.input_value(f"#tune-{x}") for x in ("trials", "trial-seeds", "verify")]
    assert study == ["2", "1", "1"], study  # and the study's size as it ran


def test_a_price_that_is_not_positive_is_refused_naming_the_field(
    page: Any,  # noqa: F811 (the fixture)
) -> None:
    EXPECTED.append("status of 422 (Unprocessable Entity)")  # the refused job itself
    page.click("#tab-tune")
    page.select_option("#tune-gpu-types", ["h100", "l40s"])
    page.fill("#tune-gpu-prices", "l40s=0")
    page.click("#tune-submit")
    page.wait_for_selector("#tune-job [role='alert']")
    text = page.text_content("#tune-job [role='alert']") or ""
    assert "body.gpu_prices" in text and "a price must be a positive number" in text
