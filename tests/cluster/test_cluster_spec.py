"""``servesim.spec.ClusterSpec`` and ``resolve_cluster`` (issue 27): one validated spec of a
cluster run; bad ones are refused naming the field; the CLI records the spec it ran as the
document's ``run``, and running that spec again gives the same document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.cli.trace_input import read_trace
from servesim.errors import ConfigError, InputError, describe
from servesim.spec import ClusterSpec, ResolvedCluster, ResolvedDisaggregated, resolve_cluster

runner = CliRunner()


def _error(data: dict[str, object]) -> str:
    with pytest.raises((ValidationError, InputError)) as e:
        ClusterSpec.model_validate(data)
    err = e.value
    return describe(err) if isinstance(err, ValidationError) else str(err)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"trace": "t", "recovery": "teleport"}, "recovery"),
        ({"trace": "t", "deployment": {"replicas": 0}}, "deployment.replicas"),
        (
            {"trace": "t", "deployment": {"engine": {"max_num_seq": 8}}},
            "did you mean 'max_num_seqs'?",
        ),
        ({"trace": "t", "failures": [{"node": "n0", "time_s": -1}]}, "failures.0.time_s"),
        ({"trace": "t", "mtbf_s": 0}, "mtbf_s"),
        ({"trace": "t", "replicas": [{"name": "a"}, {"name": "a"}]}, "replicas: name 'a' is given twice"),
        (
            {"trace": "t", "deployment": {"router": "random"}, "router": {"policy": "least_kv"}},
            "router.policy 'least_kv' differs from deployment.router 'random'",
        ),
        ({"trace": "t", "slo": {"ttft_p99_ms": 100, "min_good_fraction": 0.9}}, "slo.min_good_fraction"),
        (
            {"trace": "t", "disaggregated": {"prefill": {"model": "qwen2.5-7b"}, "decode": {}}},
            "disaggregated.decode.model 'llama-3.1-8b' differs from disaggregated.prefill.model 'qwen2.5-7b'",
        ),
        (  # MTBF failures of pools are drawn when the spec resolves; an announced one is not modelled
            {"trace": "t", "disaggregated": {}, "mtbf_s": 100, "warning_s": 5},
            "warning_s: announced failures are not modelled for prefill/decode pools",
        ),
        (
            {"trace": "t", "disaggregated": {}, "failures": [{"node": "n0", "time_s": 1}]},
            "failures[0].node",
        ),
        ({"trace": "t", "surprise": 1}, "surprise"),
    ],
)
def test_a_bad_cluster_spec_is_refused_naming_the_field(data: dict[str, object], words: str) -> None:
    assert words in _error(data)


def test_resolving_names_the_failure_that_names_no_replica() -> None:
    trace = read_trace("poisson_20_rps", num_requests=20)
    spec = ClusterSpec(trace="poisson_20_rps", failures=[{"node": "n2", "time_s": 1.0}])  # type: ignore[list-item]
    with pytest.raises(
        ConfigError, match=r"failures\[0\]\.node 'n2' is not a replica; the replicas are n0, n1"
    ):
        resolve_cluster(spec, trace)
    bad_model = ClusterSpec(trace="poisson_20_rps", deployment={"model": "no-such-model"})  # type: ignore[arg-type]
    with pytest.raises(InputError, match="no-such-model"):
        resolve_cluster(bad_model, trace)


def test_a_spec_resolves_to_its_replicas_router_failures_and_pools() -> None:
    trace = read_trace("poisson_20_rps", num_requests=50)
    spec = ClusterSpec.model_validate(
        {
            "trace": "poisson_20_rps",
            "deployment": {"replicas": 3, "router": "round_robin", "engine": {"max_num_seqs": 16}},
            "replicas": None,
            "failures": [{"node": "n1", "time_s": 1.0}],
            "recovery": "migrate",
            "link": {"bandwidth_gbps": 25},
        }
    )
    run = resolve_cluster(spec, trace)
    assert isinstance(run, ResolvedCluster)
    assert [r.name for r in run.replicas] == ["n0", "n1", "n2"]
    assert {r.config.max_num_seqs for r in run.replicas} == {16}
    assert run.router.policy == "round_robin" and run.strategies == ["migrate"] and not run.baseline
    assert run.link.bandwidth_gbps == 25 and run.link.model == "llama-3.1-8b"
    named = ClusterSpec.model_validate(
        spec.model_dump() | {"replicas": [{"name": "a", "engine": {"max_num_seqs": 8}}], "failures": []}
    )
    run2 = resolve_cluster(named, trace)
    assert isinstance(run2, ResolvedCluster)
    assert [(r.name, r.config.max_num_seqs) for r in run2.replicas] == [("a", 8)]
    pd = ClusterSpec.model_validate(
        {"trace": "t", "disaggregated": {"prefill": {"replicas": 2}, "decode": {"replicas": 1, "tp": 2}}}
    )
    pools = resolve_cluster(pd, trace)
    assert isinstance(pools, ResolvedDisaggregated)
    assert [r.name for r in pools.prefill] == ["p0", "p1"] and [r.name for r in pools.decode] == ["d0"]
    assert pools.context.tp == 1  # the smaller TP degree sets the shard each rank moves


def test_the_cli_records_the_spec_it_ran_and_the_spec_runs_again_alike(tmp_path: Path) -> None:
    args = ["cluster", "poisson_20_rps", "-n", "200", "--replicas", "2", "--fail", "n1@2+2", "--seed", "4"]
    res = runner.invoke(app, [*args, "--router", "power_of_two", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    spec = ClusterSpec.model_validate(doc["run"])
    assert spec.seed == 4 and spec.route.policy == "power_of_two" and spec.route.seed == 4
    from servesim.report.documents import cluster_answer_document
    from servesim.services.cluster import ClusterRequest, run_cluster

    assert [s["key"] for s in doc["sections"]][:2] == ["fleet", "replica.n0"]  # one run's views
    again = cluster_answer_document(run_cluster(ClusterRequest(spec=spec)))
    assert json.loads(json.dumps(again)) == doc


def test_bad_cluster_flags_and_files_name_the_field(tmp_path: Path) -> None:
    twice = tmp_path / "twice.yaml"
    twice.write_text("replicas:\n  - {name: a}\n  - {name: a}\n")
    for args, words in (
        (["--fail", "n5@1"], "failures[0].node 'n5' is not a replica; the replicas are n0, n1"),
        (["--cluster", str(twice)], "replicas: name 'a' is given twice"),
        (["--mtbf-s", "0"], "--mtbf-s: Input should be greater than 0"),
    ):
        res = runner.invoke(app, ["cluster", "poisson_20_rps", "-n", "30", *args])
        assert res.exit_code == 2, (args, res.output)
        assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert words in res.stderr, res.stderr


def test_the_demos_cluster_run_is_its_recorded_spec() -> None:
    """The demo's cluster.json records the ClusterSpec it ran (its trace a file beside it): read
    back and answered as ``servesim cluster`` answers it (``servesim.services.cluster``), it gives
    the same document, byte for byte in JSON: one question, one answer (issue 45)."""
    from servesim.report.documents import cluster_answer_document
    from servesim.services.cluster import ClusterRequest, run_cluster
    from servesim.services.inputs import TraceInput

    demo = Path(__file__).parents[2] / "examples" / "demo"
    doc = json.loads((demo / "cluster.json").read_text())
    spec = ClusterSpec.model_validate(doc["run"])
    source = TraceInput(source=str(demo / spec.trace), label=spec.trace)
    answer = run_cluster(ClusterRequest(spec=spec, trace=source))
    assert json.loads(json.dumps(cluster_answer_document(answer))) == doc


def test_pools_fail_at_random_as_the_spec_says_and_run_again_alike() -> None:
    """A disaggregated spec keeps ``mtbf_s`` (drawn when it resolves, seeded), as an aggregated one
    does: the recorded spec runs again with the same failures, whichever interface runs it."""
    trace = read_trace("poisson_20_rps", num_requests=200)
    spec = ClusterSpec(
        trace="poisson_20_rps",
        num_requests=200,
        seed=3,
        disaggregated={"prefill": {"replicas": 2}, "decode": {"replicas": 2}},  # type: ignore[arg-type]
        mtbf_s=4.0,
        recover_after_s=1.0,
    )
    first, again = resolve_cluster(spec, trace), resolve_cluster(spec, trace)
    assert isinstance(first, ResolvedDisaggregated) and isinstance(again, ResolvedDisaggregated)
    assert first.events == again.events
    nodes = {e.node for e in first.events}
    assert len(first.events) > 1 and nodes <= {"p0", "p1", "d0", "d1"}
    assert [e.time_s for e in first.events] == sorted(e.time_s for e in first.events)
    assert [f.node for f in first.run(trace).failures] == [e.node for e in first.events]
    with pytest.raises(ValidationError, match="warning_s"):
        ClusterSpec.model_validate({**spec.model_dump(), "warning_s": 1.0})
    listed = {**spec.model_dump(), "mtbf_s": None, "failures": [{"node": "decode:1", "time_s": 1.0}]}
    named = resolve_cluster(ClusterSpec.model_validate(listed), trace)
    assert isinstance(named, ResolvedDisaggregated) and [e.node for e in named.events] == ["d1"]
