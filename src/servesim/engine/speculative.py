"""Speculative decoding: vLLM's ``--speculative-config`` and the acceptance of draft tokens.

What the scheduler needs from vLLM 0.33 (``vllm/config/speculative.py``, ``vllm/config/vllm.py``):

* ``num_speculative_tokens`` k: drafts proposed per decoding request after each step;
* ``num_lookahead_tokens``: KV slots reserved past the scheduled tokens, k for drafters with a
  KV cache of their own (``eagle``, ``eagle3``, ``mtp``, ``draft_model``), 0 for ``ngram``;
* ``max_num_new_slots_for_drafting``: extra input rows per scheduled request (1 for an
  autoregressive ``draft_model``, 0 for the others), taken from the step's input budget.

Acceptance is not a scheduling decision: the target model verifies the drafts. servesim draws it
from a per-position model (``AcceptanceModel``): the i-th draft is accepted with probability
``rates[i]`` given that the ones before it were (the chain rule vLLM's rejection sampler applies),
seeded per (request, verification) so that a run is deterministic whatever the batch order.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import random
from array import array
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from servesim.bounds import MAX_SEED
from servesim.engine import spec_draws
from servesim.engine.request import Request
from servesim.errors import ConfigError, reject_bool

SpecMethod = Literal["ngram", "eagle", "eagle3", "mtp", "draft_model"]

#: Per-position conditional acceptance rates by method (position 1 first), used when neither the
#: config (``acceptance_rates``) nor the trace (``spec_accept_rate``) gives them. Each preset is
#: checked against the published figure in ``ACCEPTANCE_SOURCES``; the figure it reproduces is the
#: mean acceptance length (tokens per verifying step, 1 + accepted drafts) at the stated k, or
#: the first-position rate. These are presets, not measurements of your model: give your own.
ACCEPTANCE_PRESETS: dict[str, tuple[float, ...]] = {
    "eagle3": (0.80, 0.75, 0.72, 0.70, 0.68, 0.66, 0.64, 0.62),
    "eagle": (0.75, 0.70, 0.65, 0.62, 0.60, 0.58, 0.56, 0.54),
    "mtp": (0.88, 0.80, 0.75, 0.70, 0.66, 0.62, 0.58, 0.55),
    "ngram": (0.50, 0.45, 0.40, 0.36, 0.33, 0.30, 0.28, 0.26),
    "draft_model": (0.72, 0.68, 0.65, 0.62, 0.60, 0.58, 0.56, 0.54),
}

#: Where each preset comes from, and what it reproduces (docs/perf.md, "Acceptance presets").
ACCEPTANCE_SOURCES: dict[str, str] = {
    "eagle3": (
        "EAGLE-3 (Li et al., arXiv:2503.01840): LLaMA-3.1-8B-Instruct on MT-bench; in SGLang on one "
        "H100 158.34 -> 373.25 tok/s at batch 1 (2.36x) and 1.38x throughput at batch 64. The paper's "
        "acceptance lengths (~6 tokens) are for tree drafts of depth 8; for vLLM's chain the preset "
        "gives 2.83 tokens/step at k = 3 and 3.34 at k = 5, which reproduces the batch-1 speed-up "
        "within 5 % on servesim's roofline (benchmarks/spec_decode.py --validate)"
    ),
    "eagle": (
        "EAGLE (Li et al., arXiv:2401.15077) reports a first-draft acceptance rate (0-alpha) of "
        "~0.75-0.8 on MT-bench for 7B chat models, falling with depth; EAGLE-2 (arXiv:2406.16858) "
        "~1.4x faster than EAGLE-1 with dynamic trees. Preset: 0.75 first, 2.62 tokens/step at k = 3"
    ),
    "mtp": (
        "DeepSeek-V3 technical report (arXiv:2412.19437, sec. 5.4.3): the second token of its one "
        "MTP module is accepted 85-90 % of the time, 1.8x tokens/s. Preset: 0.88 first (inside "
        "85-90 %), 1.88 tokens/step at k = 1 (DeepSeek: 1.8x tokens/s); later positions reuse the "
        "module (vLLM) and decay, a servesim extrapolation"
    ),
    "ngram": (
        "vLLM docs (features/speculative_decoding, n-gram): prompt lookup gives modest speed-ups "
        "except on input-grounded tasks (summarisation, code edits); no per-position figure is "
        "published. Preset: 0.5 first, 1.81 tokens/step at k = 3, a chat-like guess, not a measurement"
    ),
    "draft_model": (
        "vLLM PR #24322 (draft_model method) measures acceptance lengths for same-family drafts "
        "(e.g. Qwen3-1.7B for Qwen3-32B, k = 3) on MT-bench without a per-position table. Preset: "
        "0.72 first, 2.53 tokens/step at k = 3, a small same-family draft; not a measurement"
    ),
}

MAX_SPEC_TOKENS = 16

#: One draft pass relative to a target decode step over the same sequences (the drafter runs k
#: passes per step): the fallback for step-time models without a drafter roofline of their own
#: (the engine's constant and linear models; ``servesim.perf``'s roofline times the drafter itself,
#: ``perf/drafter.py``), and what ``draft_step_fraction`` overrides. ngram: a CPU lookup (0).
#: EAGLE/EAGLE-3 head and one MTP module: about one decoder layer plus the LM head of an 8B
#: target's weight reads, ~0.06 (the roofline gives 0.047 for Llama-3.1-8B's EAGLE-3 head at
#: batch 1, 0.055 at batch 64, on one H100); a same-family 1B draft for an 8B target: its
#: parameter ratio, ~0.15 (roofline: 0.16 at batch 1). Roofline ratios, not measurements.
DRAFT_STEP_FRACTION: dict[str, float] = {
    "ngram": 0.0,
    "eagle": 0.06,
    "eagle3": 0.07,  # EAGLE-3 fuses three feature layers into its input: slightly wider
    "mtp": 0.06,
    "draft_model": 0.15,
}


class SpeculativeConfig(BaseModel):
    """vLLM's ``--speculative-config`` (its JSON keys), plus servesim's acceptance inputs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: SpecMethod = Field(description="Drafter: ngram, eagle, eagle3, mtp or draft_model.")
    num_speculative_tokens: int = Field(ge=1, le=MAX_SPEC_TOKENS, description="Drafts per step (k).")
    draft_tensor_parallel_size: int | None = Field(
        None, ge=1, le=64, description="TP of the drafter: 1 or the target's (vLLM's default: the target's)."
    )
    model: str | None = Field(
        None,
        description="draft_model: the draft model, a name of servesim's catalog (or a local config.json), "
        "timed on the roofline; eagle/eagle3/mtp: the head's checkpoint (not read: the head is derived "
        "from the target's shape).",
    )
    # servesim additions (vLLM measures these; a simulator must be told them).
    acceptance_rates: tuple[float, ...] | None = Field(
        None,
        description="Per-position conditional acceptance rates (default: the method's preset).",
    )
    acceptance_seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of the accept/reject draws.")
    draft_step_fraction: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="Time of one draft pass over the batch, as a fraction of the target's "
        "decode step for the same sequences. Given, it wins; unset, the roofline times the drafter "
        "itself, and other step-time models use the method's DRAFT_STEP_FRACTION.",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_json(cls, data: Any) -> Any:
        """Accept vLLM's flag form, a JSON object in a string."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except json.JSONDecodeError as e:
                raise ConfigError(f"speculative_config: not a JSON object: {e.msg}") from None
            if not isinstance(data, dict):
                raise ConfigError(
                    "speculative_config: must be a JSON object, e.g. "
                    '\'{"method": "eagle3", "num_speculative_tokens": 3}\''
                )
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in _IGNORED_VLLM_KEYS}
        return data

    @model_validator(mode="wrap")
    @classmethod
    def _unknown_keys(cls, data: Any, handler: Any) -> Any:
        """An unknown key is named where it is (``speculative_config.num_speculativ_tokens``)
        with the closest known key (difflib), and said first: a typo also leaves a field missing."""
        try:
            return handler(data)
        except ValidationError as exc:
            errors = exc.errors()
            if not any(e["type"] == "extra_forbidden" for e in errors):
                raise
            known = list(cls.model_fields)
            out: list[Any] = []
            for e in sorted(errors, key=lambda e: e["type"] != "extra_forbidden"):
                if e["type"] == "extra_forbidden":
                    close = difflib.get_close_matches(str(e["loc"][-1]), known, n=1)
                    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
                    kind = PydanticCustomError("extra_forbidden", "unknown key; {hint}", {"hint": hint})
                    out.append({"type": kind, "loc": e["loc"], "input": e["input"]})
                else:
                    ctx = {"ctx": e["ctx"]} if "ctx" in e else {}
                    out.append({"type": e["type"], "loc": e["loc"], "input": e["input"], **ctx})
            raise ValidationError.from_exception_data(exc.title, out) from None

    _no_bool = field_validator(
        "num_speculative_tokens",
        "draft_tensor_parallel_size",
        "acceptance_seed",
        mode="before",
    )(lambda v: reject_bool(v))

    @field_validator("draft_step_fraction", mode="before")
    @classmethod
    def _fraction_not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ConfigError(f"expected a number in [0, 1], got {value!r}")
        return value

    @field_validator("acceptance_rates", mode="before")
    @classmethod
    def _rates_not_bool(cls, rates: Any) -> Any:
        if isinstance(rates, list | tuple) and any(isinstance(p, bool) for p in rates):
            raise ConfigError("expected numbers in [0, 1], got a boolean")
        return rates

    @field_validator("acceptance_rates")
    @classmethod
    def _check_rates(cls, rates: tuple[float, ...] | None) -> tuple[float, ...] | None:
        if rates is not None and (not rates or any(not 0.0 <= p <= 1.0 for p in rates)):
            raise ConfigError("at least one rate, each in [0, 1]")
        return rates

    @model_validator(mode="after")
    def _drafter_given(self) -> SpeculativeConfig:
        """What vLLM needs to start each method that no catalog default can give: the
        ``draft_model`` method runs the model named in ``model`` (vLLM refuses it without one);
        eagle/eagle3/mtp may leave it out (the catalog's published head, or the target's own MTP
        layers, is resolved for the served model: ``perf.speculators.draft_checkpoint``)."""
        if self.method == "draft_model" and self.model is None:
            raise ConfigError(
                'model: method \'draft_model\' needs the draft model, e.g. "model": "llama-3.2-1b" '
                "(a model of servesim's catalog or a Hugging Face id); vLLM does not start without it"
            )
        return self

    @property
    def num_lookahead_tokens(self) -> int:
        """vLLM's ``VllmConfig.num_lookahead_tokens``: drafters with their own KV write k slots ahead."""
        return 0 if self.method == "ngram" else self.num_speculative_tokens

    def num_hash_lookahead_tokens(self, prefix_caching: bool) -> int:
        """vLLM's ``VllmConfig.num_hash_lookahead_tokens``: an EAGLE-style drafter (eagle, eagle3,
        a one-module mtp) builds a position's draft KV from the next token too, so with prefix
        caching each block's hash covers that token (and vLLM then drops no block from a hit);
        1 for them, 0 otherwise (servesim refuses speculation with a KV connector, which would
        keep vLLM's legacy hashes)."""
        return 1 if prefix_caching and self.method in ("eagle", "eagle3", "mtp") else 0

    @property
    def draft_slots(self) -> int:
        """vLLM's ``max_num_new_slots_for_drafting`` (non-parallel drafting)."""
        return 1 if self.method == "draft_model" else 0

    def draft_fraction(self) -> float:
        """One draft pass as a fraction of the target's decode step: the one given, else the
        method's ``DRAFT_STEP_FRACTION`` (used only where the step-time model has no drafter)."""
        f = self.draft_step_fraction
        return DRAFT_STEP_FRACTION[self.method] if f is None else f

    def rates(self) -> tuple[float, ...]:
        """Conditional acceptance per position 1..k (the last given rate repeats)."""
        base = self.acceptance_rates or ACCEPTANCE_PRESETS[self.method]
        k = self.num_speculative_tokens
        return tuple(base[i] if i < len(base) else base[-1] for i in range(k))

    def mean_accepted(self) -> float:
        """Expected accepted drafts per verification of k drafts: sum of the chain products."""
        total = 0.0
        prod = 1.0
        for p in self.rates():
            prod *= p
            total += prod
        return total


#: vLLM keys a user may pass that change nothing servesim models.
_IGNORED_VLLM_KEYS = frozenset({"prompt_lookup_max", "prompt_lookup_min", "quantization", "revision"})


def describe_draft_timing(spec: SpeculativeConfig | None, drafter: Any, fraction: float) -> str:
    """How the drafter's passes are timed, in one line ("" without speculative decoding):
    ``drafter`` is the step-time model's own (``DraftTimeModel``, None without), ``fraction``
    the share of the target's decode step charged per pass otherwise."""
    if spec is None:
        return ""
    if drafter is not None:
        return str(drafter.describe())
    if spec.draft_step_fraction is not None:
        return f"each pass {fraction:g} of the target's decode step (draft_step_fraction, as given)"
    if fraction == 0.0:
        return f"{spec.method}: no GPU time charged (a CPU lookup)"
    return (
        f"each pass {fraction:g} of the target's decode step (DRAFT_STEP_FRACTION[{spec.method!r}]: "
        "the step-time model has no drafter roofline)"
    )


class AcceptanceModel:
    """How many of ``n`` drafts the target accepts: position i with ``rates[i]`` given i-1 were.

    Draws come from a generator seeded by (seed, request index, verification number), so they
    do not depend on batch composition or on which other requests ran. ``per_request`` (by trace
    position, the trace's ``spec_accept_rate`` column) overrides the rates of the requests that
    have one with that rate at every position; NaN rows, and requests past its end, keep ``rates``."""

    __slots__ = ("_cap", "_flat", "_rates", "_table", "per_request", "rates", "seed")

    def __init__(self, rates: tuple[float, ...], seed: int, per_request: list[float] | None = None) -> None:
        self.rates = rates
        self.seed = seed
        self.per_request = per_request
        self._rates = array("d", rates)  # the same, as the compiled draws read them
        self._flat = array("d", per_request) if per_request is not None else None
        # Drafts a compiled look-ahead draw counts up to (more than k costs little: the chain
        # usually stops at a rejection well before); asked for more, the draws are made one by one.
        self._cap = min(max(len(rates), MAX_SPEC_TOKENS), spec_draws.MAX_DRAWS)
        self._table = _draw_table(seed, self._rates, self._flat, self._cap)

    def accepted_many(self, reqs: list[Request], ns: list[int]) -> list[int]:
        """``accepted(reqs[i], ns[i])`` for each i: one step's verifications, drawn by the
        compiled core (``spec_draws``: the same numbers, without a ``random.Random`` each, and
        each request's next verifications drawn ahead, kept in a table of these draws)."""
        if spec_draws.COMPILED and max(ns) <= self._cap and self.seed < 1 << 63:
            out: list[int] = []
            table = self._table
            if len(table) > DRAW_TABLE_MAX:
                table.clear()  # a bound on memory: what is dropped is drawn again when asked
            spec_draws.accepted_batch(self.seed, reqs, ns, self._rates, self._flat, self._cap, table, out)
            return out
        return [self.accepted(r, n) for r, n in zip(reqs, ns, strict=True)]

    def accepted(self, r: Request, n: int) -> int:
        """Drafts accepted of ``n`` at ``r``'s next verification."""
        rng = random.Random((self.seed << 48) ^ (r.idx << 20) ^ r.spec_verifications)
        a = 0
        pr = self.per_request
        if pr is not None and r.idx < len(pr):
            p = pr[r.idx]
            if p == p:  # not NaN: the request's own rate at every position
                while a < n and rng.random() < p:
                    a += 1
                return a
        rates = self.rates
        while a < n and rng.random() < rates[a if a < len(rates) else -1]:
            a += 1
        return a


#: Requests whose drawn-ahead acceptance counts a table holds at most: about 200 bytes each (a
#: count per verification), so a few tables stay within tens of MB in a long-lived process.
DRAW_TABLE_MAX = 1 << 16
_DRAW_TABLES: dict[tuple[int, bytes, bytes, int], dict[int, tuple[int, bytes]]] = {}


def _draw_table(
    seed: int, rates: array[float], flat: array[float] | None, cap: int
) -> dict[int, tuple[int, bytes]]:
    """The look-ahead table of these draws (``spec_draws.accepted_batch``), shared by every
    model of the same seed, rates, per-request rates and cap in this process: the counts are a
    function of (seed, request index, verification number) alone, and a tuning study replays
    the same trace's verifications in every trial (each worker then draws them once). The last
    few draws' tables are kept; per-request rates are told apart by their digest."""
    digest = hashlib.blake2b(flat.tobytes(), digest_size=16).digest() if flat is not None else b""
    key = (seed, rates.tobytes(), digest, cap)
    table = _DRAW_TABLES.get(key)
    if table is None:
        if len(_DRAW_TABLES) >= 4:
            del _DRAW_TABLES[next(iter(_DRAW_TABLES))]  # the oldest
        table = _DRAW_TABLES[key] = {}
    return table


class ScriptedAcceptance:
    """Accepted counts given per request, one per verification in order: replays a recorded run
    (the vLLM oracle's fake model runner); a verification beyond the script accepts nothing."""

    __slots__ = ("script",)

    def __init__(self, script: dict[str, list[int]]) -> None:
        self.script = script  # request id -> accepted count of each verification in order

    def accepted_many(self, reqs: list[Request], ns: list[int]) -> list[int]:
        """``accepted(reqs[i], ns[i])`` for each i (the scheduler asks a step's at once)."""
        return [self.accepted(r, n) for r, n in zip(reqs, ns, strict=True)]

    def accepted(self, r: Request, n: int) -> int:
        seq = self.script.get(str(r.req_id), ())
        nth = r.spec_verifications
        got = seq[nth] if nth < len(seq) else 0
        return got if got < n else n


class ScriptedDrafts:
    """Draft lengths given per request, one per proposal in order (``Scheduler.drafts``): replays
    a recorded drafter that sometimes proposes fewer than k (the vLLM oracle's, as an n-gram
    proposer does on a miss); a proposal beyond the script is k. Lengths are capped at k."""

    __slots__ = ("script", "taken")

    def __init__(self, script: dict[str, list[int]]) -> None:
        self.script = script  # request id -> drafts of each proposal in order
        self.taken: dict[str, int] = {}  # request id -> proposals made so far

    def proposed(self, r: Request, k: int) -> int:
        rid = str(r.req_id)
        nth = self.taken.get(rid, 0)
        self.taken[rid] = nth + 1
        seq = self.script.get(rid, ())
        got = seq[nth] if nth < len(seq) else k
        return got if got < k else k
