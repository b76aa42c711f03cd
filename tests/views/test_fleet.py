"""The fleet views of a cluster run (servesim.views.fleet): the single-run charts for the fleet
and each replica, the failures drawn on the series, and a bottleneck verdict read from the data."""

from __future__ import annotations

import re

import numpy as np
import pytest

from servesim.cluster import FailureEvent, Replica, RouterSpec, simulate_cluster
from servesim.engine import EngineConfig, LinearStepTime, simulate
from servesim.engine.results import SLO
from servesim.traces import (
    FixedLength,
    GeneratorSpec,
    LogNormalLength,
    PoissonArrivals,
    PrefixSpec,
    generate_trace,
    open_trace,
)
from servesim.views.fleet import fleet_views, replica_results
from servesim.views.simulation import bottleneck, simulation_view

CFG = EngineConfig(num_gpu_blocks=6000, max_num_seqs=64)


def replicas(n: int, config: EngineConfig = CFG) -> list[Replica]:
    return [Replica(f"n{i}", config, LinearStepTime()) for i in range(n)]


def one_prefix_trace():  # type: ignore[no-untyped-def]
    """Every request shares one 1,024-token prefix: a router that follows the cache alone sends
    them all to the replica that holds it."""
    return generate_trace(
        GeneratorSpec(
            num_requests=900,
            seed=3,
            arrival=PoissonArrivals(rate=60),
            prompt=LogNormalLength(mean=1400, sigma=0.3, max=4000),
            output=LogNormalLength(mean=60, sigma=0.5, max=400),
            prefix=PrefixSpec(num_groups=1, prefix_len=FixedLength(value=1024), fraction=1.0),
        )
    )


def test_the_verdict_names_the_replica_a_cache_only_router_overloads() -> None:
    """A router scoring the prefix cache alone piles every request on one replica: the verdict
    names it; least_outstanding spreads the same trace and the verdict says something else."""
    trace = one_prefix_trace()
    sticky = RouterSpec(policy="prefix_aware", prefix_weight=10.0, queue_weight=0.0, kv_weight=0.0)
    bad = simulate_cluster(trace, replicas(3), sticky)
    finished = {k: s.num_finished for k, s in bad.summary.replicas.items()}
    hot = max(finished, key=lambda k: finished[k])
    assert finished[hot] > 0.8 * 900  # the data: one replica did nearly everything
    verdict = next(v for v in fleet_views(bad)[0].verdicts if v.key == "fleet_bottleneck")
    assert verdict.status == "warn"
    assert verdict.text.startswith(f"one replica hot: {hot} held a mean queue of")
    assert "finished 100% of the requests (an even split is 33%)" in verdict.text
    assert "{" not in verdict.text  # every figure filled in (the busy share was printed as a template)
    assert re.search(r", busy \d+% of its time \(the others \d+%\)", verdict.text), verdict.text
    assert "The router (prefix_aware) does not spread the load" in verdict.text
    good = simulate_cluster(trace, replicas(3), RouterSpec(policy="least_outstanding"))
    assert min(s.num_finished for s in good.summary.replicas.values()) > 200
    fair = next(v for v in fleet_views(good)[0].verdicts if v.key == "fleet_bottleneck")
    assert "one replica hot" not in fair.text


def test_a_fleet_beyond_its_compute_is_queueing_or_a_limit_on_every_replica() -> None:
    """Three small replicas under a rate far beyond them: no replica is hotter than the others,
    every one queues; the verdict is the limit most replicas share (as each replica's own)."""
    trace = open_trace("poisson_30_rps", num_requests=900, seed=2)
    small = EngineConfig(num_gpu_blocks=6000, max_num_seqs=4)
    res = simulate_cluster(trace, replicas(3, small), RouterSpec(policy="round_robin"))
    views = fleet_views(res)
    verdict = views[0].verdicts[-1]
    own = [bottleneck(r) for r in replica_results(res).values()]
    assert all(v.text.startswith("max_num_seqs:") for v in own)  # each replica's verdict
    assert verdict.text.startswith("max_num_seqs-bound: max_num_seqs was the binding limit on 3 of 3")
    # the same limit per replica in the load table
    assert views[0].table("replicas").column("limit") == ["max_num_seqs (100% of its waiting)"] * 3


def test_a_light_fleet_is_compute_bound() -> None:
    trace = open_trace("poisson_30_rps", num_requests=600, seed=2)
    res = simulate_cluster(trace, replicas(3), RouterSpec(policy="least_outstanding"))
    verdict = fleet_views(res)[0].verdicts[-1]
    assert verdict.status == "pass" and verdict.text.startswith("compute-bound, no scheduler limit")


def test_a_failure_is_drawn_on_the_queue_and_throughput_and_can_be_the_verdict() -> None:
    """Three replicas, one lost for 8 s: the outage is shaded on the fleet's and each replica's
    time series and marked with the replica, the policy and the requests moved; the two left
    queue through it (three carry the rate easily), and the verdict says the failure did it."""
    trace = open_trace("poisson_30_rps", num_requests=1200, seed=2)
    fail = [FailureEvent(node="n1", time_s=10.0, recover_after_s=8.0)]
    res = simulate_cluster(trace, replicas(3), RouterSpec(), fail, recovery="restart")
    views = fleet_views(res)
    fleet = views[0]
    moved = len(res.moves)
    assert moved > 0 and set(res.moves["strategy"]) == {"COLD_RESTART"}
    for key in ("num_waiting", "output_tokens_per_s"):
        s = fleet.chart(key)
        assert [(m.x, m.label) for m in s.marks] == [(10.0, "n1 down at 10 s"), (18.0, "n1 back (empty)")]
        label = f"n1 down (restart); {moved:,} requests moved: RECOMPUTE {moved:,}"
        assert [(sp.x0, sp.x1, sp.label) for sp in s.spans] == [(10.0, 18.0, label)]
        assert [ln.label for ln in s.lines] == ["n0", "n1", "n2"] and s.name == "fleet"
    # the fleet's queue is the replicas' queues summed (time-weighted per bin)
    q = fleet.chart("num_waiting")
    assert np.allclose(q.y, np.sum([ln.y for ln in q.lines], axis=0), rtol=1e-4, atol=1e-3)
    # n1 is down from 10 s to 18 s: its running batch is zero inside the outage
    run = fleet.chart("num_running")
    n1 = dict(zip(run.x, next(ln.y for ln in run.lines if ln.label == "n1"), strict=True))
    assert all(v == 0 for x, v in n1.items() if 10.5 < x < 17.5)
    assert any(v > 0 for x, v in n1.items() if x < 9.5)
    for rep in views[1:]:
        assert rep.chart("num_waiting").spans and rep.chart("output_tokens_per_s").marks
        assert not rep.chart("latency_split").marks  # not a time series
    verdict = fleet.verdicts[-1]
    assert verdict.text.startswith("the failure: n1 at 10 s")
    assert "the survivors queued" in verdict.text


def test_the_views_hold_the_single_run_charts_for_the_fleet_and_each_replica() -> None:
    trace = open_trace("poisson_30_rps", num_requests=600, seed=2)
    slo = SLO(ttft_ms=500.0, e2e_ms=20_000.0)
    res = simulate_cluster(trace, replicas(3), RouterSpec(policy="round_robin"), slo=slo)
    views = fleet_views(res)
    assert [v.key for v in views] == ["fleet", "replica.n0", "replica.n1", "replica.n2"]
    fleet = views[0]
    hists = {h.key: h for h in fleet.histograms}
    assert list(hists) == ["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms", "num_tokens"]
    assert hists["ttft_ms"].slo == 500.0 and hists["e2e_ms"].slo == 20_000.0
    assert hists["ttft_ms"].count == 600 == sum(hists["ttft_ms"].counts)
    assert hists["num_tokens"].count == res.summary.cluster.num_steps
    assert {s.key for s in fleet.series} == {
        "num_waiting",
        "num_running",
        "kv_usage",
        "preemptions",
        "output_tokens_per_s",
        "latency_split",
    }
    assert fleet.chart("latency_split").categories == ["queue", "prefill", "decode"]
    # the fleet's output tokens per second integrate to every output token of the run
    thr = fleet.chart("output_tokens_per_s")
    width = thr.x[1] - thr.x[0]
    assert sum(thr.y) * width == pytest.approx(int(res.steps["num_decodes"].sum()), rel=1e-3)
    # each replica: exactly the single-run view of its own requests and steps
    for name, r in replica_results(res).items():
        view = next(v for v in views if v.key == f"replica.{name}")
        alone = simulation_view(r, title=f"replica {name}")
        assert view.histograms == alone.histograms and view.verdicts == alone.verdicts
        assert [s.key for s in view.series] == [s.key for s in alone.series]
        assert r.summary.num_finished == 200


def test_a_one_replica_cluster_view_is_the_single_run_view() -> None:
    """One replica, no failure: its replica view equals simulate's own view of the same run."""
    trace = open_trace("bursty", num_requests=300, seed=4)
    alone = simulate(trace, CFG, LinearStepTime())
    res = simulate_cluster(trace, replicas(1))
    view = fleet_views(res)[1]
    base = simulation_view(alone, title="replica n0")
    assert view.histograms == base.histograms
    assert [s.y for s in view.series] == [s.y for s in base.series]
    assert view.verdicts == base.verdicts


def test_a_fleet_that_loses_every_replica_still_has_its_views() -> None:
    """Both replicas lost for good: the requests left are parked (unfinished); every view still
    builds, each outage is shaded to the end of the run, nothing is invented."""
    trace = open_trace("poisson_30_rps", num_requests=300, seed=2)
    fail = [FailureEvent(node="n0", time_s=2.0), FailureEvent(node="n1", time_s=3.0)]
    res = simulate_cluster(trace, replicas(2), RouterSpec(), fail)
    assert res.summary.num_parked_unfinished > 0
    views = fleet_views(res)
    queue = views[0].chart("num_waiting")
    end = queue.x[-1]
    assert [sp.x0 for sp in queue.spans] == [2.0, 3.0] and all(sp.x1 >= end for sp in queue.spans)
    verdict = views[0].verdicts[-1]
    parked = res.summary.num_parked_unfinished
    assert verdict.status == "fail" and verdict.text.startswith(
        f"the failure: no replica was left to serve {parked:,} requests (lost: n0 at 2 s, n1 at 3 s)"
    )
    assert [v.key for v in views] == ["fleet", "replica.n0", "replica.n1"]


def test_a_failure_after_the_run_is_not_drawn() -> None:
    """A failure after the last step changed nothing: no mark stretches the time axis to it."""
    trace = open_trace("poisson_30_rps", num_requests=200, seed=2)
    res = simulate_cluster(trace, replicas(2), RouterSpec(), [FailureEvent(node="n1", time_s=1e6)])
    queue = fleet_views(res)[0].chart("num_running")
    assert queue.marks == [] and queue.spans == []
