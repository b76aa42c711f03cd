"""One question, one answer: a recovery plan, a rescheduling and an advice asked the same way through
``servesim <command> --json``, the web's API and the demo's step give the same document.

What an interface adds of its own is left out of the comparison, and only that: the files it
wrote for review (``manifests``, ``outbox_files``: a machine's paths) and, for the demo, the
trace's provenance (the committed examples name no machine path). Everything else, the stamps
included, must be equal.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from servesim.cli import demo_steps
from servesim.cli.main import app
from servesim.web.app import create_app
from servesim.web.settings import WebSettings

RECORD = {
    "interrupted_node": "node-3",
    "preemption_timestamp": "2026-01-01T00:00:00Z",
    "network_bandwidth_gbps": 10,
    "batch_id": "parity",
    "active_jobs": [
        {"job_id": "job-801", "prompt_tokens": 1024, "generated_tokens": 128, "kv_cache_checkpointed": True},
        {"job_id": "job-802", "prompt_tokens": 2048, "generated_tokens": 64, "kv_cache_checkpointed": False},
        {"job_id": "job-803", "prompt_tokens": 300, "generated_tokens": -5},  # invalid: listed, not planned
    ],
}
INTERRUPTED = {
    "batch_capacity": 2,
    "interrupted_requests": [
        {"req_id": "req-101", "tokens_processed": 512, "tokens_remaining": 16, "sla_budget_ms": 150},
        {"req_id": "req-102", "tokens_processed": 64, "tokens_remaining": 400, "sla_budget_ms": 1200},
        {"req_id": "req-103", "tokens_processed": 900, "tokens_remaining": 40, "sla_budget_ms": 400},
    ],
}
#: What each interface lists of the files it wrote (not part of the answer).
WRITTEN = ("manifests", "outbox_files")
SLO = {"ttft_p99_ms": 1000, "tpot_p99_ms": 100}
TRIALS = 3
runner = CliRunner()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = WebSettings(data_dir=tmp_path_factory.mktemp("web"), allowed_hosts=frozenset({"testserver"}))
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)  # the rules advisor everywhere


def _answer(doc: dict[str, Any], *also: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in (*WRITTEN, *also)}


def _cli(*args: str) -> dict[str, Any]:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def _web_document(client: TestClient, run_id: str) -> dict[str, Any]:
    r = client.get(f"/api/runs/{run_id}/document.json")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _web_job(client: TestClient, path: str, body: dict[str, Any]) -> str:
    r = client.post(path, json=body)
    assert r.status_code == 202, r.text
    job = str(r.json()["id"])
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        st = client.get(f"/api/jobs/{job}").json()
        if st["status"] in ("done", "failed", "cancelled"):
            assert st["status"] == "done", st
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job} did not finish")


def _demo(tmp_path: Path, name: str) -> tuple[demo_steps.DemoRun, Path]:
    run = demo_steps.DemoRun(tmp_path / "demo")
    return run, run.out / name


def test_a_recovery_plan_is_the_same_document_everywhere(tmp_path: Path, client: TestClient) -> None:
    record = tmp_path / "record.json"
    record.write_text(json.dumps(RECORD))
    cli = _cli("recover", str(record), "--outbox", str(tmp_path / "outbox"))
    assert cli["kind"] == "recover" and cli["schema_version"] == 1
    assert len(cli["manifests"]) >= 1 and [j["job_id"] for j in cli["invalid_jobs"]] == ["job-803"]

    r = client.post("/api/recover", json={"record": RECORD})
    assert r.status_code == 200, r.text
    assert r.json()["document"] == _web_document(client, r.json()["id"])

    run, path = _demo(tmp_path, "recover.json")
    answer = demo_steps.save_recovery(run, RECORD)
    assert [p.name for p in sorted((run.outbox / "recovery").iterdir())] == sorted(
        Path(m).name for m in cli["manifests"]
    )  # the same manifests, written where each interface writes them
    demo = json.loads(path.read_text())

    assert _answer(cli) == _web_document(client, r.json()["id"]) == demo
    assert demo == answer.plans[0].model_dump(mode="json") | {"kind": "recover", "schema_version": 1}


def test_a_rescheduling_is_the_same_document_everywhere(tmp_path: Path, client: TestClient) -> None:
    data = tmp_path / "interrupted.json"
    data.write_text(json.dumps(INTERRUPTED))
    cli = _cli("reschedule", str(data), "--policy", "least-slack-first")

    r = client.post("/api/reschedule", json={"data": INTERRUPTED, "policy": "least-slack-first"})
    assert r.status_code == 200, r.text

    run, path = _demo(tmp_path, "reschedule.json")
    demo_steps.save_rescheduling(run, {**INTERRUPTED, "policy": "least-slack-first"})

    assert cli["kind"] == "reschedule" and cli["policy"] == "least-slack-first"
    assert cli == _web_document(client, r.json()["id"]) == json.loads(path.read_text())


@pytest.mark.parametrize(("task", "data"), [("reschedule", INTERRUPTED), ("fallback", RECORD)])
def test_advice_on_a_record_is_the_same_document_everywhere(
    tmp_path: Path, client: TestClient, task: str, data: dict[str, Any]
) -> None:
    from servesim.services.advice import AdviseRequest

    source = tmp_path / f"{task}.json"
    source.write_text(json.dumps(data))
    cli = _cli("advise", str(source), "--advisor", "rules")
    assert cli["task"] == task and cli["advisor"] == "rules" and cli["outbox_files"] == []

    job = _web_job(client, "/api/advise", {"task": task, "data": data, "advisor": "rules"})

    run, path = _demo(tmp_path, "advise.json")
    demo_steps.save_advice(run, AdviseRequest(data=data, advisor="rules"))
    demo = json.loads(path.read_text())
    assert len(demo["outbox_files"]) >= 1

    assert _answer(cli) == _answer(_web_document(client, job)) == _answer(demo)
    if task == "fallback":
        assert [j["job_id"] for j in cli["invalid_jobs"]] == ["job-803"]


def test_batching_advice_is_the_same_document_everywhere(
    tmp_path: Path, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace file given to the CLI and uploaded to the web under the same name: the same case
    (vllm serve's defaults on the default GPU), the same optimizer trials, the same advice."""
    from servesim.services.advice import AdviseRequest
    from servesim.services.inputs import TraceInput
    from servesim.spec import PercentileSLO
    from servesim.traces import generate_trace, preset_spec, write_trace

    monkeypatch.chdir(tmp_path)
    spec = preset_spec("bursty").model_copy(update={"num_requests": 150, "seed": 4})
    write_trace(generate_trace(spec), tmp_path / "bursty.parquet")
    slo = ",".join(f"{k}={v}" for k, v in SLO.items())
    cli = _cli("advise", "bursty.parquet", "--advisor", "rules", "--optimize", str(TRIALS), "--slo", slo)
    assert cli["task"] == "batching" and cli["trace_provenance"]["source"] == "bursty.parquet"

    up = client.post("/api/traces?name=bursty.parquet", content=(tmp_path / "bursty.parquet").read_bytes())
    assert up.status_code == 201, up.text
    body = {"trace_id": up.json()["id"], "slo": SLO, "optimize": TRIALS, "advisor": "rules"}
    web = _web_document(client, _web_job(client, "/api/advise", body))

    run, path = _demo(tmp_path, "advise.json")
    request = AdviseRequest(
        trace=TraceInput(source="bursty.parquet"), slo=PercentileSLO(**SLO), optimize=TRIALS, advisor="rules"
    )
    demo_steps.save_advice(run, request)
    demo = json.loads(path.read_text())

    assert _answer(cli) == _answer(web)
    assert _answer(cli, "trace_provenance") == _answer(demo)
    assert cli["advice"]["rationale"]  # an answer, not two empty documents
