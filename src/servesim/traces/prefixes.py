"""Shared-prefix groups: many requests start with the same tokens (a system prompt, a document).

G groups named ``group-0`` .. ``group-{G-1}``; each has one prefix length, drawn once from
``prefix_len``. A request uses a group with probability ``fraction``; which group follows a
Zipf(s) popularity: P(group i) ∝ 1/(i+1)^s (``group-0`` is the most popular; s=0 is uniform).

A prompt must keep at least one token of its own (vLLM always computes the last prompt
token), so when a prompt is not longer than its group's prefix, either the prefix is clipped to
``prompt_len - 1`` tokens (``clip_prefix``, the default: the length distribution is kept and the
request shares the first tokens of the group's prefix), or the prompt is lengthened to
``prefix + 1`` tokens (``extend_prompt``: every request of a group shares the whole prefix).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servesim.traces.lengths import FixedLength, ParametricLength, sample_parametric


class PrefixSpec(BaseModel):
    """How requests share prompt prefixes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_groups: int = Field(ge=1, description="Number of distinct shared prefixes (G).")
    prefix_len: ParametricLength = Field(
        default_factory=lambda: FixedLength(value=512), description="Prefix tokens, drawn once per group."
    )
    zipf_s: float = Field(
        1.0, ge=0, allow_inf_nan=False, description="Zipf exponent of group popularity (0 = uniform)."
    )
    fraction: float = Field(1.0, ge=0, le=1, description="Share of requests that use a group.")
    on_short_prompt: Literal["clip_prefix", "extend_prompt"] = Field(
        "clip_prefix", description="When prompt_len <= prefix: clip the prefix or lengthen the prompt."
    )

    def popularity(self) -> np.ndarray:
        """P(group i) for i = 0..G-1."""
        weights = 1.0 / np.arange(1, self.num_groups + 1, dtype=np.float64) ** self.zipf_s
        return np.asarray(weights / weights.sum(), dtype=np.float64)


def assign_prefixes(
    spec: PrefixSpec, prompt_len: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prefix_group object array, prefix_len int64, possibly lengthened prompt_len int64)."""
    n = len(prompt_len)
    group_len = sample_parametric(spec.prefix_len, spec.num_groups, rng)
    uses = rng.random(n) < spec.fraction
    group = rng.choice(spec.num_groups, size=n, p=spec.popularity())
    names = np.array([f"group-{i}" for i in range(spec.num_groups)], dtype=object)
    groups = np.full(n, None, dtype=object)
    groups[uses] = names[group[uses]]
    plen = np.where(uses, group_len[group], 0).astype(np.int64)
    prompt = prompt_len.astype(np.int64, copy=True)
    if spec.on_short_prompt == "clip_prefix":
        plen = np.minimum(plen, prompt - 1)
    else:
        prompt = np.where(uses, np.maximum(prompt, plen + 1), prompt)
    return groups, plen, prompt
