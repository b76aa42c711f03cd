"""The seeds' examples of issue 6 under the documented default context, through the API and the CLI.

The verdicts must follow from the cost model: each job's break-even bandwidth lies on the right
side of its link, and moving the bandwidth across it flips the verdict (no special cases).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from recovery_helpers import SEED_801_802, SEED_990, seed
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.cluster.recovery import CapacityStatus, Strategy, plan_recovery

runner = CliRunner()


def by_id(plan):  # type: ignore[no-untyped-def]
    return {d.job_id: d for d in plan.scheduled_migrations}


def test_seed_801_migrates_and_802_restarts() -> None:
    plan = plan_recovery(SEED_801_802)
    d = by_id(plan)
    assert d["job-801"].strategy is Strategy.MIGRATE_STATE
    assert d["job-802"].strategy is Strategy.COLD_RESTART
    assert plan.total_recompute_tokens == 2112
    assert d["job-801"].recompute_required is False and d["job-801"].recompute_tokens == 0
    assert d["job-801"].moved_tokens == 1152
    # THE KV formula: Llama-3.1-405B, 2 x 126 layers x 8 KV heads x 128 x 2 B (bf16 KV) = 516,096 B/token
    # in all, 64,512 per rank at TP=8.
    assert d["job-801"].bytes_to_move == 1152 * 516_096
    assert d["job-801"].bytes_per_rank == 1152 * 64_512
    assert d["job-802"].recompute_required and d["job-802"].recompute_tokens == 2112
    assert d["job-802"].migrate_ms is None and d["job-802"].break_even_gbps is None
    assert d["job-802"].bytes_to_move == 0
    assert plan.capacity_status is CapacityStatus.SUFFICIENT and plan.waiting_jobs == []
    assert plan.requires_human_review is True
    assert "transfer" in d["job-801"].reason and "10 Gbps" in d["job-801"].reason
    assert "no KV checkpoint" in d["job-802"].reason


def test_seed_990_restarts_at_1_gbps() -> None:
    plan = plan_recovery(SEED_990)
    (d,) = plan.scheduled_migrations
    assert d.strategy is Strategy.COLD_RESTART
    assert plan.total_recompute_tokens == 8704 == d.recompute_tokens
    assert d.migrate_ms is not None and d.migrate_ms > d.cold_restart_ms == d.est_recovery_ms
    assert "1 Gbps" in d.reason


def test_seed_verdicts_follow_from_the_break_even() -> None:
    d801 = by_id(plan_recovery(SEED_801_802))["job-801"]
    d990 = plan_recovery(SEED_990).scheduled_migrations[0]
    assert d801.break_even_gbps is not None and d990.break_even_gbps is not None
    assert 1.0 < d801.break_even_gbps < 10.0  # migration wins at 10 Gbps
    assert 1.0 < d990.break_even_gbps < 10.0  # ...and loses at 1 Gbps
    # Swap the links: the verdicts swap too.
    slow = by_id(plan_recovery(seed(SEED_801_802, network_bandwidth_gbps=1)))["job-801"]
    fast = plan_recovery(seed(SEED_990, network_bandwidth_gbps=10)).scheduled_migrations[0]
    assert slow.strategy is Strategy.COLD_RESTART and fast.strategy is Strategy.MIGRATE_STATE
    # Just above / below each break-even.
    for rec, jid, be in (
        (SEED_801_802, "job-801", d801.break_even_gbps),
        (SEED_990, "job-990", d990.break_even_gbps),
    ):
        above = by_id(plan_recovery(seed(rec, network_bandwidth_gbps=be * 1.01)))[jid]
        below = by_id(plan_recovery(seed(rec, network_bandwidth_gbps=be * 0.99)))[jid]
        assert above.strategy is Strategy.MIGRATE_STATE and below.strategy is Strategy.COLD_RESTART


def test_seed_801_needs_the_per_rank_links_of_the_default() -> None:
    """With one shared link the 8 ranks' shards queue up: 8x the transfer, and cold restart wins."""
    plan = plan_recovery(SEED_801_802, context={"nic_per_rank": False})
    d = by_id(plan)["job-801"]
    assert d.strategy is Strategy.COLD_RESTART
    assert d.migrate_ms is not None


def test_seed_verdicts_differ_for_a_small_model_on_idle_survivors() -> None:
    """Llama-3.1-8B: prefill is cheap relative to its KV bytes, so 10 Gbps is far below break-even."""
    plan = plan_recovery(SEED_801_802, context={"model": "llama-3.1-8b", "tp": 1})
    d = by_id(plan)["job-801"]
    assert d.strategy is Strategy.COLD_RESTART
    assert d.break_even_gbps is not None and d.break_even_gbps > 30


@pytest.mark.parametrize(("rec", "expected"), [(SEED_801_802, 2112), (SEED_990, 8704)])
def test_seeds_through_the_cli(tmp_path: Path, rec: dict, expected: int) -> None:  # type: ignore[type-arg]
    f = tmp_path / "event.json"
    f.write_text(json.dumps(rec))
    outbox = tmp_path / "outbox"
    res = runner.invoke(app, ["recover", str(f), "--json", "--outbox", str(outbox)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["total_recompute_tokens"] == expected
    strategies = {d["job_id"]: d["strategy"] for d in out["scheduled_migrations"]}
    if "job-801" in strategies:
        assert strategies == {"job-801": "MIGRATE_STATE", "job-802": "COLD_RESTART"}
    else:
        assert strategies == {"job-990": "COLD_RESTART"}
    assert out["requires_human_review"] is True
    assert sorted(Path(p).name for p in out["manifests"]) == sorted(p.name for p in outbox.iterdir())
