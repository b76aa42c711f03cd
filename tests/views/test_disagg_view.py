"""The view of a disaggregated run (servesim.views.disagg): the per-leg breakdown stacked from the
result's own leg figures, the pools' table counting each replica's requests and KV, the SLO's
tiles, and the failures' tables only when a replica was lost."""

from __future__ import annotations

import pytest

from servesim.cluster.config import FailureEvent, RouterSpec
from servesim.cluster.pd import DisaggSpec, PDCluster, PoolSpec
from servesim.cluster.pd_results import LEGS, PDResult, pd_result
from servesim.cluster.recovery.costs import RecoveryContext
from servesim.cluster.simulate import Replica
from servesim.engine import ConstantStepTime, EngineConfig
from servesim.engine.results import SLO
from servesim.perf import load_catalog
from servesim.perf.catalog import resolve_model
from servesim.traces.schema import Trace
from servesim.views.disagg import LEG_ORDER, disagg_sections, disagg_view

STEP = 0.01
RR = RouterSpec(policy="round_robin")


def _run(n_p: int, n_d: int, fails: list[FailureEvent] | None = None, slo: SLO | None = None) -> PDResult:
    ctx = RecoveryContext(model=resolve_model("llama-3.1-8b", load_catalog()), bandwidth_gbps=25.0)
    rows = [(0.05 * i, 64 if i % 4 == 0 else 400 + 10 * i, 30 + i % 7) for i in range(40)]
    trace = Trace.from_records(
        [
            {"req_id": f"r{i}", "arrival_time_s": a, "prompt_len": p, "output_len": o}
            for i, (a, p, o) in enumerate(rows)
        ],
        source="t",
    )

    def rep(name: str) -> Replica:
        cfg = EngineConfig(num_gpu_blocks=4000, enable_prefix_caching=True, max_num_seqs=64)
        return Replica(name, cfg, ConstantStepTime(step_time_s=STEP))

    run = PDCluster(
        trace,
        [rep(f"p{i}") for i in range(n_p)],
        [rep(f"d{i}") for i in range(n_d)],
        ctx,
        short_prompt_tokens=100,
        failures=fails or [],
        decode_router=RR,
        prefill_router=RR,
    ).run()
    return pd_result(run, ctx.bytes_total(1), slo)


def _spec(n_p: int, n_d: int) -> DisaggSpec:
    return DisaggSpec(prefill=PoolSpec(replicas=n_p), decode=PoolSpec(replicas=n_d), short_prompt_tokens=100)


def test_the_stacked_breakdown_is_the_result_s_legs_and_its_means_add_up_to_e2e() -> None:
    res = _run(1, 2)
    view = disagg_view(res, _spec(1, 2))
    bar = view.chart("leg_breakdown")
    assert bar.stacked and bar.kind == "bar" and bar.categories == ["mean", "p50", "p99"]
    assert [bar.name, *(ln.label for ln in bar.lines)] == [label for _, label in LEG_ORDER]
    assert set(LEGS) == {key for key, _ in LEG_ORDER}
    for (key, _), y in zip(LEG_ORDER, [bar.y, *(ln.y for ln in bar.lines)], strict=True):
        x = res.summary.legs[key]
        assert y == pytest.approx([x.mean_ms, x.p50_ms, x.p99_ms], abs=1e-3)
    dis = [r for r in res.requests if r.prefill_replica is not None]
    mean_e2e = sum(r.e2e_s for r in dis) / len(dis) * 1000.0
    means = [bar.y[0], *(ln.y[0] for ln in bar.lines)]
    assert sum(means) == pytest.approx(mean_e2e, abs=1e-2)
    assert bar.title == f"where a request's time goes, per leg ({len(dis)} requests)"
    assert f"the means add up to the mean E2E of the disaggregated requests ({mean_e2e:,.1f} ms)" in (
        bar.help or ""
    )
    legs = view.table("legs")
    assert legs.column("leg") == [label for _, label in LEG_ORDER]
    # each leg's distribution over the disaggregated requests, and TTFT/TPOT/E2E's, after the view
    main, dist = disagg_sections(res, _spec(1, 2))
    assert main == view and dist.key == "disaggregated.distributions" and not view.histograms
    assert {h.key for h in dist.histograms} == {"ttft_ms", "tpot_ms", "e2e_ms", *(f"leg.{k}" for k in LEGS)}
    assert dist.histogram("leg.transfer").count == len(dis)
    assert dist.histogram("e2e_ms").count == 40
    # no SLO: no goodput tile, no failures' tables
    assert {"goodput", "good_fraction"}.isdisjoint(k.key for k in view.kpis)
    assert {t.key for t in view.tables} == {"legs", "pools", "figures"}


def test_the_pools_table_counts_each_replica_s_requests_and_kv() -> None:
    res = _run(2, 2)
    pools = disagg_view(res, _spec(2, 2)).table("pools")
    assert pools.column("replica") == ["p0", "p1", "d0", "d1"]
    assert pools.column("pool") == ["prefill", "prefill", "decode", "decode"]
    local = sum(1 for r in res.requests if r.prefill_replica is None)
    assert local == res.summary.num_local == 10  # every fourth prompt is short (64 < 100 tokens)
    prefilled = dict(zip(pools.column("replica"), pools.column("prefilled"), strict=True))
    decoded = dict(zip(pools.column("replica"), pools.column("decoded"), strict=True))
    for name in ("p0", "p1"):
        assert prefilled[name] == sum(1 for r in res.requests if r.prefill_replica == name) > 0
        assert decoded[name] == 0
    assert decoded["d0"] + decoded["d1"] == 40
    assert prefilled["d0"] + prefilled["d1"] == local
    sent = pools.column("sent")
    received = pools.column("received")
    assert sum(sent) == pytest.approx(res.summary.transfer_gb) == pytest.approx(sum(received))  # type: ignore[arg-type]
    assert sent[2:] == [0.0, 0.0] and received[:2] == [0.0, 0.0]


def test_slo_tiles_and_verdict() -> None:
    res = _run(1, 1, slo=SLO(ttft_ms=1e9, tpot_ms=STEP * 1000 / 2))
    view = disagg_view(res, _spec(1, 1))
    s = res.summary
    assert view.kpi("goodput").value == s.goodput and view.kpi("good_fraction").value == s.good_fraction
    assert view.kpi("ttft_ms_p99").verdict == "pass" and view.kpi("tpot_ms_p99").verdict == "fail"
    verdict = next(v for v in view.verdicts if v.key == "slo")
    assert verdict.status == "fail" and verdict.text.startswith(f"TPOT p99 {s.tpot_p99_ms:,.1f} ms > 5.0 ms")


def test_failures_and_recoveries_appear_only_when_a_replica_was_lost() -> None:
    res = _run(1, 2, fails=[FailureEvent(node="d0", time_s=0.5)])
    view = disagg_view(res, _spec(1, 2))
    fails = view.table("failures")
    assert fails.rows == [["d0", "decode", 0.5, None, res.failures[0].requests]]
    rec = view.table("recoveries")
    assert sum(rec.column("requests")) == sum(res.summary.recoveries.values()) > 0  # type: ignore[arg-type]
    assert dict(
        zip(view.table("pools").column("replica"), view.table("pools").column("lost"), strict=True)
    ) == {
        "p0": "",
        "d0": "lost at 0.5 s",
        "d1": "",
    }
