"""Routers, the recovery planner, the cluster's bookkeeping and ``servesim.live`` read replicas
through ``ReplicaView`` (issue 27, item 5): nothing outside ``servesim.engine`` reaches into the
scheduler's lists, the block pool, the KV-cache manager or the engine's private fields."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim import EngineConfig, LinearStepTime, open_trace
from servesim.cluster.config import RouterPolicy, RouterSpec
from servesim.cluster.router import Router
from servesim.engine.engine import Engine, TraceArrays
from servesim.engine.replica import ReplicaView

SRC = Path(__file__).resolve().parents[2] / "src" / "servesim"
INTERNALS = {"scheduler", "pool", "kv", "live", "rec", "running", "waiting", "kv_cache_manager", "block_pool"}
READERS = [
    "cluster/router.py",
    "cluster/planning.py",
    "cluster/simulate.py",
    "cluster/recovery",
    "live.py",
    "online.py",
    "tui",
    "emulate",
    "web",
]


def _files() -> list[Path]:
    out: list[Path] = []
    for rel in READERS:
        p = SRC / rel
        out += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return out


def _engine_attribute_reads(path: Path) -> list[str]:
    """``<x>.scheduler``/``.pool``/``.kv``/... and ``<x>._name`` on anything but ``self``/``cls``
    (an engine's internals or another object's private fields)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            continue
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
            continue
        if node.attr == "_asdict":  # a named tuple's public method
            continue
        private = node.attr.startswith("_") and not node.attr.startswith("__")
        if node.attr in INTERNALS - {"running", "waiting"} or private:
            found.append(f"{path.relative_to(SRC)}:{node.lineno}: .{node.attr}")
    return found


def test_no_reader_reaches_into_an_engine() -> None:
    allowed = {
        # OnlineRequest's own handle on its request (the class's private field, same module).
        "online.py: ._r",
        "online.py: ._first",  # OnlinePDRequest's handle on its first leg (same module)
        # The cluster owns its engines: bounding their records (roll_records) is its operation.
        "cluster/simulate.py: .rec",
    }
    bad = []
    for path in _files():
        for hit in _engine_attribute_reads(path):
            where, attr = hit.split(": ", 1)
            if f"{where.split(':')[0]}: {attr}" not in allowed:
                bad.append(hit)
    assert not bad, "read through servesim.engine.replica.ReplicaView instead:\n" + "\n".join(bad)


def _engine() -> Engine:
    trace = open_trace("bursty", num_requests=60, seed=1)
    engine = Engine(trace, EngineConfig(max_num_seqs=8, num_gpu_blocks=400), LinearStepTime())
    engine.run_until(0.5)
    return engine


def test_the_view_is_read_only_and_hands_out_copies() -> None:
    engine = _engine()
    view = ReplicaView(engine)
    with pytest.raises(AttributeError):
        view._engine = engine  # type: ignore[misc]
    with pytest.raises(AttributeError):
        view.num_running = 0  # type: ignore[misc]
    running = view.running()
    assert isinstance(running, tuple) and running == tuple(engine.scheduler.running)
    assert running is not engine.scheduler.running
    assert view.num_running == len(engine.scheduler.running) > 0
    assert view.num_waiting == len(engine.scheduler.waiting)
    assert view.outstanding == view.num_running + view.num_waiting
    assert view.kv_usage == engine.pool.usage()
    assert view.kv_blocks_used == engine.pool.usable_blocks - engine.pool.num_free
    assert all(view.holds(r) and view.is_running(r) for r in running)
    assert view.waiting(3) == tuple(engine.scheduler.waiting.head(3))


def test_aborting_is_one_engine_operation() -> None:
    engine = _engine()
    view = ReplicaView(engine)
    r = view.running()[0]
    n = view.num_running
    assert engine.abort(r, engine.now)
    assert not view.holds(r) and view.num_running == n - 1
    engine.assert_invariants()


# ---------------------------------------------------------------------- routers only read
REQUEST_FIELDS = (
    "status",
    "outcome",
    "finish_time",
    "num_computed",
    "num_output",
    "num_preemptions",
    "num_cached_blocks",
    "num_live_blocks",
    "priority",
    "max_tokens",
    "sync_step",
)


def _state(engine: Engine) -> tuple[object, ...]:
    """Everything a router could change through a view: the queues (order and members), each
    live request's scheduling fields and blocks, the pool's free count and prefix-cache index."""
    reqs = sorted(engine.live.values(), key=lambda r: r.idx)
    return (
        tuple(r.idx for r in engine.scheduler.running),
        tuple(r.idx for r in engine.scheduler.waiting.head(len(engine.scheduler.waiting))),
        tuple((r.idx, *(getattr(r, f) for f in REQUEST_FIELDS), tuple(r.blocks)) for r in reqs),
        engine.pool.num_free,
        tuple(sorted(engine.pool.cached.items())),
        tuple(sorted((k, tuple(v)) for k, v in engine.pool.hashed.items())),  # keys filed per hash id
        engine.step,
        engine.now,
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(get_args(RouterPolicy)),
    seed=st.integers(0, 5),
    until=st.floats(0.05, 2.0),
    arrival=st.integers(0, 59),
)
def test_no_router_changes_a_replica_it_reads(policy: str, seed: int, until: float, arrival: int) -> None:
    """Every router policy picks from views alone: the replicas' queues, requests, KV pool and
    prefix cache are the same after ``pick`` as before (a router that popped a queue, freed a
    block or touched a request through the view would fail here)."""
    trace = open_trace("bursty", num_requests=60, seed=seed)
    engines = [
        Engine(
            trace, EngineConfig(max_num_seqs=4 * (k + 1), num_gpu_blocks=2000 + 1000 * k), LinearStepTime()
        )
        for k in range(3)
    ]
    for k, e in enumerate(engines):
        e.run_until(until * (k + 1) / 3)
    views = [ReplicaView(e) for e in engines]
    before = [_state(e) for e in engines]
    r = TraceArrays(trace).make_request(arrival)
    router = Router(RouterSpec(policy=policy, seed=seed))  # type: ignore[arg-type]
    picks = [router.pick(r, views, [0, 1, 2]) for _ in range(4)]
    assert all(p in (0, 1, 2) for p in picks)
    assert [_state(e) for e in engines] == before
    # the fingerprint does see a change made through a view's request
    held = next((v.running()[0] for v in views if v.num_running), None)
    if held is not None:
        held.num_preemptions += 1
        assert [_state(e) for e in engines] != before
