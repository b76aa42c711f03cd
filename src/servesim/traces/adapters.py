"""LoRA adapters per request: which requests name an adapter, and which one.

Why: vLLM's scheduler lets at most ``max_loras`` distinct adapters run at once, so how traffic
spreads over adapters (a few popular ones, a long tail) decides how often a request waits for
an adapter slot. A adapters named ``lora-0`` .. ``lora-{A-1}``; a request names one with
probability ``fraction`` (the rest use the base model); which follows a Zipf(s) popularity:
P(adapter i) ∝ 1/(i+1)^s (``lora-0`` the most popular; s=0 uniform), as for prefix groups.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field


class LoRASpec(BaseModel):
    """How requests use LoRA adapters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_adapters: int = Field(ge=1, le=1 << 20, description="Number of distinct adapters (A).")
    zipf_s: float = Field(
        1.0,
        ge=0,
        le=100,
        allow_inf_nan=False,
        description="Zipf exponent of adapter popularity (0 = uniform).",
    )
    fraction: float = Field(1.0, ge=0, le=1, description="Share of requests that name an adapter.")

    def popularity(self) -> np.ndarray:
        """P(adapter i) ∝ 1/(i+1)^s, normalised."""
        w: np.ndarray = 1.0 / np.arange(1, self.num_adapters + 1, dtype=np.float64) ** self.zipf_s
        p: np.ndarray = w / w.sum()
        return p


def assign_adapters(spec: LoRASpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """The ``lora`` column: an adapter name per request, None for the base model."""
    uses = rng.random(n) < spec.fraction
    which = rng.choice(spec.num_adapters, size=n, p=spec.popularity())
    names = np.array([f"lora-{i}" for i in range(spec.num_adapters)], dtype=object)
    out = np.full(n, None, dtype=object)
    out[uses] = names[which[uses]]
    return out


__all__ = ["LoRASpec", "assign_adapters"]
