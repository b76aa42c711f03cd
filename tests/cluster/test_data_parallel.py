"""A ``--data-parallel-size`` deployment's ranks (``cluster.data_parallel``): vLLM's DP load
balancer against vLLM's own ``get_core_engine_for_request``, hand-worked lockstep steps (an idle
rank's dummy batch, the wave's tail of dummy steps to the sync interval) and independent dense
ranks."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from oracle_venv import run_oracle_tool
from servesim import ConstantStepTime, EngineConfig
from servesim.cluster import Replica
from servesim.cluster.data_parallel import DPLoadBalancer, simulate_data_parallel
from servesim.cluster.results import build_cluster_result
from servesim.engine.step_time import BatchComposition
from servesim.traces.schema import Trace

MS = 1e-3


def _trace(rows: list[tuple[float, int, int]]) -> Trace:
    return Trace.from_records(
        [
            {"req_id": f"r{i}", "arrival_time_s": a, "prompt_len": p, "output_len": o}
            for i, (a, p, o) in enumerate(rows)
        ],
        source="t",
    )


def _ranks(n: int, step_s: float = 1 * MS) -> list[Replica]:
    cfg = EngineConfig(num_gpu_blocks=1000, max_num_seqs=16, max_num_batched_tokens=512)
    return [Replica(f"dp{k}", cfg, ConstantStepTime(step_time_s=step_s)) for k in range(n)]


class _Lockstep:
    """A group step of ``1 ms + 0.1 ms`` per token of its largest rank (an idle rank: 1 token)."""

    def __init__(self) -> None:
        self.calls: list[list[int | None]] = []

    def lockstep(self, batches: Sequence[BatchComposition | None]) -> float:
        self.calls.append([b.num_tokens if b is not None else None for b in batches])
        return max(1 * MS + 0.1 * MS * (b.num_tokens if b is not None else 1) for b in batches)


# ------------------------------------------------------------------ the load balancer
def _lb_cases() -> list[dict[str, Any]]:
    rng = random.Random(7)
    cases = [{"counts": [[0, 0, 0.0]] * 4, "inflight": [0] * 4} for _ in range(6)]  # ties rotate
    for _ in range(60):
        n = 4
        counts = [
            [rng.randint(0, 4), rng.randint(0, 6), rng.choice([0.0, 0.4, 0.6, 0.8, 0.95])] for _ in range(n)
        ]
        inflight = [c[0] + c[1] + rng.choice([0, 0, 1]) for c in counts]
        cases.append({"counts": counts, "inflight": inflight})
    return cases


def test_load_balancer_picks_are_vllms() -> None:
    """The same snapshots and in-flight counts, request after request: the same ranks as vLLM
    0.33's ``DPLBAsyncMPClient.get_core_engine_for_request`` (its scan start carried along)."""
    cases = _lb_cases()
    want = run_oracle_tool("dp_oracle.py", [{"kind": "lb", "picks": cases}], timeout=300)[0]["picks"]
    lb = DPLoadBalancer()
    got = [lb.pick([tuple(c) for c in case["counts"]], case["inflight"]) for case in cases]  # type: ignore[misc]
    assert got == want
    assert want[:6] == [0, 1, 2, 3, 0, 1]  # idle ranks: round robin


def test_kv_pressure_steers_away_from_a_queue() -> None:
    """Equal load, but rank 0 has 2 waiting at 90 % KV: its score is 3 + 2 x 6 x 0.4."""
    lb = DPLoadBalancer()
    assert lb.pick([(2, 1, 0.9), (0, 3, 0.9)], [3, 3]) == 1
    # below 50 % KV no penalty: a tie, to the first rank from the scan start (rank 1 now)
    assert lb.pick([(2, 1, 0.4), (0, 3, 0.9)], [3, 3]) == 1
    assert lb.pick([(2, 1, 0.4), (0, 3, 0.9)], [3, 3]) == 0


# ------------------------------------------------------------------ lockstep
def test_one_busy_rank_hand_worked() -> None:
    """One request (100-token prompt, 3 outputs) on 2 MoE ranks: the busy rank prefills (the
    group step lasts its 100 tokens: 11 ms; the idle rank runs a dummy), decodes twice (1.1 ms
    each); the ranks then run dummy steps until the 16th step's sync finds no work."""
    model = _Lockstep()
    run, stats = simulate_data_parallel(_trace([(0.0, 100, 3)]), _ranks(2), model)  # type: ignore[arg-type]
    assert model.calls[:3] == [[100, None], [1, None], [1, None]]
    assert model.calls[3:] == [[None, None]] * 13
    assert (stats.group_steps, stats.dummy_rank_steps, stats.waves, stats.routed) == (16, 29, 1, [1, 0])
    req = build_cluster_result(run, None).requests.iloc[0]
    assert req["ttft_ms"] == pytest.approx(11.0)
    assert req["e2e_ms"] == pytest.approx(13.2)
    assert req["replica"] == "dp0"


def test_arrival_during_the_tail_waits_for_the_dummy_step() -> None:
    """A request arriving at 14 ms (in the wave's tail: dummy steps of 1.1 ms from 13.2 ms) is
    routed to the next rank (the scan start moved on) and starts at the dummy step's end,
    14.3 ms; the wave goes on."""
    model = _Lockstep()
    run, stats = simulate_data_parallel(  # type: ignore[arg-type]
        _trace([(0.0, 100, 3), (0.014, 10, 2)]), _ranks(2), model
    )
    second = build_cluster_result(run, None).requests.iloc[1]
    assert second["replica"] == "dp1"
    assert second["first_scheduled_s"] == pytest.approx(0.0143)
    assert second["ttft_ms"] == pytest.approx(14.3 + 2.0 - 14.0)
    assert stats.waves == 1
    assert [None, 10] in model.calls  # its prefill with the other rank idle


def test_two_busy_ranks_step_together() -> None:
    """Two requests at once go to both ranks; every step lasts the larger rank's, so the short
    prompt's rank waits for the long one: both first tokens come at the same step end."""
    model = _Lockstep()
    run, _ = simulate_data_parallel(  # type: ignore[arg-type]
        _trace([(0.0, 200, 2), (0.0, 10, 2)]), _ranks(2), model
    )
    req = build_cluster_result(run, None).requests
    assert list(req["replica"]) == ["dp0", "dp1"]
    assert model.calls[0] == [200, 10]
    assert req["ttft_ms"].tolist() == pytest.approx([21.0, 21.0])
    steps = build_cluster_result(run, None).steps
    a, b = (steps[steps["replica"] == r]["duration_s"].tolist() for r in ("dp0", "dp1"))
    assert a == b  # every rank records the group's step


def test_dense_ranks_are_independent() -> None:
    """A dense model's ranks (no lockstep model) each step on their own clock: a rank's request
    runs as on a lone engine, whatever the other rank does."""
    run, stats = simulate_data_parallel(_trace([(0.0, 100, 3), (0.0005, 10, 50)]), _ranks(2), None)
    req = build_cluster_result(run, None).requests
    assert list(req["replica"]) == ["dp0", "dp1"]
    assert req["e2e_ms"].tolist() == pytest.approx([3.0, 50.0])  # 1 ms constant steps
    assert (stats.lockstep, stats.group_steps, stats.dummy_rank_steps) == (False, 0, 0)


def test_a_moe_group_steps_together_and_loses_nothing() -> None:
    """Qwen3-30B-A3B as DP 4 + EP on H100s, a seeded trace: every request ends finished, every
    rank's steps start at the group's step starts with the group's durations, a rank never runs
    two steps at once, and the load balancer's counts add up."""
    from servesim.spec import DeploymentSpec, resolve
    from servesim.spec.data_parallel import run_data_parallel

    rng = random.Random(3)
    t, rows = 0.0, []
    for _ in range(80):
        t += rng.expovariate(40.0)
        rows.append((t, rng.randint(20, 3000), rng.randint(1, 120)))
    trace = _trace(rows)
    spec = DeploymentSpec(
        model="qwen3-30b-a3b", gpu="h100", data_parallel_size=4, enable_expert_parallel=True
    )
    result, stats = run_data_parallel(trace, resolve(spec, max_model_len=4096), None)
    req = result.requests
    assert (req["outcome"] == "finished").all() and len(req) == 80
    assert sum(stats.routed) == 80 and stats.lockstep
    steps = result.steps
    by_start: dict[float, set[float]] = {}
    for rank in ("dp0", "dp1", "dp2", "dp3"):
        mine = steps[steps["replica"] == rank].sort_values("start_s")
        ends = (mine["start_s"] + mine["duration_s"]).to_numpy()
        assert (mine["start_s"].to_numpy()[1:] >= ends[:-1] - 1e-12).all()
        for s, d in zip(mine["start_s"], mine["duration_s"], strict=True):
            by_start.setdefault(round(s, 12), set()).add(d)
    assert all(len(durations) == 1 for durations in by_start.values())  # one step of the group
    assert len(by_start) <= stats.group_steps
    busy_rank_steps = len(steps)
    assert busy_rank_steps + stats.dummy_rank_steps == 4 * stats.group_steps


class _View:
    """What the router reads of a replica (``ReplicaView``'s queue and KV figures)."""

    def __init__(self, waiting: int, running: int, kv: float, in_flight: int) -> None:
        self.num_waiting, self.num_running, self.kv_usage, self.outstanding = waiting, running, kv, in_flight


def test_the_vllm_dp_router_picks_as_the_load_balancer_does() -> None:
    """``--router vllm_dp`` (replicas behind vLLM's DP front end) and ``--data-parallel-size``'s
    balancer are one rule (``router.dp_score``), scan start included: the same replicas for the
    same snapshots, request after request; idle replicas in turn from replica 0, as vLLM."""
    from servesim.cluster import RouterSpec
    from servesim.cluster.router import Router
    from servesim.engine.request import Request

    router, lb = Router(RouterSpec(policy="vllm_dp")), DPLoadBalancer()
    r = Request(0, "r0", 0.0, 10, 5)
    for case in _lb_cases():
        views = [
            _View(w, run, kv, f) for (w, run, kv), f in zip(case["counts"], case["inflight"], strict=True)
        ]
        want = lb.pick([tuple(c) for c in case["counts"]], case["inflight"])  # type: ignore[misc]
        assert router.pick(r, views, list(range(len(views)))) == want  # type: ignore[arg-type]
    idle = [_View(0, 0, 0.0, 0) for _ in range(3)]
    fresh = Router(RouterSpec(policy="vllm_dp"))
    assert [fresh.pick(r, idle, [0, 1, 2]) for _ in range(4)] == [0, 1, 2, 0]  # type: ignore[arg-type]
