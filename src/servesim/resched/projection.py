"""Project a re-admission: a small discrete-event loop over engine steps, timed by a step-time model.

It follows vLLM V1's step (docs/vllm-scheduling.md §2) for a batch that starts empty:

* every step has a token budget (``max_num_batched_tokens``); the *running* requests are served
  first, in admission order, each ``min(tokens it still has to compute, budget left)`` tokens
  (one for a decode);
* then waiting requests are admitted strictly in queue order while a slot is free
  (``batch_capacity``) and budget is left, each with a (possibly partial) prefill chunk;
* a request samples a token in the step that computes its last known token; it completes
  with the step that samples its last remaining token.

A re-admitted request starts with ``computed = reused`` tokens and ``num_tokens`` known tokens
(``InterruptedRequest.num_tokens``): its first scheduled tokens recompute the non-reused part
together with the pending token (or the rest of the prompt), and that chunk samples the first of
its ``tokens_remaining`` tokens; each further token is one decode step. Each step's duration is
``step_time(BatchComposition(...))`` of exactly the tokens scheduled in it, built as the engine
builds it (a one-token piece is a decode with context ``computed + 1``; larger pieces are prefill
chunks ``(tokens, computed before)``). KV memory is assumed sufficient: nothing is preempted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from servesim.engine.step_time import BatchComposition, StepTimeModel
from servesim.errors import InputError


class Job(NamedTuple):
    """A request as the projection sees it."""

    num_tokens: int  # known tokens at re-admission (prompt + outputs so far)
    computed: int  # of those, already in the KV cache at re-admission (the reused tokens)
    samples: int  # tokens still to generate (>= 1)


class Projection(NamedTuple):
    """Times in seconds from now."""

    admitted_s: list[float]
    completion_s: list[float]
    num_steps: int


class _Running:
    __slots__ = ("computed", "i", "left", "num_tokens")

    def __init__(self, i: int, job: Job) -> None:
        self.i = i
        self.num_tokens = job.num_tokens
        self.computed = job.computed
        self.left = job.samples


def _duration(model: StepTimeModel, batch: BatchComposition) -> float:
    dt = model.step_time(batch)
    if not (isinstance(dt, int | float) and math.isfinite(dt) and dt > 0):
        raise InputError(f"step-time model returned {dt!r} for {batch!r}; a step must take a finite time > 0")
    return float(dt)


def _decode_stretch(
    running: list[_Running], model: StepTimeModel, t: float, completion: list[float]
) -> tuple[list[_Running], float, int]:
    """Pure decode steps until the first of ``running`` completes: m decodes per step, each
    context one longer than in the step before. The requests still running, the time, the steps."""
    m = len(running)
    k = min(r.left for r in running)
    ctx = sum(r.computed + 1 for r in running)
    for q in range(k):
        t += _duration(model, BatchComposition(m, ctx + q * m, []))
    for r in running:
        r.computed += k
        r.num_tokens += k
        r.left -= k
        if r.left == 0:
            completion[r.i] = t
    return [r for r in running if r.left > 0], t, k


class _Queue:
    """The jobs not yet admitted, in admission order, and when each was admitted."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = jobs
        self.next = 0
        self.admitted = [0.0] * len(jobs)

    @property
    def empty(self) -> bool:
        return self.next >= len(self.jobs)

    def admit(self, t: float) -> _Running:
        r = _Running(self.next, self.jobs[self.next])
        self.admitted[self.next] = t
        self.next += 1
        return r


def _schedule(
    running: list[_Running], queue: _Queue, batch_capacity: int, budget: int, t: float
) -> list[tuple[_Running, int]]:
    """One step's tokens: the running requests first (in order), then new admissions while the
    budget and the batch have room (``running`` grows by them)."""
    left = budget
    scheduled: list[tuple[_Running, int]] = []
    for r in running:
        if left == 0:
            break
        c = min(r.num_tokens - r.computed, left)
        scheduled.append((r, c))
        left -= c
    while left > 0 and not queue.empty and len(running) < batch_capacity:
        r = queue.admit(t)
        running.append(r)
        c = min(r.num_tokens - r.computed, left)
        scheduled.append((r, c))
        left -= c
    return scheduled


def _composition(scheduled: list[tuple[_Running, int]]) -> BatchComposition:
    decodes = 0
    ctx = 0
    chunks: list[tuple[int, int]] = []
    for r, c in scheduled:
        if c == 1:
            decodes += 1
            ctx += r.computed + 1
        else:
            chunks.append((c, r.computed))
    return BatchComposition(decodes, ctx, chunks)


def _advance(scheduled: list[tuple[_Running, int]], t: float, completion: list[float]) -> bool:
    """Apply a step's tokens; True when a request completed in it."""
    finished = False
    for r, c in scheduled:
        r.computed += c
        if r.computed == r.num_tokens:
            r.num_tokens += 1
            r.left -= 1
            if r.left == 0:
                completion[r.i] = t
                finished = True
    return finished


def project(
    jobs: Sequence[Job],
    batch_capacity: int,
    max_num_batched_tokens: int,
    model: StepTimeModel,
    *,
    fast: bool = True,
) -> Projection:
    """Admit ``jobs`` in the given order into an empty batch and time every step until all complete.

    ``fast`` runs stretches of pure-decode steps without per-request work (same steps, same
    step times, same sums in the same order: identical results to ``fast=False``).
    """
    if batch_capacity < 1 or max_num_batched_tokens < 1:
        raise InputError("batch_capacity and max_num_batched_tokens must be >= 1")
    for j in jobs:
        if not (0 <= j.computed < j.num_tokens and j.samples >= 1):
            raise InputError(f"invalid job {j}")
    queue = _Queue(jobs)
    completion = [0.0] * len(jobs)
    running: list[_Running] = []
    t = 0.0
    steps = 0
    budget = max_num_batched_tokens
    while running or not queue.empty:
        m = len(running)
        if (
            fast
            and m
            and m <= budget
            and (queue.empty or m >= batch_capacity)
            and all(r.num_tokens - r.computed == 1 for r in running)
        ):
            running, t, k = _decode_stretch(running, model, t, completion)
            steps += k
            continue
        scheduled = _schedule(running, queue, batch_capacity, budget, t)
        t += _duration(model, _composition(scheduled))
        steps += 1
        if _advance(scheduled, t, completion):
            running = [r for r in running if r.left > 0]
    return Projection(queue.admitted, completion, steps)


def solo_service_s(job: Job, max_num_batched_tokens: int, model: StepTimeModel) -> float:
    """How long ``job`` takes if started now alone in the batch."""
    return project([job], 1, max_num_batched_tokens, model).completion_s[0]
