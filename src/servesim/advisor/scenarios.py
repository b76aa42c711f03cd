"""The advisor's training / validation scenarios: seeded cases from servesim's own generators.

Each scenario is a plain JSON question an advisor answers (a reschedule input, a recovery record,
or a small generated trace with its current flags and SLO), in the users' shapes (seed-000..003:
``examples/inputs/``) and harder ones (more requests than slots, tight and mixed SLA budgets,
stale checkpoints, slow and fast links, a 405B model on 8 GPUs, overloaded queues). Lengths come
from ``generate_trace`` (log-normal prompts / outputs); the rest from one numpy stream per
scenario, so ``generate_scenarios(seed)`` is byte-stable. The shipped set is
``data/advisor/scenarios.json`` (``tools/make_advisor_scenarios.py`` writes it; a test checks
that it is what the generator gives).
"""

from __future__ import annotations

import json
import zlib
from functools import cache
from importlib import resources
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from servesim.advisor.cases import BatchingCase, Case, FallbackCase, RescheduleCase
from servesim.advisor.models import Task
from servesim.cluster.recovery import plan_recovery
from servesim.engine import SLO
from servesim.resched import parse_input
from servesim.spec import DeploymentSpec, resolve
from servesim.traces import GeneratorSpec, generate_trace
from servesim.traces.arrivals import GammaArrivals, PoissonArrivals
from servesim.traces.lengths import LogNormalLength

SCENARIO_FORMAT = 1
Split = Literal["train", "val"]


class Scenario(BaseModel):
    """One question: its task, the input it is built from, and where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    task: Task
    shape: str  # e.g. "seed-002" (the users' shape) or "hard"
    input: dict[str, Any]


class ScenarioSet(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: int = SCENARIO_FORMAT
    seed: int
    train: list[Scenario]
    val: list[Scenario]


def _rng(seed: int, what: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(what.encode())])


def _lengths(n: int, seed: int, prompt_mean: float, output_mean: float) -> tuple[list[int], list[int]]:
    t = generate_trace(
        GeneratorSpec(
            num_requests=n,
            seed=seed,
            prompt=LogNormalLength(mean=prompt_mean, sigma=0.7, max=8192),
            output=LogNormalLength(mean=output_mean, sigma=0.9, max=2048),
        )
    )
    return [int(x) for x in t.df["prompt_len"]], [int(x) for x in t.df["output_len"]]


def _reschedule(sid: str, seed: int, hard: bool) -> Scenario:
    rng = _rng(seed, "advisor-reschedule")
    n = int(rng.integers(6, 16)) if hard else 2
    prompts, outputs = _lengths(n, seed, 800 if hard else 400, 300)
    reqs = []
    for i in range(n):
        done = int(rng.integers(0, max(1, outputs[i])))
        remaining = max(1, outputs[i] - done)
        # budgets from ~2 ms per remaining token (tight) to ~12 ms (loose): some cannot make it
        per_tok = float(rng.uniform(2.0, 12.0 if hard else 25.0))
        reqs.append(
            {
                "req_id": f"req-{seed % 1000:03d}-{i}",
                "tokens_processed": prompts[i] + done,
                "tokens_remaining": remaining,
                "sla_budget_ms": round(per_tok * remaining + float(rng.uniform(20, 200)), 1),
                **({"priority": int(rng.integers(0, 3))} if hard and rng.random() < 0.4 else {}),
                **({"preemptions": int(rng.integers(1, 3))} if hard and rng.random() < 0.3 else {}),
            }
        )
    cap = int(rng.integers(2, max(3, n // 2 + 1))) if hard else 4
    return Scenario(
        id=sid,
        task="reschedule",
        shape="hard" if hard else "seed-002",
        input={"batch_capacity": cap, "interrupted_requests": reqs},
    )


def _fallback(sid: str, seed: int, hard: bool) -> Scenario:
    rng = _rng(seed, "advisor-fallback")
    n = int(rng.integers(3, 9)) if hard else 2
    prompts, outputs = _lengths(n, seed, 1500, 200)
    jobs = []
    for i in range(n):
        job: dict[str, Any] = {
            "job_id": f"job-{seed % 1000:03d}-{i}",
            "prompt_tokens": prompts[i],
            "generated_tokens": outputs[i],
            "kv_cache_checkpointed": bool(rng.random() < 0.6),
        }
        if hard and job["kv_cache_checkpointed"] and rng.random() < 0.4:  # a stale snapshot
            job["checkpoint_offset_tokens"] = int(rng.integers(1, prompts[i] + outputs[i]))
        jobs.append(job)
    record: dict[str, Any] = {
        "interrupted_node": f"worker-{seed % 100:02d}",
        "preemption_timestamp": "2025-05-10T14:22:00Z",
        "active_jobs": jobs,
        "network_bandwidth_gbps": float(rng.choice([1.0, 10.0, 25.0, 100.0] if hard else [10.0])),
    }
    if hard and rng.random() < 0.4:
        record["context"] = {"model": "llama-3.1-405b-fp8", "tp": 8}
    return Scenario(id=sid, task="fallback", shape="hard" if hard else "seed-003", input=record)


def _batching(sid: str, seed: int, hard: bool) -> Scenario:
    rng = _rng(seed, "advisor-batching")
    rate = float(rng.choice([4.0, 8.0, 16.0, 32.0] if hard else [5.0, 25.0]))
    seqs = int(rng.choice([8, 32, 64, 256]))
    budget = int(rng.choice([512, 2048, 8192]))
    engine = {
        "max_num_seqs": seqs,
        "max_num_batched_tokens": max(budget, seqs),
        "enable_chunked_prefill": True,
    }
    if hard:
        engine["num_gpu_blocks"] = int(rng.choice([768, 1024]))
    return Scenario(
        id=sid,
        task="batching",
        shape="hard" if hard else ("seed-001" if rate > 10 else "seed-000"),
        input={
            "trace": {
                "num_requests": 80,
                "seed": seed,
                "rate": rate,
                "burstiness": 0.25 if hard and rng.random() < 0.5 else 1.0,
                "prompt_mean": float(rng.choice([400, 1200, 3000])),
                "output_mean": 150.0,
            },
            "engine": engine,
            "slo": {"ttft_ms": float(rng.choice([300, 1000, 3000])), "tpot_ms": 100.0},
        },
    )


_MAKERS = {"reschedule": _reschedule, "fallback": _fallback, "batching": _batching}
#: per split: (task, users' shape count, hard count)
_COUNTS: dict[Split, list[tuple[str, int, int]]] = {
    "train": [("reschedule", 3, 5), ("fallback", 3, 5), ("batching", 2, 2)],
    "val": [("reschedule", 2, 4), ("fallback", 2, 4), ("batching", 2, 2)],
}


def generate_scenarios(seed: int = 0) -> ScenarioSet:
    """The seeded set: train and val never share a generator seed."""
    out: dict[Split, list[Scenario]] = {"train": [], "val": []}
    base = np.random.SeedSequence(seed)
    for split, counts in _COUNTS.items():
        k = 0
        for task, easy, hard in counts:
            for j in range(easy + hard):
                s = int(base.generate_state(1)[0]) % 100_000 + (0 if split == "train" else 500_000) + k
                out[split].append(_MAKERS[task](f"{split}-{task}-{j:02d}", s, j >= easy))
                k += 1
    return ScenarioSet(seed=seed, train=out["train"], val=out["val"])


def scenarios_json(s: ScenarioSet) -> str:
    return json.dumps(s.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"


@cache
def shipped_scenarios() -> ScenarioSet:
    text = resources.files("servesim").joinpath("data/advisor/scenarios.json").read_text(encoding="utf-8")
    return ScenarioSet.model_validate_json(text)


def build_scenario_case(s: Scenario) -> Case:
    """The case an advisor is asked (the same classes ``servesim advise`` builds)."""
    if s.task == "reschedule":
        return RescheduleCase(parse_input(s.input))
    if s.task == "fallback":
        return FallbackCase(plan_recovery(s.input))
    t = s.input["trace"]
    arrival = (
        PoissonArrivals(rate=t["rate"])
        if t["burstiness"] == 1.0
        else GammaArrivals(rate=t["rate"], burstiness=t["burstiness"])
    )
    trace = generate_trace(
        GeneratorSpec(
            name=s.id,
            num_requests=t["num_requests"],
            seed=t["seed"],
            arrival=arrival,
            prompt=LogNormalLength(mean=t["prompt_mean"], sigma=0.6, max=8192),
            output=LogNormalLength(mean=t["output_mean"], sigma=0.8, max=2048),
        )
    )
    setup = resolve(DeploymentSpec(engine=s.input["engine"]), max_model_len=trace.default_max_model_len())
    return BatchingCase(
        trace, setup.config, setup.step_time, slo=SLO(**s.input["slo"]), hardware=setup.timed_as
    )
