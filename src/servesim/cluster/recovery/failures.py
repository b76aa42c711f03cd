"""Synthetic failure logs: seeded event records of the seeds' shape, input for ``servesim recover``.

Model (docs/recovery.md, "Synthetic failure logs"):

* failures of ``num_nodes`` nodes, each failing with exponential inter-failure times of mean
  ``mtbf_hours`` — so the cluster's failures are a Poisson process of rate ``num_nodes / mtbf``;
  the failed node is uniform over the nodes;
* with probability ``warning_probability`` a failure is announced (spot-style notice) an
  exponential lead time of mean ``warning_lead_s`` before it (``warning_timestamp``);
* each failure interrupts 1 + Poisson(``jobs_mean`` − 1) jobs of one batch (``batch_id``) with
  log-normal prompt and generated lengths (medians and σ of the log), capped at ``max_model_len``;
* with probability ``checkpoint_probability`` a job has a KV snapshot, taken periodically: its
  age is uniform in [0, ``checkpoint_interval_s``), and the tokens decoded since
  (age × ``decode_tokens_per_s``, at most the generated ones) are missing from it — the offset is
  given in tokens, or in whole blocks with probability ``offset_in_blocks_probability``;
* the link bandwidth of each event is drawn uniformly from ``bandwidths_gbps``;
* with ``invalid_job_probability`` > 0, some jobs are corrupted on purpose (a missing field, a
  negative count, a repeated id) to exercise the planner's validation.

Same spec (seed included), same bytes.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servesim.errors import InputError, shown


class FailureLogSpec(BaseModel):
    """Parameters of a synthetic failure log."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(0, ge=0)
    num_events: int = Field(10, ge=1, le=1_000_000)
    num_nodes: int = Field(8, ge=2, description="Nodes in the cluster (a failure leaves num_nodes - 1).")
    mtbf_hours: float = Field(
        24.0, gt=0, allow_inf_nan=False, description="Mean time between failures, per node."
    )
    start: str = Field("2025-01-01T00:00:00Z", description="ISO-8601 time of the log's start.")
    warning_probability: float = Field(0.5, ge=0, le=1)
    warning_lead_s: float = Field(
        30.0, gt=0, allow_inf_nan=False, description="Mean notice before a failure."
    )
    jobs_mean: float = Field(6.0, ge=1, allow_inf_nan=False, description="Mean jobs per failure (>= 1 each).")
    prompt_median: int = Field(1024, ge=1)
    prompt_sigma: float = Field(1.0, ge=0, allow_inf_nan=False)
    generated_median: int = Field(128, ge=1)
    generated_sigma: float = Field(1.0, ge=0, allow_inf_nan=False)
    max_model_len: int = Field(32768, ge=2, description="Cap on prompt + generated.")
    checkpoint_probability: float = Field(0.6, ge=0, le=1)
    checkpoint_interval_s: float = Field(30.0, ge=0, allow_inf_nan=False)
    decode_tokens_per_s: float = Field(20.0, ge=0, allow_inf_nan=False, description="Per job, for staleness.")
    offset_in_blocks_probability: float = Field(0.3, ge=0, le=1)
    block_size: int = Field(16, ge=1)
    bandwidths_gbps: list[float] = Field(default_factory=lambda: [1.0, 10.0, 25.0, 100.0], min_length=1)
    invalid_job_probability: float = Field(0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _check(self) -> FailureLogSpec:
        if any(not (b > 0 and math.isfinite(b)) for b in self.bandwidths_gbps):
            raise InputError("bandwidths_gbps must all be positive numbers")
        _start(self.start)
        return self


def _start(text: str) -> datetime:
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"start {shown(text)} is not an ISO-8601 time") from None
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def _iso(dt: datetime) -> str:
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _lognormal(rng: np.random.Generator, median: int, sigma: float) -> int:
    return max(1, round(float(rng.lognormal(math.log(median), sigma))))


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)


def generate_failures(spec: FailureLogSpec | None = None, **params: Any) -> list[dict[str, Any]]:
    """A failure log: a list of records ``{interrupted_node, preemption_timestamp,
    network_bandwidth_gbps, batch_id, [warning_timestamp], active_jobs}`` in time order."""
    s = (
        spec
        if spec is not None and not params
        else FailureLogSpec.model_validate({**(spec.model_dump() if spec else {}), **params})
    )
    rng = np.random.default_rng(s.seed)
    t0 = _start(s.start)
    rate_per_s = s.num_nodes / (s.mtbf_hours * 3600.0)
    t = 0.0
    next_job = 1000
    records = []
    for e in range(s.num_events):
        t += float(rng.exponential(1.0 / rate_per_s))
        at = t0 + timedelta(seconds=t)
        node = int(rng.integers(s.num_nodes))
        rec: dict[str, Any] = {
            "interrupted_node": f"node-{node}",
            "preemption_timestamp": _iso(at),
            "network_bandwidth_gbps": _num(s.bandwidths_gbps[int(rng.integers(len(s.bandwidths_gbps)))]),
            "batch_id": f"batch-{e:05d}-{int(rng.integers(16**4)):04x}",
        }
        if rng.random() < s.warning_probability:
            rec["warning_timestamp"] = _iso(at - timedelta(seconds=float(rng.exponential(s.warning_lead_s))))
        n_jobs = 1 + int(rng.poisson(s.jobs_mean - 1.0))
        jobs: list[dict[str, Any]] = []
        for _ in range(n_jobs):
            prompt = min(_lognormal(rng, s.prompt_median, s.prompt_sigma), s.max_model_len - 1)
            gen = min(_lognormal(rng, s.generated_median, s.generated_sigma), s.max_model_len - prompt)
            job: dict[str, Any] = {
                "job_id": f"job-{next_job}",
                "prompt_tokens": prompt,
                "generated_tokens": gen,
                "kv_cache_checkpointed": bool(rng.random() < s.checkpoint_probability),
            }
            next_job += 1
            if job["kv_cache_checkpointed"]:
                age = float(rng.uniform(0.0, s.checkpoint_interval_s)) if s.checkpoint_interval_s > 0 else 0.0
                since = min(gen, int(age * s.decode_tokens_per_s))
                covered = prompt + gen - since
                job["checkpoint_timestamp"] = _iso(at - timedelta(seconds=age))
                if rng.random() < s.offset_in_blocks_probability:
                    job["checkpoint_offset_blocks"] = covered // s.block_size
                else:
                    job["checkpoint_offset_tokens"] = covered
            if s.invalid_job_probability and rng.random() < s.invalid_job_probability:
                _corrupt(rng, job, jobs)
            jobs.append(job)
        rec["active_jobs"] = jobs
        records.append(rec)
    return records


def _corrupt(rng: np.random.Generator, job: dict[str, Any], earlier: list[dict[str, Any]]) -> None:
    kind = int(rng.integers(3))
    if kind == 2 and not earlier:
        kind = 0
    if kind == 0:
        del job[["prompt_tokens", "generated_tokens", "kv_cache_checkpointed"][int(rng.integers(3))]]
    elif kind == 1:
        job["generated_tokens"] = -int(job["generated_tokens"])
    else:
        job["job_id"] = earlier[-1]["job_id"]


def failure_log_json(records: list[dict[str, Any]]) -> str:
    """The log as text (2-space indent, trailing newline): same records, same bytes."""
    return json.dumps(records, indent=2) + "\n"
