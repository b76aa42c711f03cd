"""A routed arrival runs only the replicas its router may read differently (cluster/stepping.py,
engine/stretch_cursor.py): the same routing and byte-identical results as running every replica
to every arrival (``_lazy`` off: the cluster loop as it was), on every router that can skip
replicas, with failures, small KV pools (preemption), full batches (waiting requests), queue
timeouts and prefix caching; on the roofline model, whose decode terms let a cursor time a
replica's stretch ahead."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.cluster import FailureEvent, Replica, RouterSpec
from servesim.cluster.results import ClusterResult, build_cluster_result
from servesim.cluster.simulate import ClusterSimulator
from servesim.engine import EngineConfig
from servesim.engine.stretch_cursor import StretchCursor
from servesim.perf.roofline import build_step_time_model
from servesim.traces import GeneratorSpec, LogNormalLength, PoissonArrivals, generate_trace

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ROOFLINE = build_step_time_model("llama-3.1-8b", "h100", max_num_seqs=32, max_num_batched_tokens=1024)

SKIPPING_ROUTERS = ["least_outstanding", "power_of_two", "round_robin", "random"]


def run(sim: ClusterSimulator) -> tuple[ClusterResult, int]:
    """The cluster's result and the engine steps its loop ended (stretch steps not counted)."""
    steps = sim.advance()
    return build_cluster_result(sim.close(), None, router=sim.router.spec.policy), steps


def both(make: Callable[[], ClusterSimulator]) -> tuple[tuple[ClusterResult, int], tuple[ClusterResult, int]]:
    """The same fleet run as it is and with every replica run to every arrival (the reference)."""
    lazy = make()
    eager = make()
    eager._lazy = False
    return run(lazy), run(eager)


def assert_identical(a: ClusterResult, b: ClusterResult) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.moves, b.moves)
    pd.testing.assert_frame_equal(a.preemptions, b.preemptions)
    assert a.summary.model_dump_json() == b.summary.model_dump_json()


def simulator(
    n: int,
    policy: str,
    *,
    rate: float,
    requests: int,
    seed: int,
    config: EngineConfig,
    failures: list[FailureEvent] | None = None,
) -> ClusterSimulator:
    trace = generate_trace(
        GeneratorSpec(
            num_requests=requests,
            seed=seed,
            arrival=PoissonArrivals(rate=rate),
            prompt=LogNormalLength(mean=400, sigma=0.8, max=2000),
            output=LogNormalLength(mean=90, sigma=0.9, max=400),
        )
    )
    reps = [Replica(f"n{i}", config, ROOFLINE) for i in range(n)]
    return ClusterSimulator(trace, reps, RouterSpec(policy=policy, seed=seed), failures or [])  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 5),
    policy=st.sampled_from(SKIPPING_ROUTERS),
    rate=st.sampled_from([5.0, 20.0, 60.0]),
    requests=st.integers(20, 160),
    seed=st.integers(0, 10_000),
    blocks=st.sampled_from([170, 400, 6000]),
    max_seqs=st.sampled_from([4, 32]),
    timeout=st.sampled_from([None, 0.5]),
    caching=st.booleans(),
    fail=st.one_of(
        st.none(), st.tuples(st.integers(0, 4), st.floats(0.1, 3.0), st.sampled_from([None, 0.5]))
    ),
)
def test_skipping_replicas_changes_no_decision_and_no_byte(
    n: int,
    policy: str,
    rate: float,
    requests: int,
    seed: int,
    blocks: int,
    max_seqs: int,
    timeout: float | None,
    caching: bool,
    fail: tuple[int, float, float | None] | None,
) -> None:
    config = EngineConfig(
        num_gpu_blocks=blocks,
        max_num_seqs=max_seqs,
        max_num_batched_tokens=1024,
        max_model_len=2600,
        enable_prefix_caching=caching,
        queue_timeout_s=timeout,
    )
    failures = []
    if fail is not None:
        failures = [FailureEvent(node=f"n{fail[0] % n}", time_s=fail[1], recover_after_s=fail[2])]

    def make() -> ClusterSimulator:
        rps = rate * n
        return simulator(n, policy, rate=rps, requests=requests, seed=seed, config=config, failures=failures)

    (lazy, _), (eager, _) = both(make)
    assert_identical(lazy, eager)


def test_a_busy_fleet_routes_the_same_with_fewer_scheduler_steps() -> None:
    """At benchmark-like load (10 req/s a replica, 6 replicas) the results are the same to the
    byte, and the cluster loop ends fewer steps through the scheduler: stretches are no longer
    cut at every arrival routed elsewhere (each cut costs a scheduler step)."""
    config = EngineConfig(num_gpu_blocks=6000, max_num_seqs=32, max_num_batched_tokens=1024)

    def make() -> ClusterSimulator:
        return simulator(6, "least_outstanding", rate=60.0, requests=900, seed=7, config=config)

    (lazy, lazy_steps), (eager, eager_steps) = both(make)
    assert_identical(lazy, eager)
    assert len(lazy.steps) == len(eager.steps) > 0
    assert lazy_steps < 0.8 * eager_steps


def test_a_live_run_advanced_piecewise_equals_one_run_in_one_go() -> None:
    """``advance(until)`` leaves every replica as the cluster loop always did (caught up to the
    last arrival, then to ``until``): piecewise and whole runs agree, and the clock too."""
    config = EngineConfig(num_gpu_blocks=3000, max_num_seqs=16, max_num_batched_tokens=1024)
    whole = simulator(4, "least_outstanding", rate=40.0, requests=300, seed=3, config=config)
    eager = simulator(4, "least_outstanding", rate=40.0, requests=300, seed=3, config=config)
    eager._lazy = False
    pieces = simulator(4, "least_outstanding", rate=40.0, requests=300, seed=3, config=config)
    for until in np.arange(0.37, 12.0, 0.61):
        pieces.advance(float(until))
        eager.advance(float(until))
        assert pieces.now == eager.now
        assert [p is None or (p.start, p.duration) for p in pieces.inflight] == [
            p is None or (p.start, p.duration) for p in eager.inflight
        ]
        assert [v.outstanding for v in pieces.views] == [v.outstanding for v in eager.views]
    pieces.advance()
    whole.advance()
    a = build_cluster_result(pieces.close(), None)
    b = build_cluster_result(whole.close(), None)
    assert_identical(a, b)


def test_a_cursor_times_the_stretch_as_the_engine_runs_it() -> None:
    """A replica alone in decode: its cursor's bound is the end of the step in which its first
    member finishes, exactly as the engine then runs it (one stretch, the same float sums)."""
    from servesim.engine import Engine
    from servesim.traces import Trace

    trace = Trace.from_records(
        [
            {"req_id": "a", "arrival_time_s": 0.0, "prompt_len": 100, "output_len": 40},
            {"req_id": "b", "arrival_time_s": 0.0, "prompt_len": 300, "output_len": 25},
        ]
    )
    engine = Engine(trace, EngineConfig(num_gpu_blocks=500, max_num_seqs=8), ROOFLINE)
    p = engine.begin_step(0.001)  # the prefill of both, in flight
    assert p is not None
    engine.end_step(p)
    p = engine.begin_step(engine.now + 1e-9)  # one decode step, begun as a cluster would
    assert p is not None and not p.plan.scheduled and p.plan.num_group_decodes == 2
    cursor = StretchCursor()
    cursor.watch(engine, p)
    assert cursor.outstanding == 2 and cursor.quiet_through(p.start + p.duration)
    assert cursor.quiet_through(5.0) is False  # b's last token comes before 5 s
    b_done = cursor.bound
    engine.end_step(p)
    engine.run_until(math.inf)
    assert engine.rec.finish[1] == b_done  # b finishes at the end of the step the cursor found
    assert engine.rec.finish[0] > b_done
