"""Mooncake-format traces with a chosen share of prefix reuse, for the engine speed benchmarks.

``servesim generate`` describes shared prefixes as prefix groups; the peers read Mooncake files,
whose prompts are ``hash_ids`` of 512-token blocks. This writes such a file (JSON lines:
``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``), seeded:

* prompts and outputs are log-normal (means 2,048 and 192 tokens), arrivals Poisson;
* with probability ``share_prob`` a request starts with the first blocks of one of
  ``num_prefixes`` shared documents (popularity Zipf 1): ``prefix_share`` of its full 512-token
  blocks, the rest of its ids unique. With the defaults about 30 % of all prompt tokens are in
  blocks an earlier request already had (``servesim trace inspect`` reports the figure).

Run as a script to write one: ``python benchmarks/prefix_trace.py out.jsonl -n 10000``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

HASH_BLOCK = 512


def lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int) -> np.ndarray:
    mu = np.log(mean) - sigma**2 / 2
    return np.maximum(1, np.rint(rng.lognormal(mu, sigma, n))).astype(np.int64)


def write_prefix_trace(
    path: Path,
    n: int,
    *,
    rate: float = 12.0,
    seed: int = 0,
    prompt_mean: float = 2048.0,
    output_mean: float = 192.0,
    num_prefixes: int = 64,
    share_prob: float = 0.75,
    prefix_share: float = 0.6,
    max_len: int = 16_384,
) -> None:
    """Write ``n`` requests to ``path`` (Mooncake JSON lines)."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, n)
    ts = np.floor(np.cumsum(gaps) * 1000.0).astype(np.int64)
    ts -= ts[0]
    prompt = np.minimum(lognormal(rng, prompt_mean, 0.8, n), max_len)
    output = np.minimum(lognormal(rng, output_mean, 0.8, n), 2048)
    uses = rng.random(n) < share_prob
    weights = 1.0 / np.arange(1, num_prefixes + 1)
    which = rng.choice(num_prefixes, size=n, p=weights / weights.sum())
    doc_blocks = max_len // HASH_BLOCK  # ids 0 .. num_prefixes*doc_blocks-1 belong to documents
    next_id = num_prefixes * doc_blocks
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            nb = -(-int(prompt[i]) // HASH_BLOCK)
            k = int(prefix_share * (int(prompt[i]) // HASH_BLOCK)) if uses[i] else 0
            base = int(which[i]) * doc_blocks
            ids = list(range(base, base + k)) + list(range(next_id, next_id + nb - k))
            next_id += nb - k
            row = {
                "timestamp": int(ts[i]),
                "input_length": int(prompt[i]),
                "output_length": int(output[i]),
                "hash_ids": ids,
            }
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("-n", "--num-requests", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=12.0, help="requests per second (Poisson)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    write_prefix_trace(args.out, args.num_requests, rate=args.rate, seed=args.seed)


if __name__ == "__main__":
    main()
