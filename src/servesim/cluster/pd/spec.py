"""A disaggregated cluster as the user states it: each pool (``PoolSpec``) and the pair with the link
and the short-prompt threshold (``DisaggSpec``, a cluster file's ``prefill``/``decode``).

``PoolSpec`` is the one pool type, with the one set of bounds (replicas, GPU, TP, vLLM keys):
a cluster file and the CLI's flags build it here, ``servesim.spec.DisaggregatedSpec`` checks each
of its pools against it, and the web's body is this type with the server's own per-job replica
cap (``web.schemas.PoolBody``). A pool's vLLM keys are checked by name where the pool becomes a
deployment (``servesim.spec.DeploymentSpec``: did-you-mean hints).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from servesim.bounds import MAX_POOL_REPLICAS, MAX_TOKENS, MAX_TP
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.errors import InputError, shown

#: Prompts shorter than this are prefilled on their decode replica (0: every prompt is disaggregated).
ShortPromptTokens = Annotated[
    int,
    Field(
        ge=0, le=MAX_TOKENS, description="Prompts shorter than this are prefilled on their decode replica."
    ),
]


class PoolSpec(BaseModel):
    """One pool of a disaggregated cluster: how many replicas, on what, with which vLLM keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    replicas: int = Field(1, ge=1, le=MAX_POOL_REPLICAS, description="Replicas of this pool.")
    gpu: str | None = Field(
        None, min_length=1, max_length=100, description="GPU of this pool (default: the run's)."
    )
    tp: int | None = Field(
        None, ge=1, le=MAX_TP, description="Tensor-parallel degree of a replica of this pool."
    )
    config: dict[str, object] = Field(default_factory=dict, description="vLLM keys of every replica.")


class DisaggSpec(BaseModel):
    """A disaggregated cluster (``servesim cluster --cluster FILE`` with ``prefill``/``decode``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prefill: PoolSpec = Field(default_factory=PoolSpec)
    decode: PoolSpec = Field(default_factory=PoolSpec)
    link: str = Field("rdma-400g", description="KV-transfer link preset (data/perf/links.yaml).")
    short_prompt_tokens: ShortPromptTokens = 0
    model: str = Field("llama-3.1-8b", description="Catalog name of the served model (its KV size).")

    def context(self) -> RecoveryContext:
        """The transfer cost model (``pd_context``)."""
        from servesim.cluster.pd.links import pd_context

        kv_dtype = str(self.prefill.config.get("kv_cache_dtype", "auto"))
        return pd_context(self.model, self.prefill.tp, self.decode.tp, self.link, kv_dtype)


def parse_pool_node(node: str, n_prefill: int, n_decode: int) -> tuple[str, int]:
    """A replica of a disaggregated cluster: ``p0``/``d1`` (their names) or ``prefill:0``/``decode:1``."""
    pool, sep, num = node.partition(":")
    if sep:
        tag = {"prefill": "p", "decode": "d"}.get(pool)
        if tag is None or not num.isdigit():
            raise InputError(f"unknown replica {shown(node)}: use prefill:N or decode:N (or pN / dN)")
    else:
        tag, num = node[:1], node[1:]
        if tag not in ("p", "d") or not num.isdigit():
            raise InputError(f"unknown replica {shown(node)}: use pN / dN or prefill:N / decode:N")
    k = int(num)
    n = n_prefill if tag == "p" else n_decode
    if k >= n:
        name = "prefill" if tag == "p" else "decode"
        raise InputError(f"no replica {shown(node)}: the {name} pool has {n} (0..{n - 1})")
    return ("prefill" if tag == "p" else "decode"), k


__all__ = ["DisaggSpec", "PoolSpec", "ShortPromptTokens", "parse_pool_node"]
