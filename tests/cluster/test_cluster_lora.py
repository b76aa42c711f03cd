"""Issue 51: a cluster whose replicas serve LoRA adapters reports the adapters' figures — each
replica's (its ``max_loras`` slot waits, its adapter loads) and the fleet's, their sums — in
``ClusterSummary.lora``, ``summary.cluster.lora``, each replica summary, the cluster document's
``lora`` section and the human output, checked against each replica's requests simulated alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.cluster import FailureEvent, RouterSpec, simulate_cluster
from servesim.engine import simulate
from servesim.spec import DeploymentSpec, resolve_replicas
from servesim.traces import GeneratorSpec, Trace, generate_trace

LORA = {"enable_lora": True, "max_loras": 2}


def _trace(n: int = 240) -> Trace:
    """Poisson arrivals over 6 adapters (one request in ten on the base model). vLLM's order of a
    step's adapters is a set's (per-process random); servesim's is the adapters' first use in the
    trace (``engine.adapter_cache``), so the first 18 requests name lora-0 x 3, lora-1 x 3, ...: under
    round-robin every replica's share then first uses them in the trace's order, and its requests
    simulated alone number the adapters as the cluster does."""
    rng = np.random.default_rng(2)
    t = np.cumsum(rng.exponential(1 / 15.0, n))
    rows = []
    for i in range(n):
        lora = f"lora-{i // 3}" if i < 18 else (None if i % 10 == 0 else f"lora-{int(rng.zipf(1.5)) % 6}")
        rows.append(
            {"req_id": f"r{i}", "arrival_time_s": float(t[i]), "prompt_len": int(rng.integers(100, 2000)),
             "output_len": int(rng.integers(20, 300)), **({"lora": lora} if lora else {})}
        )  # fmt: skip
    return Trace.from_records(rows, source="lora")


def _replicas(trace: Trace, n: int, keys: dict[str, object]):  # type: ignore[no-untyped-def]
    base = DeploymentSpec(model="llama-3.1-8b", gpu="h100")
    return [rep for rep, _ in resolve_replicas(base, [(f"n{i}", dict(keys)) for i in range(n)], trace)]


def test_each_replica_is_its_requests_simulated_alone_and_the_fleet_their_sum() -> None:
    trace = _trace()
    reps = _replicas(trace, 3, LORA)
    res = simulate_cluster(trace, reps, RouterSpec(policy="round_robin"))
    lora = res.summary.lora
    assert lora is not None and set(lora.replicas) == {"n0", "n1", "n2"}
    for rep in reps:  # the requests routed to it, on one engine of its settings: the same figures
        mine = set(res.requests.loc[res.requests["replica"] == rep.name, "req_id"])
        sub = Trace(trace.df[trace.df["req_id"].isin(mine)].reset_index(drop=True), trace.provenance)
        alone = simulate(sub, rep.config, rep.step_time)
        assert alone.summary.lora is not None and alone.summary.lora.gpu_loads
        assert lora.replicas[rep.name] == alone.summary.lora == res.summary.replicas[rep.name].lora
    per = list(lora.replicas.values())
    for key in ("skipped_request_steps", "gpu_loads", "disk_reads"):
        assert getattr(lora.fleet, key) == sum(getattr(p, key) for p in per), key
    assert lora.fleet.load_s is not None
    assert abs(lora.fleet.load_s - sum(p.load_s or 0.0 for p in per)) < 1e-9
    assert lora.fleet.skipped_request_steps > 0 and lora.fleet.max_loras == 2
    assert res.summary.cluster.lora == lora.fleet


def test_a_replica_back_from_a_failure_loads_its_adapters_again() -> None:
    """n1 fails at 6 s and comes back empty: its new engine reads its adapters from disk again,
    so n1 counts more reads than the same fleet without the failure, and the fleet sums both."""
    trace = _trace()
    reps = _replicas(trace, 2, LORA)
    calm = simulate_cluster(trace, reps, RouterSpec(policy="round_robin")).summary.lora
    fail = [FailureEvent(node="n1", time_s=6.0, recover_after_s=1.0)]
    restarted = simulate_cluster(trace, reps, RouterSpec(policy="round_robin"), fail, recovery="restart")
    lora = restarted.summary.lora
    assert calm is not None and lora is not None
    assert (lora.replicas["n1"].disk_reads or 0) > (calm.replicas["n1"].disk_reads or 0)
    assert lora.fleet.disk_reads == sum(p.disk_reads or 0 for p in lora.replicas.values())


def test_no_lora_no_figures() -> None:
    trace = generate_trace(GeneratorSpec(num_requests=60, seed=2))
    s = simulate_cluster(trace, _replicas(trace, 2, {})).summary
    assert s.lora is None and s.cluster.lora is None and all(r.lora is None for r in s.replicas.values())


def test_the_cluster_command_says_them(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    runner = CliRunner()
    gen = runner.invoke(app, ["generate", "default", "-n", "120", "--rate", "15", "--lora-adapters", "6",
                              "--seed", "0", "--out", str(path)])  # fmt: skip
    assert gen.exit_code == 0, gen.output
    args = ["cluster", str(path), "--replicas", "3", "--enable-lora", "--max-loras", "2"]
    doc = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    lora = doc["lora"]["no failure"]
    assert set(lora["replicas"]) == {"n0", "n1", "n2"}
    assert lora["fleet"]["gpu_loads"] == sum(r["gpu_loads"] for r in lora["replicas"].values())
    human = runner.invoke(app, args, terminal_width=200)
    assert human.exit_code == 0, human.output
    assert "LoRA adapters (fleet, then each replica)" in human.stdout
