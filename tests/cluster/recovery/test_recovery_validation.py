"""Invalid jobs are listed with reasons and excluded; valid ones are each planned exactly once."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recovery_helpers import SEED_801_802, job, linear_target, record, seed

from servesim.cluster.recovery import (
    RecoveryContext,
    RecoveryInputError,
    Release,
    Strategy,
    parse_events,
    parse_input,
    plan_recovery,
)
from servesim.perf import load_catalog


def reasons(rec: dict[str, Any]) -> dict[int, str]:
    return {j.index: j.reason for j in parse_input(rec).invalid_jobs}


def test_bad_jobs_are_listed_and_the_rest_still_planned() -> None:
    jobs = [
        job("ok-1", 1024, 128),
        {"job_id": "no-prompt", "generated_tokens": 5, "kv_cache_checkpointed": True},
        job("neg-gen", 100, -3),
        job("zero-prompt", 0, 3, False),
        job("dup", 100, 1),
        "not a job",
        job("dup", 200, 2),
        job("ok-2", 2048, 64, False),
        {"job_id": "typo", "prompt_tokens": 10, "generated_tokens": 1, "kv_cache_checkpointd": True},
        job("offset-past", 100, 10, checkpoint_offset_tokens=111),
        job("offset-without-ckpt", 100, 10, False, checkpoint_offset_tokens=50),
        job("late-ckpt", 100, 10, checkpoint_timestamp="2025-01-01T00:00:01Z"),
        job("blocks-past", 100, 10, checkpoint_offset_blocks=8),
        {"prompt_tokens": 1, "generated_tokens": 1, "kv_cache_checkpointed": True},
    ]
    plan = plan_recovery(record(jobs, gbps=10))
    bad = {j.index: (j.job_id, j.reason) for j in plan.invalid_jobs}
    assert sorted(bad) == [1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13]
    assert bad[1] == ("no-prompt", "missing field prompt_tokens")
    assert "generated_tokens" in bad[2][1] and "-3" in bad[2][1]
    assert "prompt_tokens" in bad[3][1]
    assert bad[4][0] == bad[6][0] == "dup" and "duplicate job_id" in bad[4][1] and "[4], [6]" in bad[6][1]
    assert bad[5] == (None, "not an object (str)")
    assert (
        "unknown field kv_cache_checkpointd" in bad[8][1]
        and "missing field kv_cache_checkpointed" in bad[8][1]
    )
    assert "exceeds" in bad[9][1]
    assert "kv_cache_checkpointed is false" in bad[10][1]
    assert "after the preemption_timestamp" in bad[11][1]
    assert "checkpoint_offset_blocks" in bad[12][1]
    assert bad[13] == (None, "missing field job_id")
    assert [d.job_id for d in plan.scheduled_migrations] == ["ok-1", "ok-2"]
    assert plan.total_recompute_tokens == sum(d.recompute_tokens for d in plan.scheduled_migrations)
    assert set(plan.break_even_gbps) == {"ok-1", "ok-2"}


def test_seed_with_a_bad_job_added_keeps_its_numbers() -> None:
    rec = seed(SEED_801_802)
    rec["active_jobs"] = [*rec["active_jobs"], job("job-803", 10, -1)]
    plan = plan_recovery(rec)
    assert plan.total_recompute_tokens == 2112
    assert [j.job_id for j in plan.invalid_jobs] == ["job-803"]


@pytest.mark.parametrize(
    ("rec", "message"),
    [
        ({"preemption_timestamp": 0, "network_bandwidth_gbps": 1, "active_jobs": []}, "interrupted_node"),
        ({"interrupted_node": "n", "preemption_timestamp": 0, "active_jobs": []}, "network_bandwidth_gbps"),
        (record([], gbps=0), "network_bandwidth_gbps"),
        (record([], gbps=-1), "network_bandwidth_gbps"),
        ({"interrupted_node": "n", "preemption_timestamp": 0, "network_bandwidth_gbps": 1}, "active_jobs"),
        (record({"a": 1}), "active_jobs"),
        (record([], context={"tp": 0}), "context.tp"),
        (record([], extra_field=1), "extra_field"),
        ([1], "record 0"),
        (record([], preemption_timestamp="yesterday"), "preemption_timestamp"),
        (record([], cluster=[{"name": "a"}, {"name": "a"}]), "duplicate survivor"),
    ],
)
def test_unusable_records_raise_one_line(rec: Any, message: str) -> None:
    with pytest.raises(RecoveryInputError) as exc:
        parse_events(rec)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_list_of_records_is_a_failure_log() -> None:
    inputs = parse_events([SEED_801_802, SEED_801_802])
    assert len(inputs) == 2 and all(len(i.active_jobs) == 2 for i in inputs)
    with pytest.raises(RecoveryInputError, match="no record"):
        parse_events([])


def test_numeric_ids_and_timestamps_are_accepted() -> None:
    inp = parse_input(
        {
            "interrupted_node": 7,
            "preemption_timestamp": 1_700_000_000,
            "network_bandwidth_gbps": 10,
            "active_jobs": [job(801, 5, 5, checkpoint_timestamp=1_699_999_990)],  # type: ignore[arg-type]
        }
    )
    assert inp.interrupted_node == "7" and inp.active_jobs[0].job_id == "801" and not inp.invalid_jobs


# ------------------------------------------------------------------------------ properties
_ints = st.one_of(st.integers(-5, 6000), st.none())


@st.composite
def raw_jobs(draw: st.DrawFn) -> list[Any]:
    out: list[Any] = []
    for _ in range(draw(st.integers(0, 12))):
        j: dict[str, Any] = {
            "job_id": draw(st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"])),
            "prompt_tokens": draw(_ints),
            "generated_tokens": draw(_ints),
            "kv_cache_checkpointed": draw(st.booleans()),
        }
        j = {k: v for k, v in j.items() if v is not None}
        if j.get("kv_cache_checkpointed") and draw(st.booleans()):
            j["checkpoint_offset_tokens"] = draw(st.integers(0, 12_000))
        out.append(j)
    return out


@st.composite
def survivors(draw: st.DrawFn) -> list[Any]:
    ts = []
    for i in range(draw(st.integers(1, 3))):
        releases = tuple(
            Release(draw(st.floats(0, 5)), draw(st.integers(0, 400)), draw(st.integers(0, 2)))
            for _ in range(draw(st.integers(0, 2)))
        )
        ts.append(
            linear_target(
                f"s{i}",
                free_blocks=draw(st.integers(0, 800)),
                free_slots=draw(st.integers(0, 4)),
                running_decodes=draw(st.integers(0, 50)),
                decode_ctx_sum=draw(st.integers(0, 100_000)),
                queued_prefill_tokens=draw(st.integers(0, 10_000)),
                cached_prefix_tokens={"a": draw(st.integers(0, 3000)), "b": draw(st.integers(0, 3000))},
                releases=releases,
            )
        )
    return ts


CTX = RecoveryContext(load_catalog().model("llama-3.1-8b"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_jobs(), survivors(), st.floats(0.1, 400))
def test_plan_properties(jobs: list[Any], targets: list[Any], gbps: float) -> None:
    plan = plan_recovery(record(jobs, gbps=gbps), CTX, targets)
    valid_ids = [d.job_id for d in plan.scheduled_migrations]
    # Every job is either planned once or listed invalid; invalid ones are excluded from everything.
    assert len(valid_ids) == len(set(valid_ids))
    assert len(valid_ids) + len(plan.invalid_jobs) == len(jobs)
    assert sorted(j.index for j in plan.invalid_jobs) == sorted({j.index for j in plan.invalid_jobs})
    assert not {j.job_id for j in plan.invalid_jobs} & set(valid_ids)
    # Totals are sums, and nothing is negative.
    assert plan.total_recompute_tokens == sum(d.recompute_tokens for d in plan.scheduled_migrations)
    assert plan.total_bytes_to_move == sum(d.bytes_to_move for d in plan.scheduled_migrations)
    assert plan.num_migrations + plan.num_cold_restarts == len(valid_ids)
    assert plan.total_recompute_tokens >= 0 and plan.total_bytes_to_move >= 0
    for d in plan.scheduled_migrations:
        values = d.model_dump()
        for k, v in values.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                assert v >= 0, (k, v)
        assert d.recompute_tokens + d.reused_tokens == d.num_tokens
        assert d.recompute_required == (d.recompute_tokens > 0)
        if d.strategy is Strategy.COLD_RESTART:
            assert d.bytes_to_move == 0 and d.moved_tokens == 0
        else:
            assert d.moved_tokens > 0 and d.migrate_ms is not None and d.migrate_ms < d.cold_restart_ms
        if d.est_recovery_ms is not None:
            chosen = d.migrate_ms if d.strategy is Strategy.MIGRATE_STATE else d.cold_restart_ms
            assert d.capacity_wait_ms is not None and chosen is not None
            assert d.est_recovery_ms == pytest.approx(d.capacity_wait_ms + chosen, abs=1e-5)
    waiting = {w.job_id for w in plan.waiting_jobs}
    assert waiting == {d.job_id for d in plan.scheduled_migrations if d.waits_for_capacity}
    assert (plan.capacity_status.value == "INSUFFICIENT") == bool(waiting)
    assert plan.break_even_gbps == {d.job_id: d.break_even_gbps for d in plan.scheduled_migrations}
    assert plan.requires_human_review is True
