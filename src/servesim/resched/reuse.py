"""Prefix-cache reuse of an interrupted request on re-admission, as vLLM V1 computes it.

vLLM V1 preempts by recompute: the victim's blocks go back to the free queue (hashed full
blocks stay hittable until evicted) and ``num_computed_tokens`` drops to 0. On re-admission the
request runs the ordinary prefix-cache lookup over its tokens (prompt + outputs so far,
``num_tokens``): the longest chain of full blocks still cached, capped at ``num_tokens - 1`` and
rounded down to a block boundary (docs/vllm-scheduling.md §5).

An interrupted request that had computed ``P`` tokens always has ``num_tokens >= P + 1``:

* while decoding, its last sampled token is not yet in the KV cache (``num_tokens = P + 1``);
* while prefilling, the rest of its prompt is not (``num_tokens = prompt_len > P``).

So the cap ``num_tokens - 1 >= P`` never bites, only full *computed* blocks were ever hashed,
and with every block still cached the lookup recovers exactly

    reused = B * floor(P / B),   recomputed = P - reused = P mod B

of the ``P`` processed tokens (``reused + recomputed == P``: nothing lost or counted twice).
When only the first ``C`` tokens' blocks are known to survive (eviction takes a victim's
*last* blocks first, so what survives is a prefix), ``reused = B * floor(min(C, P) / B)``.
"""

from __future__ import annotations

from typing import NamedTuple

from servesim.errors import InputError


class ReuseSplit(NamedTuple):
    """How a request's processed tokens come back: from the cache or computed again."""

    reused: int
    recomputed: int


def reusable_tokens(tokens_processed: int, block_size: int, cached_tokens: int | None = None) -> int:
    """Tokens of ``tokens_processed`` a re-admitted request recovers from the prefix cache.

    ``cached_tokens``: how many of its leading tokens still have their KV blocks cached
    (``None``: all of them, i.e. no block has been evicted). Only full blocks count.
    """
    if tokens_processed < 0:
        raise InputError(f"tokens_processed must be >= 0 (got {tokens_processed})")
    if block_size < 1:
        raise InputError(f"block_size must be >= 1 (got {block_size})")
    survive = tokens_processed if cached_tokens is None else min(max(cached_tokens, 0), tokens_processed)
    return block_size * (survive // block_size)


def reuse_split(tokens_processed: int, block_size: int, cached_tokens: int | None = None) -> ReuseSplit:
    """``reusable_tokens`` and the remainder that must be recomputed; they sum to ``tokens_processed``."""
    reused = reusable_tokens(tokens_processed, block_size, cached_tokens)
    return ReuseSplit(reused, tokens_processed - reused)
