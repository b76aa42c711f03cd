"""``stream_interval`` (vLLM's output processor): a streaming client gets the first token at once,
then a chunk every k tokens and the rest at the finish; its ITL is the gap between chunks. The
schedule, TTFT, TPOT and E2E do not move. Hand-worked on a lone request of 10 output tokens, one
per step of ``STEP``: with k = 4 the chunks carry tokens 1, 2-5, 6-9, 10 (gaps 4, 4, 1 steps)."""

from __future__ import annotations

import pytest
from helpers import STEP, run_steps, trace_of


def test_a_client_measures_the_gaps_between_chunks() -> None:
    trace = trace_of(("r0", 0, 16, 10))
    plain, plain_log = run_steps(trace)
    chunked, chunked_log = run_steps(trace, stream_interval=4)
    assert plain.summary.itl_ms.count == 9 and plain.summary.itl_ms.max == pytest.approx(STEP * 1e3)
    itl = chunked.summary.itl_ms
    assert itl.count == 3
    assert itl.mean == pytest.approx(9 * STEP * 1e3 / 3)  # (4 + 4 + 1) steps over 3 gaps
    assert itl.max == pytest.approx(4 * STEP * 1e3)
    assert [d["scheduled_tokens"] for d in chunked_log] == [d["scheduled_tokens"] for d in plain_log]
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert getattr(chunked.summary, metric) == getattr(plain.summary, metric)


def test_a_chunk_boundary_at_the_last_token_sends_it_once() -> None:
    # 9 tokens, k = 4: tokens 1, 2-5, 6-9: the finish falls on a boundary (no extra chunk)
    chunked, _ = run_steps(trace_of(("r0", 0, 16, 9)), stream_interval=4)
    assert chunked.summary.itl_ms.count == 2
    assert chunked.summary.itl_ms.p50 == chunked.summary.itl_ms.max == pytest.approx(4 * STEP * 1e3)
