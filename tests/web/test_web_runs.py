"""Jobs over the API: simulate (one replica, a cluster with failures), saturate, tune, advise,
compare, downloads; each error answered as problem details."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from web_helpers import SEED_RECOVERY, SEED_RESCHED, SMALL_SPACE, run_job, section, settings_for, wait_job

from polling import wait_until
from servesim.actionlog import read_log
from servesim.web.app import create_app


def test_simulation_has_histograms_series_kpis_and_a_bottleneck(client: TestClient, trace_id: str) -> None:
    run = run_job(client, "/api/simulate", {"trace_id": trace_id, "slo": {"ttft_ms": 800, "tpot_ms": 80}})
    res = run["result"]
    view = section(res, "simulation")
    hists = {h["key"]: h for h in view["histograms"]}
    assert {"ttft", "tpot", "e2e", "queue"} <= {k.removesuffix("_ms") for k in hists}
    ttft = next(h for k, h in hists.items() if k.startswith("ttft"))
    assert sum(ttft["counts"]) == 300 and ttft["slo"] == 800
    assert len(ttft["edges"]) == len(ttft["counts"]) + 1
    keys = {s["key"] for s in view["series"]}
    assert {"num_running", "num_waiting", "kv_usage"} <= keys
    assert all(len(s["x"]) <= 600 for s in view["series"])  # down-sampled on the server
    assert any(v["key"] == "bottleneck" for v in view["verdicts"])
    assert set(res["kpis"]) == {"p50", "p90", "p95", "p99"}
    p50 = {k["key"]: k["value"] for k in res["kpis"]["p50"]}
    p99 = {k["key"]: k["value"] for k in res["kpis"]["p99"]}
    assert p50["ttft_ms_p50"] <= p99["ttft_ms_p99"]
    # queue length by reason (derived from the steps) and a sparkline for every tile, any percentile
    reasons = [s["key"] for s in view["series"] if s["key"].startswith("queue_by_reason.")]
    assert reasons == [f"queue_by_reason.{r}" for r in ("kv_cache", "max_num_seqs", "token_budget", "other")]
    for p in ("p50", "p99"):
        for k in res["kpis"][p]:
            line = res["sparklines"][k["key"]]
            assert 0 < len(line["x"]) == len(line["y"]) <= 24
    assert res["config"]["num_gpu_blocks"] > 1000  # sized by the memory model of the default H100
    assert run["job"]["progress_done"] == run["job"]["progress_total"] > 0


def test_a_run_with_a_cpu_tier_shows_it(client: TestClient, trace_id: str) -> None:
    """Issue 31.4: kv_offloading_size in the engine runs vLLM's CPU-offload connector (it used to
    stop: the engine was given no connector) and the run's summary and view carry the tier."""
    run = run_job(client, "/api/simulate", {"trace_id": trace_id, "engine": {"kv_offloading_size": 4}})
    off = run["result"]["summary"]["offload"]
    assert off is not None and off["stored_tokens"] > 0 and off["cpu_chunks"] > 0
    assert "offload" in {t["key"] for t in section(run["result"], "simulation")["tables"]}


def test_a_cluster_run_with_a_cpu_tier_finishes(client: TestClient, trace_id: str) -> None:
    """kv_offloading_size on a two-replica run gives each replica its tier (the job used to fail:
    the cluster's engines were given no connector)."""
    body = {"trace_id": trace_id, "replicas": 2, "engine": {"kv_offloading_size": 4}}
    run = run_job(client, "/api/simulate", body)
    assert run["job"]["status"] == "done", run["job"]


def test_a_cpu_tier_beyond_host_memory_is_refused(client: TestClient, trace_id: str) -> None:
    """Issue 31: kv_offloading_size is bounded by the host memory assumed per GPU (it ran with
    100 TB before; only tune bounded it): a 422 naming the field and the limit; TP 2 doubles it."""
    r = client.post("/api/simulate", json={"trace_id": trace_id, "engine": {"kv_offloading_size": 100_000}})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert "kv_offloading_size 100000 GiB" in r.json()["detail"] and "at most 256 GiB" in r.json()["detail"]
    body = {
        "trace_id": trace_id,
        "hardware": {"tensor_parallel_size": 2},
        "engine": {"kv_offloading_size": 300},
    }
    assert client.post("/api/simulate", json=body).status_code == 202


def test_max_num_seqs_changes_the_p99(client: TestClient, trace_id: str) -> None:
    wide = run_job(client, "/api/simulate", {"trace_id": trace_id, "engine": {"max_num_seqs": 128}})
    narrow = run_job(client, "/api/simulate", {"trace_id": trace_id, "engine": {"max_num_seqs": 2}})
    assert narrow["result"]["summary"]["ttft_ms"]["p99"] > 2 * wide["result"]["summary"]["ttft_ms"]["p99"]
    cmp = client.get(f"/api/compare?a={wide['job']['id']}&b={narrow['job']['id']}").json()
    diff = {d["key"]: (d["a"], d["b"]) for d in cmp["config_diff"]}
    assert diff["max_num_seqs"] == (128, 2)
    ttft = next(m for m in cmp["metrics"] if m["key"] == "ttft_ms.p99")
    assert ttft["delta"] > 0 and ttft["better"] is False
    assert ttft["b"] == narrow["result"]["summary"]["ttft_ms"]["p99"]
    # a gap the step-time model's error for that metric covers names no better run
    for m in cmp["metrics"]:
        if m["noise_band"] is None or not m["a"]:
            continue
        gap = abs(m["b"] - m["a"]) / ((abs(m["a"]) + abs(m["b"])) / 2)
        assert (m["better"] is None) == (gap <= m["noise_band"]), m


def test_downloads_json_and_csv(client: TestClient, trace_id: str) -> None:
    run = run_job(client, "/api/simulate", {"trace_id": trace_id})
    rid = run["job"]["id"]
    j = client.get(f"/api/runs/{rid}/result.json")
    assert j.status_code == 200 and "attachment" in j.headers["content-disposition"]
    assert j.json()["result"]["summary"]["num_requests"] == 300
    c = client.get(f"/api/runs/{rid}/requests.csv")
    assert c.status_code == 200 and c.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(c.text)))
    assert len(rows) == 300 and {"req_id", "ttft_ms", "e2e_ms", "outcome"} <= set(rows[0])
    rep = client.get(f"/api/runs/{rid}/report.html")
    assert rep.status_code == 200 and rep.headers["content-type"].startswith("text/html")
    assert "attachment" in rep.headers["content-disposition"] and "<html" in rep.text.lower()
    other = run_job(client, "/api/simulate", {"trace_id": trace_id, "engine": {"max_num_seqs": 4}})["job"][
        "id"
    ]
    diff = client.get(f"/api/compare/report.html?a={rid}&b={other}")
    assert diff.status_code == 200 and "max_num_seqs" in diff.text


def test_cluster_with_a_failure(client: TestClient, trace_id: str) -> None:
    body = {
        "trace_id": trace_id,
        "replicas": 2,
        "failures": [{"node": "n0", "time_s": 2.0}],
        "recovery": "planner",
    }
    run = run_job(client, "/api/simulate", body)
    res = run["result"]
    assert res["cluster"]["num_failures"] == 1
    assert res["summary"]["num_requests"] == 300
    # the fleet, the failure timeline, then each replica (views.fleet): the single-run charts each
    assert [s["key"] for s in res["sections"]] == ["fleet", "timeline", "replica.n0", "replica.n1"]
    fleet = section(res, "fleet")
    assert {h["key"] for h in fleet["histograms"]} >= {"ttft_ms", "e2e_ms", "num_tokens"}
    queue = next(s for s in fleet["series"] if s["key"] == "num_waiting")
    assert queue["spans"][0]["x0"] == 2.0 and queue["spans"][0]["label"].startswith("n0 down (planner); ")
    assert queue["marks"][0]["label"] == "n0 down at 2 s"
    assert any(v["key"] == "fleet_bottleneck" for v in fleet["verdicts"])
    # the run's document is servesim cluster's, with the same sections: the report draws them
    doc = client.get(f"/api/runs/{run['job']['id']}/document.json").json()
    shown = [x for x in res["sections"] if x["key"] != "timeline"]  # the page adds its event table
    assert doc["kind"] == "cluster" and doc["sections"] == shown
    assert [r["strategy"] for r in doc["strategies"]] == ["planner"] and doc["failures"][0]["node"] == "n0"
    rep = client.get(f"/api/runs/{run['job']['id']}/report.html")
    assert rep.status_code == 200 and "fleet bottleneck" in rep.text and "n0 down (planner)<br>" in rep.text
    timeline = section(res, "timeline")["tables"][0]
    events = [row[1] for row in timeline["rows"]]
    assert events[0] == "down" and timeline["rows"][0][0] == 2.0 and timeline["rows"][0][2] == "n0"
    interrupted = int(timeline["rows"][0][3].split()[0].replace(",", ""))
    assert events.count("MIGRATE_STATE") + events.count("COLD_RESTART") <= interrupted
    r = client.post("/api/simulate", json={**body, "failures": [{"node": "n9", "time_s": 1}]})
    assert r.status_code == 422 and "no replica 'n9'" in r.json()["detail"]  # at submit (issue 47)


def test_saturation_sweep_marks_knee_and_saturation(client: TestClient, trace_id: str) -> None:
    res = run_job(
        client, "/api/saturate", {"trace_id": trace_id, "slo": {"ttft_p99_ms": 1000}, "seeds": 1, "rtol": 0.2}
    )["result"]
    view = section(res, "saturation")
    assert res["report"]["saturation_rps"] is None or res["report"]["saturation_rps"] > 0
    assert view["verdicts"] and view["series"]
    assert len(res["report"]["points"]) >= 3


def test_tuning_study_gives_a_recommendation_and_resumes(client: TestClient, trace_id: str) -> None:
    body = {
        "trace_id": trace_id,
        "slo": {"ttft_p99_ms": 2000, "tpot_p99_ms": 200},
        "n_trials": 3,
        "verify_seeds": 1,
        "space": SMALL_SPACE,
    }
    first = run_job(client, "/api/tune", body)["result"]
    assert first["study"]["n_trials"] == 3
    assert first["recommendation"]["vllm_serve_command"].startswith("vllm serve")
    assert [s["key"] for s in first["sections"]][:2] == ["recommendation", "tuning"]
    job = client.post("/api/tune", json=body).json()
    with client.stream("GET", f"/api/jobs/{job['id']}/events") as s:
        events = [json.loads(x[5:]) for x in s.iter_lines() if x.startswith("data:")]
    live = [e["extra"] for e in events if e.get("extra")]
    assert live and live[-1]["study"] == first["study"]["study_name"]
    assert len(live[-1]["trials"]) >= 4  # the stored three, then this run's as they finish
    again = client.get(f"/api/runs/{job['id']}").json()["result"]
    assert again["study"]["study_name"] == first["study"]["study_name"]
    assert again["study"]["n_trials"] == 6  # the stored study was resumed
    report = client.get(f"/api/runs/{job['id']}/report.html")
    assert report.status_code == 200 and "vllm serve" in report.text
    importance = section(again, "importance")["tables"][0]
    assert importance["rows"] and abs(sum(r[1] for r in importance["rows"]) - 1) < 1e-6


def test_advisor_says_which_advisor_answered(client: TestClient, trace_id: str) -> None:
    res = run_job(client, "/api/advise", {"task": "reschedule", "data": SEED_RESCHED, "advisor": "rules"})[
        "result"
    ]
    assert res["advisor"] == "rules" and res["advice"]["verification"]["accepted"] in (True, False)
    assert "action_log" not in res["advice"]
    assert res["advice"]["answered_by"] == "the rules advisor"  # the words the CLI and the report use
    score = res["advice"]["score"]
    assert res["advice"]["score_words"].startswith(f"simulator score {score:.3f} (re-simulated")
    res = run_job(client, "/api/advise", {"task": "fallback", "data": SEED_RECOVERY, "advisor": "rules"})
    assert res["result"]["advisor"] == "rules" and res["result"]["advice"]["task"] == "fallback"


def test_job_errors_are_problem_details(client: TestClient, trace_id: str) -> None:
    missing = "0" * 32
    r = client.post("/api/simulate", json={"trace_id": missing})
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    r = client.post("/api/simulate", json={"trace_id": trace_id, "hardware": {"model": "gpt-17"}})
    assert r.status_code == 422 and "unknown model" in r.json()["detail"]
    # an older body is translated first: the field is named as today's body names it
    for body in ({"engine": {"max_num_seqs": 0}}, {"deployment": {"engine": {"max_num_seqs": 0}}}):
        r = client.post("/api/simulate", json={"trace_id": trace_id, **body})
        assert (
            r.status_code == 422 and r.json()["errors"][0]["field"] == "body.deployment.engine.max_num_seqs"
        )
    for body in ({"engine": {"no_such_flag": 1}}, {"deployment": {"engine": {"no_such_flag": 1}}}):
        r = client.post("/api/simulate", json={"trace_id": trace_id, **body})
        assert r.status_code == 422 and "no_such_flag" in r.json()["detail"]
    r = client.post("/api/tune", json={"trace_id": trace_id, "n_trials": 10_000})
    assert r.status_code == 422 and "at most 200" in r.json()["detail"]
    r = client.post("/api/advise", json={"task": "batching"})
    assert r.status_code == 422
    r = client.post("/api/advise", json={"task": "fallback"})
    assert r.status_code == 422
    assert client.get(f"/api/runs/{missing}").status_code == 404
    assert client.get(f"/api/jobs/{missing}").status_code == 404
    assert client.get(f"/api/jobs/{missing}/events").status_code == 404
    assert client.delete(f"/api/jobs/{missing}").status_code == 404
    r = client.post("/api/simulate", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_a_job_that_fails_says_why_and_is_logged(client: TestClient, trace_id: str, data_dir: Path) -> None:
    r = client.post(
        "/api/simulate", json={"trace_id": trace_id, "hardware": {"model": "llama-3.1-405b", "gpu": "l4"}}
    )
    st = wait_job(client, r.json()["id"])
    assert st["status"] == "failed" and st["error"]
    assert "Traceback" not in st["error"]
    assert client.get(f"/api/runs/{r.json()['id']}/result.json").status_code == 409
    logged = [a for a in read_log(data_dir) if a.parameters.get("job") == r.json()["id"]]
    assert logged and logged[0].outcome == "error" and logged[0].interface == "web"


def test_events_stream_progress_then_end(client: TestClient, trace_id: str) -> None:
    r = client.post("/api/simulate", json={"trace_id": trace_id})
    with client.stream("GET", f"/api/jobs/{r.json()['id']}/events") as s:
        assert s.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in s.iter_lines() if line.startswith("event:")]
    assert lines[-1] == "event: end"


def test_history_lists_every_job(client: TestClient, trace_id: str) -> None:
    sim = run_job(client, "/api/simulate", {"trace_id": trace_id})["job"]["id"]
    plan = client.post("/api/recover", json={"record": SEED_RECOVERY}).json()["id"]
    rows = client.get("/api/runs").json()
    assert {sim, plan} <= {r["id"] for r in rows}
    assert [r["created_at"] for r in rows] == sorted((r["created_at"] for r in rows), reverse=True)
    only = client.get("/api/runs?kind=recover").json()
    assert plan in {r["id"] for r in only} and all(r["kind"] == "recover" for r in only)
    assert client.get("/api/runs?limit=0").status_code == 422


def test_cancel_time_limit_and_queue_bound(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, max_concurrent_jobs=1, max_queued_jobs=1, job_timeout_s=3.0)
    with TestClient(create_app(settings)) as c:
        tid = c.post("/api/traces/generate", json={"num_requests": 300}).json()["id"]
        long = {"trace_id": tid, "n_trials": 200, "trial_seeds": 3}
        first = c.post("/api/tune", json=long).json()["id"]  # runs until the time limit
        running_first = lambda: c.get(f"/api/jobs/{first}").json()["status"] == "running"  # noqa: E731
        wait_until(running_first, 120, "the first job did not start")  # a hang guard
        second = c.post("/api/tune", json=long).json()["id"]  # waits for the worker
        third = c.post("/api/tune", json=long)
        assert third.status_code == 429 and "waiting" in third.json()["detail"]
        assert c.delete(f"/api/jobs/{second}").status_code == 202
        # a job that never started reads cancelled at once (issue 47: it said "queued")
        assert c.get(f"/api/jobs/{second}").json()["status"] == "cancelled"
        assert c.get(f"/api/runs/{second}").json()["job"]["status"] == "cancelled"
        assert c.delete(f"/api/jobs/{second}").status_code == 409
        st = wait_job(c, first)
        assert st["status"] == "failed" and "time limit of 3 s" in st["error"]
        assert c.delete(f"/api/jobs/{first}").status_code == 409
        running = c.post("/api/tune", json=long).json()["id"]
        while c.get(f"/api/jobs/{running}").json()["status"] != "running":
            time.sleep(0.05)
        assert c.delete(f"/api/jobs/{running}").status_code == 202
        assert wait_job(c, running)["status"] == "cancelled"
        after = c.post("/api/simulate", json={"trace_id": tid}).json()["id"]
        assert wait_job(c, after)["status"] == "done"  # a fresh worker replaced the stopped one


def test_the_eta_goes_by_the_rate_since_the_first_count() -> None:
    """A run's first requests finish only after their whole latency: 82 of 100,000 closed in the
    first slice said 'about 600 s left' for a 3 s run. The ETA is the rate since the first count."""
    from servesim.web.jobs import eta_s

    first = (1000.0, 82)  # (time.monotonic(), count) of the first report; the clock is passed in
    # 30,000 more in the 1 s since: 69,918 left at 30,000/s, not 99,918 at the 30,082/s since 0
    assert eta_s(30_082, 100_000, first, now=1001.0) == 2.3
    assert eta_s(30_082, 100_000, first, now=1002.0) == 4.7  # half the rate: twice the time left
    assert eta_s(82, 100_000, first, now=1003.0) is None  # nothing gained since: no rate yet
    assert eta_s(1_082, 100_000, first, now=1000.4) is None  # under half a second: too soon to tell
    assert eta_s(100_000, 100_000, first, now=1005.0) is None  # done
    assert eta_s(10, 100, None, now=1001.0) is None  # no count yet


def test_a_comparison_names_each_runs_trace_and_warns_when_the_workloads_differ(
    client: TestClient, trace_id: str
) -> None:
    """Issue 30.2: a run on another trace was diffed as if only the settings changed."""
    other = client.post("/api/traces/generate", json={"preset": "default", "num_requests": 300, "seed": 2})
    other_id = other.json()["id"]
    a = run_job(client, "/api/simulate", {"trace_id": trace_id})["job"]["id"]
    a2 = run_job(client, "/api/simulate", {"trace_id": trace_id, "engine": {"max_num_seqs": 2}})["job"]["id"]
    b = run_job(client, "/api/simulate", {"trace_id": other_id})["job"]["id"]
    same = client.get(f"/api/compare?a={a}&b={a2}").json()
    assert same["workload_warning"] is None
    assert same["traces"]["a"]["id"] == same["traces"]["b"]["id"] == trace_id
    cmp = client.get(f"/api/compare?a={a}&b={b}").json()
    ta, tb = cmp["traces"]["a"], cmp["traces"]["b"]
    assert (ta["id"], tb["id"]) == (trace_id, other_id) and ta["digest"] != tb["digest"]
    assert cmp["workload_warning"].startswith("these runs replayed different workloads")
    for t in (ta, tb):
        assert f"{t['name']} ({t['digest']})" in cmp["workload_warning"]  # generated: the whole digest
    row = next(m for m in same["metrics"] if m["key"] == "ttft_ms.p99")
    assert row["ratio"] == pytest.approx(row["b"] / row["a"])
    basket = client.get(f"/api/compare/basket?baseline={a}&runs={a2}&runs={b}").json()
    assert [t["id"] for t in basket["traces"]] == [trace_id, trace_id, other_id]
    assert "different workloads" in basket["workload_warning"]


def test_the_web_advisor_chooses_as_the_cli_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 34: with the server's key, 'auto' is the DSPy program (not Claude's agent), as in
    ``servesim advise``; the advice names the program and its re-simulated score. DSPy's DummyLM
    stands in for Claude (no network); the job body runs in-process."""
    import dspy

    from servesim.advisor import RescheduleAdvice
    from servesim.web.work.plans import advise_job

    key = "sk-ant-test-0000000000000000"
    answer = RescheduleAdvice.model_validate({"order": ["req-101", "req-102"], "reasons": []})
    lm = dspy.utils.DummyLM([{"reasoning": "least slack first", "advice": answer.model_dump_json()}] * 2)
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    monkeypatch.setattr("servesim.advisor.program.make_lm", lambda *a, **k: lm)
    monkeypatch.setattr("servesim.advisor.program.load_saved", lambda *a, **k: None)
    res = advise_job({"task": "reschedule", "data": SEED_RESCHED, "advisor": "auto"}, {}, lambda *a: None)
    assert res["advisor"] == "dspy" and res["advice"]["program"] == "dspy uncompiled"
    assert res["advice"]["answered_by"] == "the DSPy program, uncompiled"
    assert res["advice"]["score_words"].startswith("simulator score ")
    assert key not in json.dumps(res)


def test_two_sweeps_compare_their_curves_and_saturation_points(client: TestClient, trace_id: str) -> None:
    """Issue 30.2: A/B of two sweeps overlays their throughput-latency curves, compares the knees."""
    body = {"trace_id": trace_id, "slo": {"ttft_p99_ms": 1000}, "seeds": 1, "rtol": 0.2}
    a = run_job(client, "/api/saturate", body)
    b = run_job(client, "/api/saturate", {**body, "engine": {"max_num_seqs": 4}})
    d = client.get(f"/api/compare?a={a['job']['id']}&b={b['job']['id']}").json()
    assert d["kind"] == "saturate" and d["metrics"] == []
    (view,) = d["sections"]
    assert view["key"] == "sweep_compare"
    rows = {r[0]: r for r in view["tables"][0]["rows"]}
    unstable = rows["unstable from, req/s"]
    ra, rb = a["result"]["report"], b["result"]["report"]
    assert unstable[1] == ra["saturation_rps"] and unstable[2] == rb["saturation_rps"]
    if ra["saturation_rps"] and rb["saturation_rps"]:
        assert unstable[3] == pytest.approx(rb["saturation_rps"] / ra["saturation_rps"])
    curve = next(s for s in view["series"] if s["key"] == "throughput_sweeps")
    assert curve["x"] == [p["offered_rps"]["mean"] for p in ra["points"]]
    assert curve["lines"][0]["x"] == [p["offered_rps"]["mean"] for p in rb["points"]]
    for p in (*ra["points"], *rb["points"]):  # throughput never reads above the offered load
        assert p["throughput_rps"]["mean"] <= p["offered_rps"]["mean"] * (1 + 1e-9)
    sim = run_job(client, "/api/simulate", {"trace_id": trace_id})["job"]["id"]
    mixed = client.get(f"/api/compare?a={a['job']['id']}&b={sim}")
    assert mixed.status_code == 422 and "a saturate run and B" in mixed.json()["detail"]
