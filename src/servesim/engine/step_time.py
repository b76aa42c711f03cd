"""How long one engine step takes, from what the step computes.

The engine asks a ``StepTimeModel`` once per step, passing the batch composition: decodes
(one token each) with the sum of their context lengths, and prefill chunks with the context
each chunk attends to. The hardware/model roofline lives in ``servesim.perf``; here are the
two models the engine itself needs: a constant (for tests and step-by-step comparison with
vLLM's scheduler) and a linear stand-in.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class BatchComposition:
    """What one step computes. ``prefill_chunks`` holds (new tokens, tokens already in the KV
    cache before the chunk) per request that is prefilling more than one token; a request
    scheduled for exactly one token counts as a decode, with context = computed + 1."""

    __slots__ = ("decode_ctx_sum", "num_decodes", "num_prefill_tokens", "prefill_chunks")

    def __init__(
        self,
        num_decodes: int,
        decode_ctx_sum: int,
        prefill_chunks: list[tuple[int, int]],
        num_prefill_tokens: int | None = None,
    ) -> None:
        self.num_decodes = num_decodes
        self.decode_ctx_sum = decode_ctx_sum
        self.prefill_chunks = prefill_chunks
        # The sum of the chunks' new tokens (the engine passes it; it has it at hand).
        self.num_prefill_tokens = (
            sum(c for c, _ in prefill_chunks) if num_prefill_tokens is None else num_prefill_tokens
        )

    @property
    def num_tokens(self) -> int:
        return self.num_decodes + self.num_prefill_tokens

    def __repr__(self) -> str:
        return (
            f"BatchComposition(decodes={self.num_decodes}, decode_ctx_sum={self.decode_ctx_sum}, "
            f"prefill_chunks={self.prefill_chunks})"
        )


@runtime_checkable
class StepTimeModel(Protocol):
    """Anything that turns a batch composition into a step duration in seconds (> 0)."""

    def step_time(self, batch: BatchComposition) -> float: ...


class ConstantStepTime(BaseModel):
    """Every step takes ``step_time_s``: the model for exact comparisons with vLLM's schedule."""

    model_config = ConfigDict(frozen=True)
    kind: str = "constant"
    step_time_s: float = Field(gt=0, allow_inf_nan=False)

    def step_time(self, batch: BatchComposition) -> float:
        return self.step_time_s


class LinearStepTime(BaseModel):
    """``t = base + per_token·tokens + per_decode_ctx·Σdecode ctx + per_prefill_attn·Σ chunk·(ctx+chunk/2)``.

    A stand-in until a hardware profile is given: the default coefficients are rough figures
    for an 8B-parameter model in bf16 on one H100-class GPU (weights read ≈ 5 ms per step plus
    ≈ 2 ms overhead, ≈ 30 µs of GEMM per token, 128 KiB of KV read per context token at
    ≈ 3 TB/s, ≈ 1 ns per query-key pair of prefill attention). Use ``servesim.perf`` for real
    answers.
    """

    model_config = ConfigDict(frozen=True)
    kind: str = "linear"
    base_s: float = Field(7.0e-3, ge=0)
    per_token_s: float = Field(3.0e-5, ge=0)
    per_decode_ctx_s: float = Field(4.4e-8, ge=0)
    per_prefill_attn_s: float = Field(1.0e-9, ge=0)

    def step_time(self, batch: BatchComposition) -> float:
        attn = 0.0
        tokens = batch.num_decodes
        for chunk, ctx in batch.prefill_chunks:
            tokens += chunk
            attn += chunk * (ctx + 0.5 * chunk)
        return (
            self.base_s
            + self.per_token_s * tokens
            + self.per_decode_ctx_s * batch.decode_ctx_sum
            + self.per_prefill_attn_s * attn
        )
