"""One fleet (issue 45): the aggregated cluster and the prefill/decode pools are both a
``cluster.fleet.Fleet``, driven by the same code (the protocol's calls alone reproduce each one's
one-go run), read through one snapshot, and watched by one live class and one online class; a pool
is one type with one set of bounds wherever it is stated."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from test_replica_view import SRC, _engine_attribute_reads

from servesim import ConstantStepTime, EngineConfig
from servesim.cluster import FailureEvent, Replica, cluster_simulator
from servesim.cluster.fleet import Fleet, FleetBase
from servesim.cluster.pd import DisaggSpec, PDCluster, PoolSpec
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.cluster.simulate import ClusterSimulator
from servesim.errors import describe
from servesim.live import LiveClusterRun, LiveFleetRun, LivePDRun
from servesim.online import OnlineFleet, OnlinePDFleet
from servesim.perf import load_catalog
from servesim.perf.catalog import resolve_model
from servesim.spec import ClusterSpec
from servesim.traces.schema import Trace

ROWS = [(0.004 * i, 40 + (i * 37) % 400, 3 + i % 9) for i in range(60)]
PROTOCOL = [
    "drained",
    "make_request",
    "submit",
    "abort",
    "advance",
    "advance_steps",
    "next_time",
    "inject_failure",
    "snapshot",
    "transfers",
    "finish",
]


def _trace() -> Trace:
    return Trace.from_records(
        [
            {"req_id": f"r{i}", "arrival_time_s": a, "prompt_len": p, "output_len": o}
            for i, (a, p, o) in enumerate(ROWS)
        ]
    )


def _rep(name: str) -> Replica:
    cfg = EngineConfig(num_gpu_blocks=3000, enable_prefix_caching=True, max_model_len=2048)
    return Replica(name, cfg, ConstantStepTime(step_time_s=0.01))


def _ctx() -> RecoveryContext:
    return RecoveryContext(
        model=resolve_model("llama-3.1-8b", load_catalog()), bandwidth_gbps=5.0, setup_latency_s=0.005
    )


def _aggregated(failures: list[FailureEvent]) -> ClusterSimulator:
    return cluster_simulator(_trace(), [_rep("n0"), _rep("n1")], failures=failures)


def _pools(failures: list[FailureEvent]) -> PDCluster:
    return PDCluster(_trace(), [_rep("p0")], [_rep("d0"), _rep("d1")], _ctx(), failures=failures)


@pytest.mark.parametrize("fleet", [ClusterSimulator, PDCluster])
def test_both_fleets_implement_every_member_of_the_protocol(fleet: type[FleetBase[Any]]) -> None:
    assert issubclass(fleet, FleetBase) and Fleet in FleetBase.__mro__
    assert not fleet.__abstractmethods__  # nothing left to the subclass unimplemented
    for name in PROTOCOL:
        assert getattr(fleet, name) is not getattr(Fleet, name, None), name  # not the protocol's stub


def _drive(fleet: Fleet[Any], at: float, node: str) -> Any:
    """Only the protocol's calls: step ends and time, a failure injected on the way, a request
    submitted and one aborted online, a snapshot between pieces."""
    injected = False
    late = fleet.make_request("late", 0.15, 120, 4)
    gone = fleet.make_request("gone", 0.16, 300, 50)
    fleet.submit(late)
    fleet.submit(gone)
    while fleet.next_time() < math.inf:
        t = fleet.next_time()
        if not injected and t >= at:
            fleet.inject_failure(node, fleet.now, 0.05)
            fleet.abort(gone, fleet.now)
            injected = True
        fleet.advance_steps(3)
        fleet.advance(fleet.now + 0.007)
        snap = fleet.snapshot()
        assert len(snap.engines) >= len(snap.replicas)
        assert all(r.view.now <= fleet.now or r.view.now <= fleet.next_time() for r in snap.replicas)
    return fleet.finish()


@pytest.mark.parametrize(
    ("make", "node", "key"),
    [
        (_aggregated, "n1", lambda run: [(e.name, repr(list(e.rec.finish))) for e in run.engines]),
        (
            _pools,
            "d1",
            lambda run: sorted((d.req_id, d.finish_time, d.outcome) for d in run.decode_req.values()),
        ),
    ],
)
def test_the_protocol_alone_drives_either_fleet_to_its_one_go_run(make: Any, node: str, key: Any) -> None:
    at = 0.12
    driven = make([])
    run = _drive(driven, at, node)
    # the same run in one go: the injected failure listed up front, the submissions as well
    whole = make([FailureEvent(node=node, time_s=driven.node_events[0][0], recover_after_s=0.05)])
    late = whole.make_request("late", 0.15, 120, 4)
    gone = whole.make_request("gone", 0.16, 300, 50)
    whole.submit(late)
    whole.submit(gone)
    whole.abort(gone, driven.node_events[0][0])
    whole.advance()
    assert key(run) == key(whole.finish())
    kinds = [(kind, name) for _t, kind, name, _n in driven.node_events]
    assert kinds == [("fail", node), ("recover", node)]
    snap = driven.snapshot()
    assert len(snap.engines) == len(snap.replicas) + 1  # the lost incarnation stays, with its records
    assert snap.engines[-1].view is snap.replicas[-1].view  # the comeback is the current engine


def test_the_snapshot_says_each_replicas_pool_and_kv_holding_queue() -> None:
    pools, aggregated = _pools([]), _aggregated([])
    pools.advance(0.1)
    aggregated.advance(0.1)
    snap = pools.snapshot()
    assert [(r.name, r.role, r.clients) for r in snap.replicas] == [
        ("p0", "prefill", False),
        ("d0", "decode", True),
        ("d1", "decode", True),
    ]
    assert pools.pools == {"p0": "prefill", "d0": "decode", "d1": "decode"}
    assert all(not r.holding for r in snap.replicas if r.role == "prefill")
    assert pools.transfers(pools.now) is not None
    flat = aggregated.snapshot()
    assert [(r.role, r.holding) for r in flat.replicas] == [(None, ()), (None, ())]
    assert aggregated.pools is None and aggregated.transfers(aggregated.now) is None


def test_one_live_class_and_one_online_class_for_either_fleet() -> None:
    trace = _trace()
    aggregated = LiveClusterRun(trace, [_rep("n0"), _rep("n1")])
    pools = LivePDRun(trace, [_rep("p0")], [_rep("d0")], _ctx())
    assert type(aggregated) is type(pools) is LiveFleetRun
    assert isinstance(aggregated.sim, ClusterSimulator) and isinstance(pools.sim, PDCluster)
    online = OnlineFleet([_rep("n0")])
    disagg = OnlinePDFleet([_rep("p0")], [_rep("d0")], _ctx())
    assert type(online) is type(disagg) is OnlineFleet
    assert online.pools is None and disagg.pools == {"p0": "prefill", "d0": "decode"}
    q = online.submit("a", 0.0, 100, 3)
    online.advance_until(math.inf)
    assert online.legs(q) is None and online.ended_transfers() == []  # the P/D answers: none here


def test_the_fleet_modules_read_replicas_through_their_views() -> None:
    """test_replica_view's check over the modules this split added (the live layer's code moved
    from live.py to servesim/_live/; the fleet's reading code is in cluster/)."""
    files = [*sorted((SRC / "_live").rglob("*.py")), *sorted((SRC / "cluster" / "pd").rglob("*.py"))]
    files += [SRC / "cluster" / "fleet.py", SRC / "cluster" / "story.py"]
    allowed = {"cluster/fleet.py: .rec"}  # a fleet owns its engines' records (roll_records)
    bad = []
    for path in files:
        for hit in _engine_attribute_reads(Path(path)):
            where, attr = hit.split(": ", 1)
            if f"{where.split(':')[0]}: {attr}" not in allowed:
                bad.append(hit)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("pool", "words"),
    [
        ({"replicas": 65}, "prefill.replicas: Input should be less than or equal to 64"),
        ({"tp": 65}, "prefill.tp: Input should be less than or equal to 64"),
        ({"gpu": ""}, "prefill.gpu: String should have at least 1 character"),
    ],
)
def test_a_pool_has_one_set_of_bounds_wherever_it_is_stated(pool: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError) as file_error:  # a cluster file's pool
        DisaggSpec.model_validate({"prefill": pool})
    with pytest.raises(ValidationError) as spec_error:  # a ClusterSpec's deployment pool
        ClusterSpec.model_validate({"trace": "t", "disaggregated": {"prefill": pool}})
    field, why = words.split(": ", 1)
    assert words in describe(file_error.value)
    said = describe(spec_error.value)  # "disaggregated: prefill.tp: ..." or "disaggregated.prefill.tp: ..."
    assert said.startswith("disaggregated") and field in said and why in said
    PoolSpec(replicas=64, tp=64, gpu="h100")  # the bounds themselves are allowed
