"""The dashboard's main screen at fixed simulated times (deterministic: paused, fast-forwarded),
compared with the stored SVG snapshots (pytest-textual-snapshot; update with --snapshot-update)."""

from __future__ import annotations

from typing import Any

from servesim import SLO, EngineConfig, LinearStepTime, open_trace
from servesim.tui.app import DashboardApp
from servesim.tui.spec import DashboardSpec


def app(replicas: int = 1, start_at: float = 12.0) -> DashboardApp:
    spec = DashboardSpec(
        open_trace("bursty", num_requests=400, seed=3),
        "bursty",
        EngineConfig(num_gpu_blocks=800, max_num_seqs=32),
        LinearStepTime(),
        replicas=replicas,
        slo=SLO(ttft_ms=2000, tpot_ms=50),
    )
    return DashboardApp(spec, paused=True, start_at=start_at)


def test_one_replica_at_12s_in_80x24(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=(80, 24))


def test_one_replica_at_20s_in_120x36(snap_compare: Any) -> None:
    assert snap_compare(app(start_at=20.0), terminal_size=(120, 36))


def test_a_cluster_after_a_node_loss_in_120x36(snap_compare: Any) -> None:
    assert snap_compare(app(replicas=3, start_at=6.0), press=["f", "enter", "_"], terminal_size=(120, 36))
