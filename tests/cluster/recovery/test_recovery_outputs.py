"""Manifests, decision-matrix export, the failure-log generator and the CLI contract."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from recovery_helpers import SEED_801_802, SEED_990, job, linear_target, record, seed
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.cluster.recovery import (
    MANIFEST_HEADER,
    FailureLogSpec,
    RecoveryContext,
    export_decision_matrix,
    failure_log_json,
    generate_failures,
    manifest_name,
    parse_events,
    plan_recovery,
    write_manifests,
)
from servesim.perf import load_catalog

runner = CliRunner()
CTX = RecoveryContext(load_catalog().model("llama-3.1-8b"))


def three_target_plan():  # type: ignore[no-untyped-def]
    targets = [linear_target("a"), linear_target("b"), linear_target("c")]
    jobs = [job(f"j{i}", 500 * (i + 1), 10, i % 2 == 0) for i in range(5)]
    return plan_recovery(record(jobs, batch_id="batch/7 x"), CTX, targets)


# ------------------------------------------------------------------------------ manifests
def test_one_manifest_per_target_node(tmp_path: Path) -> None:
    plan = three_target_plan()
    paths = write_manifests(plan, tmp_path / "outbox")
    targets = {d.target for d in plan.scheduled_migrations}
    assert len(paths) == len(targets) == 3
    assert sorted(p.name for p in (tmp_path / "outbox").iterdir()) == sorted(p.name for p in paths)
    seen_jobs = []
    for p in paths:
        m = json.loads(p.read_text())
        assert m["requires_human_review"] is True and m["sent"] is False
        assert m["header"] == MANIFEST_HEADER and "nothing was sent" in m["header"]
        assert p.name == manifest_name(plan, m["target_node"]) == f"batch-7-x-{m['target_node']}.json"
        assert m["source_node"] == "node-0" and m["batch_id"] == "batch/7 x"
        assert m["totals"]["jobs"] == len(m["jobs"])
        assert m["totals"]["recompute_tokens"] == sum(j["recompute_tokens"] for j in m["jobs"])
        seen_jobs += [j["job_id"] for j in m["jobs"]]
    assert sorted(seen_jobs) == sorted(d.job_id for d in plan.scheduled_migrations)


def test_manifest_named_by_timestamp_without_batch(tmp_path: Path) -> None:
    plan = plan_recovery(SEED_801_802)
    names = sorted(p.name for p in write_manifests(plan, tmp_path))
    assert names == ["2025-03-01T12-00-00Z-survivor-1.json", "2025-03-01T12-00-00Z-survivor-2.json"]


def test_manifest_writes_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = three_target_plan()
    (first, *_) = write_manifests(plan, tmp_path)
    before = first.read_bytes()
    import servesim.io as common

    def boom(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(common.os, "replace", boom)
    with pytest.raises(OSError):
        write_manifests(
            plan_recovery(record([job("other", 10, 1)], batch_id="batch/7 x"), CTX, [linear_target("a")]),
            tmp_path,
        )
    assert first.read_bytes() == before  # old content, never a part of the new one
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"batch-7-x-{t}.json" for t in ("a", "b", "c")
    )  # no temporary file left behind


def test_manifests_never_touch_the_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def no_network(*a: object, **k: object) -> None:
        raise AssertionError("network call")

    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    write_manifests(plan_recovery(SEED_801_802), tmp_path)


# ------------------------------------------------------------------------------ decision matrix
def test_decision_matrix_and_its_exports(tmp_path: Path) -> None:
    plan = three_target_plan()
    df = plan.decision_matrix()
    assert list(df["job_id"]) == [d.job_id for d in plan.scheduled_migrations]
    assert int(df["recompute_tokens"].sum()) == plan.total_recompute_tokens
    assert set(df["strategy"]) <= {"MIGRATE_STATE", "COLD_RESTART"}
    csv = export_decision_matrix(plan, tmp_path / "m.csv")
    back = pd.read_csv(csv)
    assert list(back.columns) == list(df.columns)
    assert list(back["job_id"]) == list(df["job_id"])
    assert np.allclose(back["cold_restart_ms"], df["cold_restart_ms"])
    js = export_decision_matrix(plan, tmp_path / "m.json")
    rows = json.loads(js.read_text())
    assert [r["job_id"] for r in rows] == list(df["job_id"])
    assert [r["recompute_tokens"] for r in rows] == list(df["recompute_tokens"])
    no_ckpt = [r for r in rows if r["migrate_ms"] is None]
    assert no_ckpt and all(r["break_even_gbps"] is None for r in no_ckpt)
    with pytest.raises(ValueError, match=r"\.csv or \.json"):
        export_decision_matrix(plan, tmp_path / "m.txt")
    several = export_decision_matrix([plan, plan_recovery(SEED_990)], tmp_path / "all.csv")
    both = pd.read_csv(several)
    assert list(both.columns[:3]) == ["interrupted_node", "batch_id", "preemption_timestamp"]
    assert len(both) == len(df) + 1


# ------------------------------------------------------------------------------ generator
def test_generator_same_seed_same_bytes_other_seed_other_bytes() -> None:
    a = failure_log_json(generate_failures(FailureLogSpec(seed=5, num_events=20)))
    b = failure_log_json(generate_failures(FailureLogSpec(seed=5, num_events=20)))
    c = failure_log_json(generate_failures(FailureLogSpec(seed=6, num_events=20)))
    assert a == b and a != c


def test_generator_is_plausible_and_plannable() -> None:
    spec = FailureLogSpec(seed=1, num_events=400, mtbf_hours=10, num_nodes=5, checkpoint_probability=0.5)
    log = generate_failures(spec)
    times = [pd.Timestamp(r["preemption_timestamp"]) for r in log]
    assert times == sorted(times)
    gaps = np.diff([pd.Timestamp(spec.start), *times]) / pd.Timedelta(seconds=1)
    mean = 10 * 3600 / 5  # MTBF per node / nodes
    assert abs(gaps.mean() - mean) < 5 * mean / np.sqrt(len(gaps))  # exponential: sd = mean
    jobs = [j for r in log for j in r["active_jobs"]]
    assert abs(len(jobs) / len(log) - spec.jobs_mean) < 5 * np.sqrt(spec.jobs_mean - 1) / np.sqrt(len(log))
    assert len({j["job_id"] for j in jobs}) == len(jobs)
    assert len({r["batch_id"] for r in log}) == len(log)
    prompts = np.array([j["prompt_tokens"] for j in jobs])
    assert abs(np.median(prompts) / spec.prompt_median - 1) < 0.15
    assert all(j["prompt_tokens"] + j["generated_tokens"] <= spec.max_model_len for j in jobs)
    ck = [j for j in jobs if j["kv_cache_checkpointed"]]
    assert abs(len(ck) / len(jobs) - 0.5) < 0.05
    stale = [
        j for j in ck if j.get("checkpoint_offset_tokens", 10**9) < j["prompt_tokens"] + j["generated_tokens"]
    ]
    assert stale and len(stale) < len(ck)
    assert {r["network_bandwidth_gbps"] for r in log} == {1, 10, 25, 100}
    warned = [r for r in log if "warning_timestamp" in r]
    assert 0 < len(warned) < len(log)
    assert all(r["warning_timestamp"] <= r["preemption_timestamp"] for r in warned)
    inputs = parse_events(log)
    assert sum(len(i.invalid_jobs) for i in inputs) == 0 and sum(len(i.active_jobs) for i in inputs) == len(
        jobs
    )


def test_generator_invalid_jobs_are_caught() -> None:
    log = generate_failures(FailureLogSpec(seed=2, num_events=30, invalid_job_probability=0.3))
    inputs = parse_events(log)
    assert sum(len(i.invalid_jobs) for i in inputs) > 0
    assert all(i.active_jobs or i.invalid_jobs for i in inputs)


# ------------------------------------------------------------------------------ CLI
def test_cli_json_is_pure_and_deterministic(tmp_path: Path) -> None:
    f = tmp_path / "log.json"
    f.write_text(json.dumps([SEED_801_802, SEED_990]))
    args = ["recover", str(f), "--json", "--outbox", str(tmp_path / "ob")]
    r1 = runner.invoke(app, args)
    r2 = runner.invoke(app, args)
    assert r1.exit_code == 0, r1.output
    assert r1.stdout == r2.stdout
    out = json.loads(r1.stdout)  # nothing but JSON on stdout
    assert out["num_events"] == 2 and out["total_recompute_tokens"] == 2112 + 8704
    assert out["requires_human_review"] is True and len(out["plans"]) == 2
    assert len(out["manifests"]) == 3


def test_cli_human_output_shows_progress_manifests_and_reasons(tmp_path: Path) -> None:
    f = tmp_path / "e.json"
    rec = seed(SEED_801_802)
    rec["active_jobs"] = [*rec["active_jobs"], job("job-bad", 5, -1)]
    f.write_text(json.dumps(rec))
    res = runner.invoke(
        app, ["recover", str(f), "--outbox", str(tmp_path / "ob"), "--matrix", str(tmp_path / "m.json")]
    )
    assert res.exit_code == 0, res.output
    for text in ("job-801", "MIGRATE_STATE", "COLD_RESTART", "job-bad", "invalid", "human review", "2,112"):
        assert text in res.stdout, text
    assert (tmp_path / "m.json").exists() and len(list((tmp_path / "ob").iterdir())) == 2


def test_cli_overrides_and_cluster_file(tmp_path: Path) -> None:
    f = tmp_path / "e.json"
    f.write_text(json.dumps(SEED_801_802))
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps([{"name": "gpu-a", "free_slots": 1}, {"name": "gpu-b"}]))
    res = runner.invoke(
        app,
        ["recover", str(f), "--json", "--no-manifests", "--cluster", str(cluster), "--bandwidth-gbps", "1"],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["manifests"] == []
    assert [t["name"] for t in out["targets"]] == ["gpu-a", "gpu-b"]
    assert {d["job_id"]: d["strategy"] for d in out["scheduled_migrations"]}["job-801"] == "COLD_RESTART"
    res = runner.invoke(app, ["recover", str(f), "--json", "--no-manifests", "--shared-link"])
    assert json.loads(res.stdout)["scheduled_migrations"][0]["strategy"] == "COLD_RESTART"


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ("{not json", [], "not valid JSON"),
        (
            json.dumps({"preemption_timestamp": 0, "network_bandwidth_gbps": 1, "active_jobs": []}),
            [],
            "interrupted_node",
        ),
        (json.dumps(SEED_801_802), ["--model", "no-such-model"], "no-such-model"),
        (json.dumps(SEED_801_802), ["--tp", "3"], "TP=3"),
        (json.dumps(SEED_801_802), ["--efficiency", "2"], "transfer_efficiency"),
        (json.dumps([SEED_801_802, SEED_801_802]), [], "distinct batch_id"),
        (None, [], "missing.json"),
    ],
)
def test_cli_errors_exit_2_with_one_line(
    tmp_path: Path, content: str | None, args: list[str], message: str
) -> None:
    f = tmp_path / "missing.json"
    if content is not None:
        f = tmp_path / "e.json"
        f.write_text(content)
    res = runner.invoke(app, ["recover", str(f), "--json", "--outbox", str(tmp_path / "ob"), *args])
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], res.stderr


def test_generate_failures_cli(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    r = runner.invoke(app, ["generate-failures", "--seed", "9", "-n", "4", "--out", str(a), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["events"] == 4
    runner.invoke(app, ["generate-failures", "--seed", "9", "-n", "4", "--out", str(b)])
    assert a.read_bytes() == b.read_bytes()
    stdout = runner.invoke(app, ["generate-failures", "--seed", "9", "-n", "4"]).stdout
    assert stdout.encode() == a.read_bytes()
    res = runner.invoke(app, ["recover", str(a), "--json", "--outbox", str(tmp_path / "ob")])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["num_events"] == 4
    bad = runner.invoke(app, ["generate-failures", "--bandwidths", "0,1"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ")


def test_schema_lists_the_recovery_models() -> None:
    res = runner.invoke(app, ["schema", "RecoveryPlan"])
    assert res.exit_code == 0
    schema = json.loads(res.stdout)
    assert "total_recompute_tokens" in schema["properties"]
    for name in ("RecoveryInput", "JobDecision", "FailureLogSpec", "RecoveryCluster"):
        assert runner.invoke(app, ["schema", name]).exit_code == 0
