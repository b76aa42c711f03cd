"""What a streaming client measures as ITL with vLLM's ``stream_interval`` k > 1.

vLLM's output processor (``RequestState.make_request_output``, vllm/v1/engine/output_processor.py)
sends a request's first token at once, then holds tokens until k have gathered since the last
send, and sends whatever is held when the request finishes. A client sees one chunk per send:
its inter-token latency is the gap between chunks (k steps' worth in a steady decode), while
TTFT, TPOT and E2E do not move. The engine's schedule does not change either (it is not a
scheduler setting).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def chunk_gaps_s(
    token_steps: Mapping[int, Sequence[int]],
    step_end: np.ndarray,
    finished: Mapping[int, bool],
    k: int,
) -> np.ndarray:
    """The gaps between a client's chunks, in seconds, over every request: ``token_steps`` holds
    each request's runs of output steps (start, count pairs, the recorder's segments),
    ``step_end`` each step's end time, ``finished`` whether the request's last token was its
    last (a final partial chunk is sent then). One output per step (without speculation)."""
    out: list[np.ndarray] = []
    for idx, seg in token_steps.items():
        if not seg:
            continue
        steps = np.concatenate(
            [np.arange(s, s + c, dtype=np.int64) for s, c in zip(seg[::2], seg[1::2], strict=True)]
        )
        n = len(steps)
        sends = list(range(0, n, k))  # token 1, 1 + k, 1 + 2k, ... (0-based: 0, k, 2k, ...)
        if finished.get(idx, False) and sends[-1] != n - 1:
            sends.append(n - 1)
        if len(sends) > 1:
            out.append(np.diff(step_end[steps[sends]]))
    return np.concatenate(out) if out else np.zeros(0)


__all__ = ["chunk_gaps_s"]
