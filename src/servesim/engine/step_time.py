"""How long one engine step takes, from what the step computes.

The engine asks a ``StepTimeModel`` once per step, passing the batch composition: decodes
(one token each) with the sum of their context lengths, and prefill chunks with the context
each chunk attends to. The hardware/model roofline lives in ``servesim.perf``; here are the
two models the engine itself needs: a constant (for tests and step-by-step comparison with
vLLM's scheduler) and a linear stand-in.

With speculative decoding the drafter's passes after each step are timed too. A step-time model
that can time a drafter of its own (``servesim.perf``'s roofline) has a ``drafter(spec)`` method
returning a ``DraftTimeModel`` (``DraftSource``); for any other model, or when the config gives
``draft_step_fraction``, the engine charges that fraction of the target's decode step per pass
(``SpeculativeConfig.draft_fraction``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from servesim.engine.speculative import SpeculativeConfig

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


@runtime_checkable
class DraftTimeModel(Protocol):
    """The drafter's time after one target step (speculative decoding)."""

    def draft_time(self, batch: BatchComposition, num_rows: int, ctx_sum: int) -> float:
        """Seconds of the drafter's k passes after a target step over ``batch``: vLLM's first pass
        runs over every token the target computed (``batch``), the next k - 1 over one token per
        request of the step (``num_rows`` of them, whose contexts sum to ``ctx_sum`` as the step
        leaves them, growing by one a pass)."""
        ...

    def describe(self) -> str:
        """One line: what the drafter is and how it is timed (for reports)."""
        ...


@runtime_checkable
class DraftSource(Protocol):
    """A step-time model that times a drafter of its own (``perf``'s roofline does)."""

    def drafter(self, spec: SpeculativeConfig) -> DraftTimeModel | None:
        """The drafter of ``spec`` on this deployment, or None where it costs no GPU time
        (n-gram) and the config's fraction (0 for n-gram) applies. Raises ``ConfigError`` for
        a drafter that cannot run here (an unknown draft model, a TP vLLM refuses)."""
        ...


def resolve_drafter(step_time: object, spec: SpeculativeConfig) -> DraftTimeModel | None:
    """The drafter the engine times: the step-time model's own unless the config gives
    ``draft_step_fraction`` (which wins) or the model has none (None: the fraction applies)."""
    if spec.draft_step_fraction is not None or not isinstance(step_time, DraftSource):
        return None
    return step_time.drafter(spec)


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
