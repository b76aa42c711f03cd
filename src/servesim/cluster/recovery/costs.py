"""The cost model of recovering one job on one survivor: COLD_RESTART vs MIGRATE_STATE.

Every term is named after what it models (docs/recovery.md, "Cost model"):

* ``queue_wait``  — steps the target spends on prefill tokens queued ahead of the job (FCFS),
  each step also carrying the target's running decodes;
* ``prefill``     — the target's steps that compute the job's tokens: chunks of at most
  ``max_num_batched_tokens − running decodes`` tokens, each step timed by the target's
  ``StepTimeModel`` with a ``BatchComposition`` that holds the decodes and the chunk (and the
  tail of the queue when they share a step);
* ``setup``       — fixed cost of one KV transfer (connection, metadata, registration);
* ``transfer``    — ``bits / (bandwidth x efficiency)``, bits = KV bytes of the moved tokens per
  TP rank (``nic_per_rank``: ranks move their shards in parallel) or of all ranks (one shared link);
* ``capacity_wait`` — time until the target has a free slot and the job's KV blocks.

COLD_RESTART  = capacity_wait + queue_wait + prefill(N − prefix hit)
MIGRATE_STATE = capacity_wait + queue_wait + link_wait + setup + transfer + prefill(max(1, N − covered))

``link_wait`` — transfers to one target share its inbound link: a job waits for the ones placed
there before it.

**The load an option puts on the survivor** (``load_s``): the job's own time is not the whole
cost. Every step that carries its recomputed (or resumed) tokens also carries the target's
running decodes, and lasts longer than their decode-only step would: each of them is delayed by
the difference. ``load = running decodes x (prefill − steps x decode-only step)``. A cold restart
of a long sequence on a busy survivor stalls all its decodes for a few hundred milliseconds; a
migration's one-token resume costs them nearly nothing. The cluster simulation's planner chooses
by own time + load (``StrategyCost.score_s``, ``decide_job(weigh_load=True)``); on idle survivors
the load is 0 and the choice is the job's own time, which is what the stand-alone plan uses.

``covered`` = max(prefix hit, checkpoint offset). The ``max(1, ...)``: vLLM never takes the last
token's KV from outside — it recomputes it to get the logits of the next token (docs §5, §9) —
so a fully covered job still costs one decode-sized step; that token is not counted in
``recompute_tokens`` (its KV arrived; only its logits are computed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from servesim.cluster.recovery.models import JobSpec, Strategy
from servesim.engine.step_time import BatchComposition, StepTimeModel
from servesim.errors import InputError
from servesim.perf import ModelSpec, kv_bytes_per_token


@dataclass(frozen=True)
class RecoveryContext:
    """What every per-job decision needs besides the survivors: the model, its KV size and the link.

    ``block_size`` is the failed node's page size (checkpoint offsets given in blocks use it).
    """

    model: ModelSpec
    tp: int = 1
    kv_dtype: str = "auto"
    bandwidth_gbps: float = 10.0
    transfer_efficiency: float = 0.9
    setup_latency_s: float = 0.010
    nic_per_rank: bool = True
    block_size: int = 16
    kv_bytes_per_token_per_rank: int = field(init=False)

    def __post_init__(self) -> None:
        if not (self.bandwidth_gbps > 0 and math.isfinite(self.bandwidth_gbps)):
            raise InputError(f"bandwidth_gbps must be a positive number, got {self.bandwidth_gbps}")
        if not 0 < self.transfer_efficiency <= 1:
            raise InputError(f"transfer_efficiency must be in (0, 1], got {self.transfer_efficiency}")
        if not (self.setup_latency_s >= 0 and math.isfinite(self.setup_latency_s)):
            raise InputError(f"setup_latency_s must be >= 0, got {self.setup_latency_s}")
        if self.block_size < 1:
            raise InputError(f"block_size must be >= 1, got {self.block_size}")
        # THE KV-size formula (servesim.perf); raises for an impossible TP degree.
        object.__setattr__(
            self, "kv_bytes_per_token_per_rank", kv_bytes_per_token(self.model, self.tp, self.kv_dtype)
        )

    def with_bandwidth(self, gbps: float) -> RecoveryContext:
        return dataclasses.replace(self, bandwidth_gbps=gbps)

    def bytes_per_rank(self, tokens: int) -> int:
        return self.kv_bytes_per_token_per_rank * tokens

    def bytes_total(self, tokens: int) -> int:
        """What the target's GPUs receive, all ranks together (replicated KV heads count per rank)."""
        return self.bytes_per_rank(tokens) * self.tp

    def wire_bits(self, tokens: int) -> float:
        """Bits one link carries: one rank's shard with ``nic_per_rank``, else every rank's."""
        b = self.bytes_per_rank(tokens) if self.nic_per_rank else self.bytes_total(tokens)
        return 8.0 * b

    def transfer_s(self, tokens: int, bandwidth_gbps: float | None = None) -> float:
        gbps = self.bandwidth_gbps if bandwidth_gbps is None else bandwidth_gbps
        return self.wire_bits(tokens) / (gbps * 1e9 * self.transfer_efficiency)


@dataclass(frozen=True)
class Release:
    """Capacity a survivor gets back ``after_s`` seconds after the failure."""

    after_s: float
    blocks: int = 0
    slots: int = 0


@dataclass(frozen=True, eq=False)
class TargetState:
    """A survivor at failure time, as the decision needs it.

    ``free_blocks``/``free_slots`` may be negative in states returned by ``place``: capacity
    promised to jobs that wait for ``releases``. ``queued_prefill_tokens`` are prefill tokens
    the target will schedule before a newly arrived request (its waiting queue plus unfinished
    chunks). ``cached_prefix_tokens`` maps a job_id to how many leading tokens of that job its
    prefix cache holds (the cluster simulation knows; the stand-alone planner assumes none).
    """

    name: str
    step_time: StepTimeModel
    free_blocks: int
    free_slots: int
    block_size: int = 16
    max_num_batched_tokens: int = 2048
    running_decodes: int = 0
    decode_ctx_sum: int = 0
    queued_prefill_tokens: int = 0
    cached_prefix_tokens: Mapping[str, int] = field(default_factory=dict)
    releases: tuple[Release, ...] = ()
    link_wait_s: float = 0.0  # until transfers already bound for this target have landed

    def __post_init__(self) -> None:
        if self.block_size < 1 or self.max_num_batched_tokens < 1:
            raise InputError(f"{self.name}: block_size and max_num_batched_tokens must be >= 1")
        if min(self.running_decodes, self.decode_ctx_sum, self.queued_prefill_tokens) < 0:
            raise InputError(
                f"{self.name}: running_decodes, decode_ctx_sum, queued_prefill_tokens must be >= 0"
            )
        object.__setattr__(self, "releases", tuple(sorted(self.releases, key=lambda r: r.after_s)))

    @property
    def prefill_budget(self) -> int:
        """Prefill tokens per step: the token budget after the running decodes (RUNNING first, §2)."""
        return max(1, self.max_num_batched_tokens - self.running_decodes)

    def prefix_hit(self, job: JobSpec) -> int:
        """Cached prefix tokens usable by ``job``: whole blocks, at most N − 1 (vLLM's lookup cap, §5)."""
        cached = max(0, int(self.cached_prefix_tokens.get(job.job_id, 0)))
        n = job.num_tokens
        return (min(cached, n - 1) // self.block_size) * self.block_size

    def blocks_needed(self, job: JobSpec) -> int:
        """New blocks for the whole sequence (``scheduler_reserve_full_isl``) beyond the hit blocks."""
        return -(-job.num_tokens // self.block_size) - self.prefix_hit(job) // self.block_size

    def capacity_wait_s(self, blocks: int, slots: int = 1) -> float | None:
        """0 if the job fits now, else the first release after which it fits, None if none does."""
        fb, fs = self.free_blocks, self.free_slots
        if fb >= blocks and fs >= slots:
            return 0.0
        for r in self.releases:
            fb += r.blocks
            fs += r.slots
            if fb >= blocks and fs >= slots:
                return r.after_s
        return None


def _step(target: TargetState, chunks: list[tuple[int, int]]) -> float:
    """One step: the target's decodes plus ``chunks``; a 1-token chunk is a decode (engine rule)."""
    nd = target.running_decodes
    ctx = target.decode_ctx_sum
    pre: list[tuple[int, int]] = []
    for c, p in chunks:
        if c == 1:
            nd += 1
            ctx += p + 1
        elif c > 1:
            pre.append((c, p))
    return target.step_time.step_time(BatchComposition(nd, ctx, pre))


@dataclass(frozen=True)
class Timeline:
    queue_wait_s: float
    prefill_s: float
    steps: int
    job_steps: int = 0  # the steps that carry the job's tokens


def decode_load_s(target: TargetState, tl: Timeline) -> float:
    """Delay the job's steps add to the target's running decodes, summed over them."""
    if target.running_decodes == 0 or tl.job_steps == 0:
        return 0.0
    alone = _step(target, [])
    return target.running_decodes * max(0.0, tl.prefill_s - tl.job_steps * alone)


def prefill_timeline(target: TargetState, tokens: int, start_ctx: int, ahead: int) -> Timeline:
    """Time the target takes for ``ahead`` queued prefill tokens, then the job's ``tokens`` (its KV
    starting at ``start_ctx``), chunked by the prefill budget next to the running decodes.

    ``queue_wait_s``: the steps that carry only queued tokens. ``prefill_s``: the steps that carry
    the job's tokens (the first may also finish the queue). Queued tokens are timed as chunks with
    no prior context (their own contexts are unknown); decode contexts are held constant.
    """
    budget = target.prefill_budget
    full, rest = divmod(max(0, ahead), budget)
    wait = full * _step(target, [(budget, 0)]) if full else 0.0
    steps = full
    prefill = 0.0
    done = 0
    first = True
    job_steps = 0
    while done < tokens:
        room = budget - rest if first else budget
        c = min(room, tokens - done)
        chunks = [(rest, 0), (c, start_ctx + done)] if first and rest else [(c, start_ctx + done)]
        prefill += _step(target, chunks)
        done += c
        steps += 1
        job_steps += 1
        first = False
    return Timeline(wait, prefill, steps, job_steps)


@dataclass(frozen=True)
class StrategyCost:
    """One strategy for one job on one target, term by term (seconds)."""

    strategy: Strategy
    prefix_hit_tokens: int
    moved_tokens: int
    recompute_tokens: int
    forward_tokens: int
    queue_wait_s: float
    setup_s: float
    transfer_s: float
    prefill_s: float
    link_wait_s: float = 0.0
    load_s: float = 0.0  # delay added to the target's running decodes, summed (module docstring)

    @property
    def total_s(self) -> float:
        """From admission (capacity available) until the job is back at the token it had reached."""
        return self.queue_wait_s + self.link_wait_s + self.setup_s + self.transfer_s + self.prefill_s

    @property
    def score_s(self) -> float:
        """What the planner minimises: the job's own time plus the load on the survivor's decodes."""
        return self.total_s + self.load_s

    @property
    def reused_tokens(self) -> int:
        return self.prefix_hit_tokens + self.moved_tokens


def cold_restart_cost(job: JobSpec, target: TargetState) -> StrategyCost:
    hit = target.prefix_hit(job)
    n = job.num_tokens
    tl = prefill_timeline(target, n - hit, hit, target.queued_prefill_tokens)
    return StrategyCost(
        Strategy.COLD_RESTART,
        hit,
        0,
        n - hit,
        n - hit,
        tl.queue_wait_s,
        0.0,
        0.0,
        tl.prefill_s,
        load_s=decode_load_s(target, tl),
    )


def migrate_cost(job: JobSpec, context: RecoveryContext, target: TargetState) -> StrategyCost | None:
    """None when the job has no snapshot. The snapshot's tokens beyond the target's prefix hit are
    moved; tokens past the snapshot's offset are recomputed (stale snapshot)."""
    if not job.kv_cache_checkpointed:
        return None
    n = job.num_tokens
    hit = target.prefix_hit(job)
    covered = job.checkpoint_covered_tokens(context.block_size)
    moved = max(0, covered - hit)
    have = hit + moved
    recompute = n - have
    forward = max(1, recompute)
    queue = prefill_timeline(target, 0, 0, target.queued_prefill_tokens).queue_wait_s
    # The job's own steps run after its KV has landed; kv-holding requests are drained before the
    # waiting queue (§2), so only the decodes share them.
    resumed = dataclasses.replace(target, queued_prefill_tokens=0)
    tl = prefill_timeline(resumed, forward, n - forward, 0)
    setup = context.setup_latency_s if moved else 0.0
    return StrategyCost(
        Strategy.MIGRATE_STATE,
        hit,
        moved,
        recompute,
        forward,
        queue,
        setup,
        context.transfer_s(moved),
        tl.prefill_s,
        link_wait_s=target.link_wait_s if moved else 0.0,
        load_s=decode_load_s(resumed, tl),
    )


def break_even_gbps(
    context: RecoveryContext, cold: StrategyCost, migrate: StrategyCost | None, *, weigh_load: bool = False
) -> float | None:
    """The bandwidth at which both strategies take equally long; MIGRATE_STATE wins above it.

    Closed form: ``setup + bits/(bw x eff) + prefill_m = prefill_c`` (queue and capacity waits are
    the same for both), so ``bw* = bits / (eff x (prefill_c − prefill_m − link_wait − setup))``;
    ``weigh_load`` adds ``load_c − load_m`` to the saving (the planner's choice in a cluster). None when
    migration never wins: no snapshot, a snapshot that adds nothing to the target's prefix cache
    (nothing to move), or compute saved that does not pay for the setup.
    """
    if migrate is None or migrate.moved_tokens == 0:
        return None
    saving = (
        cold.prefill_s
        + cold.queue_wait_s
        + (cold.load_s - migrate.load_s if weigh_load else 0.0)
        - migrate.prefill_s
        - migrate.queue_wait_s
        - migrate.link_wait_s
        - migrate.setup_s
    )
    bits = context.wire_bits(migrate.moved_tokens)
    if saving <= 0:
        return None
    return bits / (context.transfer_efficiency * saving) / 1e9
