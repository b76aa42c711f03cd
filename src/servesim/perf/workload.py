"""inference-perf's ``shared_prefix`` multi-turn chat load, re-created from its spec (seeded).

The rule (from inference-perf's ``shared_prefix`` data generator, load timers and user
sessions; see ``tests/fixtures/sim2real/README.md``):

1. ``G`` system prompts x ``U`` users = ``N`` sessions; group *g*'s system prompt
   (``system_prompt_len`` tokens) is shared by its users and every round: a shared prefix.
2. Every prompt = system prompt + a question (``question_len`` tokens); ``max_tokens =
   output_len``. inference-perf pre-generates one question per session slot
   (``SharedPrefixDataGenerator._generate_prompts``: ``N`` prompts, request *i* uses prompt
   ``i mod N``), so every round of a session repeats its question and, once the session has
   run, the whole prompt is a prefix-cache hit (``questions="per-session"``, the default).
   ``questions="fresh"`` draws a new question per request (the sim2real README's wording).
3. Stages run back to back; stage *k* sends exactly ``floor(rate_k x duration_k)`` requests.
4. Load type ``constant`` (inference-perf's default): that many exponential gaps of mean
   ``1/rate``, rescaled to sum to the stage duration; request *j* is sent at the stage start
   plus the first *j+1* gaps. Load type ``poisson``: each second draws a Poisson(rate) count
   spread the same way over that second.
5. Request *i* of the run is round ``floor(i/N)`` of session slot ``i mod N`` (slots map to
   sessions in a fixed random order); a session has at most one request in flight, so a round
   due before the previous one finished is sent when it finishes (``RequestSet.predecessor``).
6. A request whose client timeout (``timeout_s``; aiohttp's 300 s unless the config sets
   ``load.request_timeout``) runs out fails: the client disconnects, vLLM aborts it, and the
   session's next round goes out (``LocalUserSession.update_context`` in ``process_failure``).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import InputError, shown
from servesim.perf.replay import RequestSet


class SharedPrefixData(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    num_unique_system_prompts: int = Field(ge=1)
    num_users_per_system_prompt: int = Field(ge=1)
    system_prompt_len: int = Field(ge=0)
    question_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    enable_multi_turn_chat: bool = True


class LoadStage(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    rate: float = Field(gt=0, description="Requests per second.")
    duration: float = Field(gt=0, description="Seconds.")


class SharedPrefixWorkload(BaseModel):
    """An inference-perf ``shared_prefix`` spec plus its load stages."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    shared_prefix: SharedPrefixData
    stages: list[LoadStage] = Field(min_length=1)

    @property
    def num_sessions(self) -> int:
        sp = self.shared_prefix
        return sp.num_unique_system_prompts * sp.num_users_per_system_prompt

    @property
    def stage_counts(self) -> list[int]:
        return [math.floor(s.rate * s.duration + 1e-9) for s in self.stages]


def stage_send_times(
    rate: float, duration: float, start: float, rng: np.random.Generator, load_type: str = "constant"
) -> np.ndarray:
    """One stage's send times under inference-perf's ``constant`` or ``poisson`` load type."""
    if load_type == "constant":
        n = math.floor(rate * duration + 1e-9)
        if n == 0:
            return np.zeros(0)
        gaps = rng.exponential(1.0 / rate, n)
        gaps *= duration / gaps.sum()
        return start + np.cumsum(gaps)
    if load_type == "poisson":
        out: list[np.ndarray] = []
        for sec in range(math.ceil(duration)):
            span = min(1.0, duration - sec)
            k = int(rng.poisson(rate * span))
            if k:
                g = rng.exponential(1.0, k)
                g *= span / g.sum()
                out.append(start + sec + np.cumsum(g))
        return np.concatenate(out) if out else np.zeros(0)
    raise InputError(f"unknown load type {shown(load_type)}: use constant or poisson")


def shared_prefix_requests(
    wl: SharedPrefixWorkload,
    *,
    seed: int = 42,
    load_type: Literal["constant", "poisson"] = "constant",
    output_len: int | None = None,
    one_in_flight: bool = True,
    questions: Literal["per-session", "fresh"] = "per-session",
    label: str = "inference-perf shared_prefix",
    timeout_s: float | None = None,
) -> RequestSet:
    """The requests of ``wl`` (seeded): send schedule, lengths, shared prefixes, session chaining.

    ``output_len`` overrides the spec's ``max_tokens`` (e.g. with a measured mean when the
    server stopped at EOS); ``one_in_flight=False`` drops the per-session limit; ``questions``:
    see rule 2 above; ``timeout_s``: the client's total timeout per request (rule 6).
    """
    if questions not in ("per-session", "fresh"):
        raise InputError(f"unknown questions mode {shown(questions)}: use per-session or fresh")
    rng = np.random.default_rng(seed)
    sp = wl.shared_prefix
    times: list[np.ndarray] = []
    stage_idx: list[np.ndarray] = []
    start = 0.0
    for k, st in enumerate(wl.stages):
        t = stage_send_times(st.rate, st.duration, start, rng, load_type)
        times.append(t)
        stage_idx.append(np.full(len(t), k, dtype=np.int64))
        start += st.duration
    sched = np.concatenate(times) if times else np.zeros(0)
    stage = np.concatenate(stage_idx) if stage_idx else np.zeros(0, dtype=np.int64)
    n = len(sched)
    n_sessions = wl.num_sessions
    slot_to_session = rng.permutation(n_sessions)
    slot = np.arange(n) % n_sessions
    session = slot_to_session[slot]
    group = session // sp.num_users_per_system_prompt
    prompt = sp.system_prompt_len + sp.question_len
    out_len = output_len if output_len is not None else sp.output_len
    predecessor = np.where(np.arange(n) >= n_sessions, np.arange(n) - n_sessions, -1).astype(np.int64)
    if questions == "per-session":
        # A session's prompt is the same every round: the whole prompt is its shared prefix (the
        # system prompt's blocks are shared across the group only in the first round; the
        # engine's prefix groups do not nest, and that first round is 1 of dozens).
        groups: list[str | None] = [f"session-{s}" for s in session.tolist()]
        plen = np.full(n, prompt, dtype=np.int64)
    else:
        has_prefix = sp.system_prompt_len > 0
        groups = [f"system-prompt-{g}" if has_prefix else None for g in group.tolist()]
        plen = np.full(n, sp.system_prompt_len if has_prefix else 0, dtype=np.int64)
    return RequestSet(
        scheduled=sched,
        prompt_len=np.full(n, prompt, dtype=np.int64),
        output_len=np.full(n, max(1, int(out_len)), dtype=np.int64),
        prefix_group=groups,
        prefix_len=plen,
        predecessor=predecessor if one_in_flight else None,
        stage=stage,
        label=label,
        timeout_s=timeout_s,
    )
