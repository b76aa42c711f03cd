"""Boundary objects of the recovery planner: failure events in, per-job decisions and plans out.

The input keeps the seeds' record shape::

    {"interrupted_node": "node-3", "preemption_timestamp": "2025-01-01T00:00:00Z",
     "network_bandwidth_gbps": 10,
     "active_jobs": [{"job_id": "job-801", "prompt_tokens": 1024, "generated_tokens": 128,
                      "kv_cache_checkpointed": true}, ...]}

plus optional ``batch_id``, per-job ``checkpoint_timestamp`` and ``checkpoint_offset_tokens`` /
``checkpoint_offset_blocks``, a ``context`` object (model, GPU, TP, link; ``ContextSpec``) and a
``cluster`` list of survivors (``TargetSpec``). Jobs are parsed one by one: a bad job is listed in
``invalid_jobs`` with its reason and the others are still planned; a bad *record* (no node, no
bandwidth) is a ``RecoveryInputError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from servesim.bounds import MAX_BLOCK_SIZE, MAX_SEQS, MAX_SURVIVORS, MAX_TOKENS
from servesim.errors import InputError, reject_bool, shown
from servesim.perf.setup import DEFAULT_GPU as DEFAULT_GPU
from servesim.perf.setup import DEFAULT_MODEL as DEFAULT_MODEL

# The default context (docs/recovery.md, "Default context"): every command's default deployment.
DEFAULT_TP = 1
DEFAULT_TRANSFER_EFFICIENCY = 0.9
DEFAULT_SETUP_LATENCY_MS = 10.0
DEFAULT_SURVIVORS = 3


class RecoveryInputError(InputError):
    """The event record itself is unusable (not a job in it: those are listed as invalid)."""


class Strategy(StrEnum):
    MIGRATE_STATE = "MIGRATE_STATE"
    COLD_RESTART = "COLD_RESTART"


class CapacityStatus(StrEnum):
    SUFFICIENT = "SUFFICIENT"
    INSUFFICIENT = "INSUFFICIENT"


Timestamp = str | float


def parse_timestamp(value: Timestamp) -> float | None:
    """Seconds since the epoch from a number or an ISO-8601 string ('Z' allowed); None if neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    try:
        dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


class JobSpec(BaseModel):
    """One job that was running on the interrupted node."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _no_bool = field_validator(
        "prompt_tokens",
        "generated_tokens",
        "checkpoint_offset_tokens",
        "checkpoint_offset_blocks",
        mode="before",
    )(lambda v: reject_bool(v))

    job_id: str = Field(min_length=1, max_length=1000, description="Unique id of the job within the record.")
    prompt_tokens: int = Field(ge=1, le=MAX_TOKENS, description="Prompt length in tokens.")
    generated_tokens: int = Field(
        ge=0, le=MAX_TOKENS, description="Output tokens generated before the failure."
    )
    kv_cache_checkpointed: bool = Field(
        description="A snapshot of the job's KV cache exists off the failed node (MIGRATE_STATE possible)."
    )
    checkpoint_timestamp: Timestamp | None = Field(
        None, description="When the snapshot was taken (ISO-8601 or epoch seconds); informative."
    )
    checkpoint_offset_tokens: int | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS,
        description="Tokens of the sequence's prefix the snapshot holds (default: all of them). A stale "
        "snapshot migrates up to here and recomputes the rest.",
    )
    checkpoint_offset_blocks: int | None = Field(
        None, ge=0, le=MAX_TOKENS, description="The same in whole KV blocks of the context's block_size."
    )
    batch_id: str | None = Field(None, description="Batch the job belonged to (informative).")

    @field_validator("job_id", mode="before")
    @classmethod
    def _id_as_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        if self.checkpoint_offset_tokens is not None and self.checkpoint_offset_blocks is not None:
            raise InputError("give checkpoint_offset_tokens or checkpoint_offset_blocks, not both")
        has_offset = self.checkpoint_offset_tokens is not None or self.checkpoint_offset_blocks is not None
        if not self.kv_cache_checkpointed and (has_offset or self.checkpoint_timestamp is not None):
            raise InputError("checkpoint offset/timestamp given but kv_cache_checkpointed is false")
        n = self.num_tokens
        if self.checkpoint_offset_tokens is not None and self.checkpoint_offset_tokens > n:
            raise InputError(
                f"checkpoint_offset_tokens ({self.checkpoint_offset_tokens}) exceeds the job's "
                f"prompt + generated tokens ({n})"
            )
        if self.checkpoint_timestamp is not None and parse_timestamp(self.checkpoint_timestamp) is None:
            raise InputError(
                f"checkpoint_timestamp {shown(self.checkpoint_timestamp)} is not ISO-8601 or a number"
            )
        return self

    @property
    def num_tokens(self) -> int:
        """N = prompt + generated: the tokens a cold restart prefills again."""
        return self.prompt_tokens + self.generated_tokens

    def checkpoint_covered_tokens(self, block_size: int) -> int:
        """Tokens of the prefix whose KV the snapshot holds (0 without a snapshot)."""
        if not self.kv_cache_checkpointed:
            return 0
        n = self.num_tokens
        if self.checkpoint_offset_tokens is not None:
            return self.checkpoint_offset_tokens
        if self.checkpoint_offset_blocks is not None:
            return min(n, self.checkpoint_offset_blocks * block_size)
        return n


class InvalidJob(BaseModel):
    """A job excluded from the plan, with the reason."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(description="Position in active_jobs.")
    job_id: str | None = Field(description="Its job_id, when it had a usable one.")
    reason: str


class ContextSpec(BaseModel):
    """Model, hardware and link context of a record (defaults: docs/recovery.md, 'Default context')."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(DEFAULT_MODEL, description="Catalog name or config.json path of the served model.")
    gpu: str = Field(DEFAULT_GPU, description="GPU of every replica (catalog name).")
    tp: int = Field(DEFAULT_TP, ge=1, description="Tensor-parallel degree of a replica.")
    kv_dtype: str = Field("auto", description="KV-cache dtype (auto = the model's dtype).")
    transfer_efficiency: float = Field(
        DEFAULT_TRANSFER_EFFICIENCY, gt=0, le=1, description="Achieved fraction of the link's bandwidth."
    )
    setup_latency_ms: float = Field(
        DEFAULT_SETUP_LATENCY_MS, ge=0, allow_inf_nan=False, description="Fixed cost of one KV transfer."
    )
    nic_per_rank: bool = Field(
        True,
        description="Each TP rank has its own link of network_bandwidth_gbps and moves its shard in "
        "parallel (one NIC per GPU); false: all ranks share one link.",
    )
    block_size: int = Field(
        16, ge=1, le=MAX_BLOCK_SIZE, description="Tokens per KV block (vLLM's default 16)."
    )
    max_num_batched_tokens: int = Field(
        2048, ge=1, le=MAX_TOKENS, description="Token budget of one engine step."
    )
    max_num_seqs: int = Field(128, ge=1, le=MAX_SEQS, description="Most running sequences per replica.")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="For the KV capacity of a survivor.")
    survivors: int = Field(
        DEFAULT_SURVIVORS,
        ge=1,
        le=MAX_SURVIVORS,
        description="Idle survivors assumed when no cluster is given.",
    )
    profile: str | None = Field(None, description="Hardware profile name or JSON path (default: the GPU's).")

    _no_bool = field_validator(
        "tp", "block_size", "max_num_batched_tokens", "max_num_seqs", "survivors", mode="before"
    )(lambda v: reject_bool(v))


class ReleaseSpec(BaseModel):
    """Capacity a survivor gets back at a known time (a running request finishing)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    after_ms: float = Field(ge=0, allow_inf_nan=False, description="From the failure.")
    blocks: int = Field(0, ge=0)
    slots: int = Field(0, ge=0)


class TargetSpec(BaseModel):
    """One survivor as JSON (``--cluster FILE``): what it holds and runs at failure time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    free_blocks: int | None = Field(
        None, ge=0, description="Free KV blocks; default: the memory model's usable blocks minus running."
    )
    free_slots: int | None = Field(
        None, ge=0, description="Free sequence slots; default max_num_seqs - running."
    )
    running_decodes: int = Field(0, ge=0, description="Requests decoding in its batch.")
    decode_ctx_sum: int | None = Field(None, ge=0, description="Σ context length of the running decodes.")
    mean_decode_ctx: int | None = Field(None, ge=0, description="Alternative: mean context per decode.")
    queued_prefill_tokens: int = Field(
        0, ge=0, description="Prefill tokens scheduled ahead of a new arrival (waiting + unfinished chunks)."
    )
    cached_prefix_tokens: dict[str, int] = Field(
        default_factory=dict, description="job_id -> tokens of that job's prefix in its prefix cache."
    )
    releases: list[ReleaseSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> TargetSpec:
        if self.decode_ctx_sum is not None and self.mean_decode_ctx is not None:
            raise InputError("give decode_ctx_sum or mean_decode_ctx, not both")
        for job, n in self.cached_prefix_tokens.items():
            if n < 0:
                raise InputError(f"cached_prefix_tokens[{shown(job)}] is negative ({n})")
        return self

    @property
    def ctx_sum(self) -> int:
        if self.decode_ctx_sum is not None:
            return self.decode_ctx_sum
        return (self.mean_decode_ctx or 0) * self.running_decodes


class ClusterSpec(BaseModel):
    """The survivors (``--cluster FILE``: this object or a bare list of targets)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    targets: list[TargetSpec] = Field(min_length=1, max_length=MAX_SURVIVORS)

    @model_validator(mode="after")
    def _unique(self) -> ClusterSpec:
        names = [t.name for t in self.targets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InputError(f"duplicate target name(s): {', '.join(dup)}")
        return self


class RecoveryInput(BaseModel):
    """One failure event: the seeds' record plus optional context. Build it with ``parse_input``
    to get the lenient per-job parsing (bad jobs go to ``invalid_jobs``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interrupted_node: str = Field(min_length=1, max_length=1000)
    preemption_timestamp: Timestamp = Field(description="ISO-8601 string or epoch seconds.")
    network_bandwidth_gbps: float = Field(
        gt=0, allow_inf_nan=False, description="Link bandwidth for KV transfers (per rank with nic_per_rank)."
    )
    active_jobs: list[JobSpec] = Field(default_factory=list, description="The valid jobs.")
    invalid_jobs: list[InvalidJob] = Field(default_factory=list, description="Jobs excluded, with reasons.")
    batch_id: str | None = None
    record_type: str | None = Field(
        None, max_length=1000, description="The record's own label (users' logs carry one); kept, not used."
    )
    warning_timestamp: Timestamp | None = Field(
        None, description="When the failure was announced, if it was."
    )
    context: ContextSpec = Field(default_factory=ContextSpec)
    cluster: list[TargetSpec] | None = Field(None, description="The survivors; default: idle ones.")

    @field_validator("batch_id", "interrupted_node", mode="before")
    @classmethod
    def _as_text(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _check(self) -> RecoveryInput:
        ids = [j.job_id for j in self.active_jobs]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise InputError(f"duplicate job_id(s) among active_jobs: {', '.join(dup)} (use parse_input)")
        if parse_timestamp(self.preemption_timestamp) is None:
            raise InputError(
                f"preemption_timestamp {shown(self.preemption_timestamp)} is not ISO-8601 or a number"
            )
        if self.cluster is not None:
            names = [t.name for t in self.cluster]
            if dup_names := sorted({n for n in names if names.count(n) > 1}):
                raise InputError(f"duplicate survivor name(s) in cluster: {', '.join(dup_names)}")
        return self


def _job_errors(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"]
        if e["type"] == "missing":
            parts.append(f"missing field {loc}")
        elif e["type"] == "extra_forbidden":
            parts.append(f"unknown field {loc}")
        else:
            got = e.get("input")
            got_text = f" (got {shown(got)})" if loc and not isinstance(got, dict | list) else ""
            parts.append(f"{loc + ': ' if loc else ''}{msg}{got_text}")
    return "; ".join(parts)


def _raw_id(raw: Any) -> str | None:
    jid = raw.get("job_id") if isinstance(raw, Mapping) else None
    if isinstance(jid, str | int) and not isinstance(jid, bool) and str(jid):
        return str(jid)
    return None


def parse_jobs(raw_jobs: Any, block_size: int = 16) -> tuple[list[JobSpec], list[InvalidJob]]:
    """Parse jobs one by one. Bad jobs (missing fields, negative counts, contradictions, an offset
    past the sequence) are returned as ``InvalidJob``; every entry carrying a repeated job_id is
    invalid, whatever else is wrong with the others (which copy is right cannot be told). Valid
    jobs keep their input order."""
    if not isinstance(raw_jobs, list):
        raise RecoveryInputError(f"active_jobs: expected a list of jobs, got {type(raw_jobs).__name__}")
    where: dict[str, list[int]] = {}
    for i, raw in enumerate(raw_jobs):
        if (rid := _raw_id(raw)) is not None:
            where.setdefault(rid, []).append(i)
    valid: list[JobSpec] = []
    invalid: list[InvalidJob] = []
    for i, raw in enumerate(raw_jobs):
        jid = _raw_id(raw)
        problems: list[str] = []
        job: JobSpec | None = None
        if not isinstance(raw, Mapping):
            problems.append(f"not an object ({type(raw).__name__})")
        else:
            try:
                job = JobSpec.model_validate(dict(raw))
            except ValidationError as exc:
                problems.append(_job_errors(exc))
        if job is not None and job.checkpoint_offset_blocks is not None:
            filled = -(-job.num_tokens // block_size)
            if job.checkpoint_offset_blocks > filled:
                problems.append(
                    f"checkpoint_offset_blocks ({job.checkpoint_offset_blocks}) exceeds the {filled} blocks "
                    f"of {block_size} tokens the job's {job.num_tokens} tokens fill"
                )
        if jid is not None and len(where[jid]) > 1:
            problems.append("duplicate job_id at active_jobs" + ", ".join(f"[{k}]" for k in where[jid]))
        if problems or job is None:
            invalid.append(InvalidJob(index=i, job_id=jid, reason="; ".join(problems)))
        else:
            valid.append(job)
    return valid, invalid


def _record_error(exc: ValidationError, where: str) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "record"
        msg = "field required" if e["type"] == "missing" else e["msg"]
        parts.append(f"{loc}: {msg}")
    return f"{where}{'; '.join(parts)}"


def _index_of(raw_jobs: list[Any], job_id: str, default: int) -> int:
    for i, r in enumerate(raw_jobs):
        if isinstance(r, Mapping) and str(r.get("job_id")) == job_id:
            return i
    return default


def parse_input(data: Any, *, where: str = "", **overrides: Any) -> RecoveryInput:
    """Validate one failure record leniently per job. ``overrides`` (not None) replace record
    fields; ``context`` overrides are merged key by key. Raises ``RecoveryInputError`` (one line)
    when the record itself is unusable; ``where`` prefixes its message (e.g. ``"record 3: "``)."""
    if isinstance(data, RecoveryInput):
        data = data.model_dump(mode="json", exclude_unset=True)
        data["active_jobs"] = [*data.get("active_jobs", [])]
    if not isinstance(data, Mapping):
        raise RecoveryInputError(f"{where}expected a failure record (an object), got {type(data).__name__}")
    raw = dict(data)
    ctx_over = overrides.pop("context", None) or {}
    raw.update({k: v for k, v in overrides.items() if v is not None})
    ctx_raw = raw.get("context") or {}
    if not isinstance(ctx_raw, Mapping):
        raise RecoveryInputError(f"{where}context: expected an object")
    ctx_raw = {**ctx_raw, **{k: v for k, v in ctx_over.items() if v is not None}}
    try:
        context = ContextSpec.model_validate(ctx_raw)
    except ValidationError as exc:
        raise RecoveryInputError(_record_error(exc, f"{where}context.")) from None
    jobs_raw = raw.pop("active_jobs", None)
    if jobs_raw is None:
        raise RecoveryInputError(f"{where}active_jobs: field required")
    previously_invalid = raw.pop("invalid_jobs", None) or []
    jobs, invalid = parse_jobs(jobs_raw, context.block_size)
    invalid = [InvalidJob.model_validate(x) for x in previously_invalid] + invalid
    pre = raw.get("preemption_timestamp")
    t_pre = parse_timestamp(pre) if isinstance(pre, str | int | float) else None
    if t_pre is not None:
        kept = []
        for i, job in enumerate(jobs):
            t_ck = parse_timestamp(job.checkpoint_timestamp) if job.checkpoint_timestamp is not None else None
            if t_ck is not None and t_ck > t_pre:
                invalid.append(
                    InvalidJob(
                        index=_index_of(jobs_raw, job.job_id, i),
                        job_id=job.job_id,
                        reason=f"checkpoint_timestamp {shown(job.checkpoint_timestamp)} is after the "
                        f"preemption_timestamp {shown(pre)}",
                    )
                )
            else:
                kept.append(job)
        jobs = kept
        invalid.sort(key=lambda x: x.index)
    raw["context"] = context
    try:
        return RecoveryInput.model_validate({**raw, "active_jobs": jobs, "invalid_jobs": invalid})
    except ValidationError as exc:
        raise RecoveryInputError(_record_error(exc, where)) from None


def parse_events(data: Any, **overrides: Any) -> list[RecoveryInput]:
    """One record or a list of records (a failure log) -> validated inputs, in order."""
    if isinstance(data, Mapping | RecoveryInput):
        return [parse_input(data, **overrides)]
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        if not data:
            raise RecoveryInputError("the failure log holds no record")
        return [parse_input(r, where=f"record {i}: ", **overrides) for i, r in enumerate(data)]
    raise RecoveryInputError(f"expected a failure record or a list of them, got {type(data).__name__}")


# ---------------------------------------------------------------------------------------- outputs
class JobDecision(BaseModel):
    """The planner's answer for one job: strategy, target survivor, the numbers behind it."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    strategy: Strategy
    target: str | None = Field(description="Survivor the job goes to (None: no survivor given).")
    recompute_required: bool = Field(description="recompute_tokens > 0.")
    recompute_tokens: int = Field(ge=0, description="Tokens whose KV the target computes again.")
    reused_tokens: int = Field(
        ge=0, description="Tokens whose KV arrives: moved or prefix-cached. + recompute = N."
    )
    moved_tokens: int = Field(ge=0, description="Tokens whose KV is transferred (0 for COLD_RESTART).")
    prefix_hit_tokens: int = Field(ge=0, description="Tokens the target's prefix cache already holds.")
    bytes_to_move: int = Field(ge=0, description="KV bytes transferred, all TP ranks together.")
    bytes_per_rank: int = Field(ge=0)
    num_tokens: int = Field(ge=1, description="prompt + generated.")
    checkpoint_covered_tokens: int = Field(ge=0, description="Prefix the snapshot holds (0: none).")
    stale_checkpoint: bool = Field(description="The snapshot holds less than the whole sequence.")
    blocks_needed: int = Field(ge=0, description="New KV blocks on the target (whole sequence).")
    est_recovery_ms: float | None = Field(
        ge=0,
        description="Until the job is back at the token it had reached; None: waits for capacity "
        "that no known release provides.",
    )
    cold_restart_ms: float = Field(ge=0, description="COLD_RESTART time once admitted (queue + prefill).")
    migrate_ms: float | None = Field(
        ge=0, description="MIGRATE_STATE time once admitted; None without snapshot."
    )
    capacity_wait_ms: float | None = Field(ge=0, description="Wait for free blocks/slot; None: unknown.")
    queue_wait_ms: float = Field(ge=0, description="Steps of the target's queued prefills ahead of the job.")
    setup_ms: float = Field(ge=0)
    transfer_ms: float = Field(ge=0)
    prefill_ms: float = Field(ge=0, description="Target's steps that compute the chosen strategy's tokens.")
    link_wait_ms: float = Field(0.0, ge=0, description="Wait for transfers already bound for the target.")
    cold_restart_load_ms: float = Field(
        0.0, ge=0, description="COLD_RESTART's delay to the target's running decodes, summed over them."
    )
    migrate_load_ms: float | None = Field(
        None, ge=0, description="MIGRATE_STATE's delay to the target's running decodes (None: no snapshot)."
    )
    break_even_gbps: float | None = Field(
        ge=0, description="Bandwidth above which MIGRATE_STATE wins; None: it never does."
    )
    waits_for_capacity: bool
    reason: str


class WaitingJob(BaseModel):
    """A job that cannot be admitted anywhere right now."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    target: str | None
    blocks_needed: int
    wait_ms: float | None = Field(ge=0, description="Until enough capacity is released; None: unknown.")
    reason: str


class TargetSummary(BaseModel):
    """One survivor before and after the plan."""

    model_config = ConfigDict(frozen=True)

    name: str
    free_blocks_before: int
    free_slots_before: int
    free_blocks_after: int = Field(description="Negative: blocks promised to jobs waiting for releases.")
    free_slots_after: int
    running_decodes: int
    queued_prefill_tokens: int
    jobs: list[str]


class ContextSummary(BaseModel):
    """The context a plan was made under (resolved defaults included)."""

    model_config = ConfigDict(frozen=True)

    model: str
    gpu: str
    tp: int
    kv_dtype: str
    kv_bytes_per_token_per_rank: int
    network_bandwidth_gbps: float
    transfer_efficiency: float
    setup_latency_ms: float
    nic_per_rank: bool
    block_size: int
    max_num_batched_tokens: int
    step_time_model: dict[str, Any]


class RecoveryPlan(BaseModel):
    """The answer for one failure event. Nothing in it has been executed or sent."""

    model_config = ConfigDict(frozen=True)

    interrupted_node: str
    preemption_timestamp: Timestamp
    batch_id: str | None
    requires_human_review: Literal[True] = True
    total_recompute_tokens: int = Field(ge=0, description="Σ recompute_tokens of the valid jobs.")
    total_bytes_to_move: int = Field(ge=0, description="Σ bytes_to_move of the valid jobs.")
    num_migrations: int
    num_cold_restarts: int
    scheduled_migrations: list[JobDecision] = Field(description="One decision per valid job, in input order.")
    invalid_jobs: list[InvalidJob]
    capacity_status: CapacityStatus
    waiting_jobs: list[WaitingJob]
    break_even_gbps: dict[str, float | None] = Field(description="Per job_id.")
    targets: list[TargetSummary]
    context: ContextSummary
    assumptions: list[str]

    def decision_matrix(self) -> pd.DataFrame:
        """One row per valid job: the strategy and every number behind it (input order)."""
        rows = [
            {
                "job_id": d.job_id,
                "strategy": d.strategy.value,
                "target": d.target,
                "num_tokens": d.num_tokens,
                "checkpoint_covered_tokens": d.checkpoint_covered_tokens,
                "stale_checkpoint": d.stale_checkpoint,
                "prefix_hit_tokens": d.prefix_hit_tokens,
                "recompute_tokens": d.recompute_tokens,
                "moved_tokens": d.moved_tokens,
                "bytes_to_move": d.bytes_to_move,
                "cold_restart_ms": d.cold_restart_ms,
                "migrate_ms": d.migrate_ms,
                "capacity_wait_ms": d.capacity_wait_ms,
                "est_recovery_ms": d.est_recovery_ms,
                "break_even_gbps": d.break_even_gbps,
                "waits_for_capacity": d.waits_for_capacity,
                "reason": d.reason,
            }
            for d in self.scheduled_migrations
        ]
        columns = [
            "job_id",
            "strategy",
            "target",
            "num_tokens",
            "checkpoint_covered_tokens",
            "stale_checkpoint",
            "prefix_hit_tokens",
            "recompute_tokens",
            "moved_tokens",
            "bytes_to_move",
            "cold_restart_ms",
            "migrate_ms",
            "capacity_wait_ms",
            "est_recovery_ms",
            "break_even_gbps",
            "waits_for_capacity",
            "reason",
        ]
        return pd.DataFrame(rows, columns=columns)
