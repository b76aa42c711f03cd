"""The web's request bodies are the specs (issue 27): ``deployment`` is ``servesim.spec.DeploymentSpec``,
``slo`` is ``servesim.spec.PercentileSLO`` read by the CLI's one parser.

Older bodies (``engine`` + ``hardware``, a top-level ``replicas``/``router``, ``slo`` in the engine's
``ttft_ms``) are translated before validation: they give byte-for-byte the result of today's body,
and a run stored with one reads back (and restores the form) in today's shape. The same bad SLO is
worded by the web's 422 as ``servesim simulate --slo`` words it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner
from web_helpers import SMALL_SPACE, run_job, settings_for, wait_job

from servesim.cli.main import app
from servesim.web.app import create_app
from servesim.web.schemas import SimulateBody

runner = CliRunner()


def _same(a: dict[str, Any], b: dict[str, Any]) -> bytes:
    """A result as bytes, for the byte-for-byte comparison (keys sorted)."""
    ja, jb = (json.dumps(x, sort_keys=True).encode() for x in (a, b))
    assert ja == jb
    return ja


OLD_AND_NEW = [
    (
        "/api/simulate",
        {
            "engine": {"max_num_seqs": 32},
            "hardware": {"model": "llama-3.1-8b", "gpu": "l4", "tensor_parallel_size": 1},
            "slo": {"ttft_ms": 800, "tpot_ms": 80},
        },
        {
            "deployment": {"model": "llama-3.1-8b", "gpu": "l4", "tp": 1, "engine": {"max_num_seqs": 32}},
            "slo": {"ttft_p99_ms": 800, "tpot_p99_ms": 80},
        },
    ),
    (
        "/api/simulate",
        {
            "engine": {"max_num_seqs": 16},
            "hardware": {"gpu": "h100", "num_gpu_blocks_override": 4000},
            "replicas": 2,
            "router": "round_robin",
            "failures": [{"node": "n1", "time_s": 3.0}],
            "recovery": "restart",
        },
        {
            "deployment": {
                "gpu": "h100",
                "replicas": 2,
                "router": "round_robin",
                "engine": {"max_num_seqs": 16, "num_gpu_blocks": 4000},
            },
            "failures": [{"node": "n1", "time_s": 3.0}],
            "recovery": "restart",
        },
    ),
    (
        "/api/saturate",
        {"engine": {"max_num_seqs": 64}, "hardware": {"gpu": "l4"}, "seeds": 1, "slo": {"ttft_p99_ms": 2000}},
        {"deployment": {"gpu": "l4", "engine": {"max_num_seqs": 64}}, "seeds": 1, "slo": "ttft_p99_ms=2000"},
    ),
    (
        "/api/tune",
        {
            "engine": {"max_num_seqs": 48},
            "hardware": {"gpu": "h100"},
            "slo": {"ttft_p99_ms": 5000},
            "n_trials": 2,
            "verify_seeds": 1,
            "space": SMALL_SPACE,
        },
        {
            "deployment": {"gpu": "h100", "engine": {"max_num_seqs": 48}},
            "slo": {"ttft_p99_ms": 5000},
            "n_trials": 2,
            "verify_seeds": 1,
            "space": SMALL_SPACE,
        },
    ),
    (
        "/api/advise",
        {
            "task": "batching",
            "advisor": "rules",
            "optimize": 0,
            "engine": {"max_num_seqs": 8},
            "hardware": {"gpu": "h100"},
            "slo": {"ttft_ms": 500},
        },
        {
            "task": "batching",
            "advisor": "rules",
            "optimize": 0,
            "deployment": {"gpu": "h100", "engine": {"max_num_seqs": 8}},
            "slo": "ttft_p99_ms=500",
        },
    ),
]


@pytest.mark.parametrize(("path", "old", "new"), OLD_AND_NEW, ids=lambda x: x if isinstance(x, str) else "")
def test_an_older_body_gives_the_same_result_as_todays(
    path: str, old: dict[str, Any], new: dict[str, Any], tmp_path: Path
) -> None:
    """Each on its own server (a tune study with the same settings would resume the first one's)."""
    results, params = [], []
    for body in (old, new):
        folder = tmp_path / str(len(results))
        with TestClient(create_app(settings_for(folder))) as c:
            tr = c.post("/api/traces/generate", json={"preset": "default", "num_requests": 120, "seed": 1})
            trace_id = tr.json()["id"]
            run = run_job(c, path, {"trace_id": trace_id, **body})
            # where each server stored the same generated trace (a sweep names the file it read)
            text = json.dumps(run["result"]).replace(str(folder), "DATA").replace(trace_id, "TRACE")
            # a study's name is a digest of its settings and its workload (named by that file)
            results.append(json.loads(re.sub(r"servesim-tune-[0-9a-f]{16}", "STUDY", text)))
            params.append({k: v for k, v in run["job"]["params"].items() if k != "trace_id"})
    assert len(_same(*results)) > 200
    assert params[0] == params[1]  # stored (and shown) in today's shape, whichever was sent
    assert "engine" not in params[0] and "hardware" not in params[0] and "deployment" in params[0]


def test_a_stored_older_run_reads_back_in_todays_shape(client: TestClient, trace_id: str) -> None:
    """A run stored by an older version (its params in the older shape, as the history holds them)
    shows today's params: "load these settings" fills the shared panels from them."""
    old = {
        "trace_id": trace_id,
        "engine": {"max_num_seqs": 24},
        "hardware": {
            "model": "llama-3.1-8b",
            "gpu": "l4",
            "tensor_parallel_size": 1,
            "num_gpu_blocks_override": None,
        },
        "slo": {"ttft_ms": 700.0, "tpot_ms": None, "e2e_ms": None},
        "label": None,
        "replicas": 1,
        "router": "least_outstanding",
        "failures": [],
        "recovery": "planner",
    }
    wb = client.app.state.workbench  # type: ignore[attr-defined]
    row = wb.jobs.submit("simulate", "stored by an older version", old, trace_id)
    assert wait_job(client, row.id)["status"] == "done"
    got = client.get(f"/api/runs/{row.id}").json()
    assert got["job"]["params"]["deployment"] == {
        "model": "llama-3.1-8b",
        "gpu": "l4",
        "tp": 1,
        "replicas": 1,
        "router": "least_outstanding",
        "engine": {"max_num_seqs": 24},
    }
    assert got["job"]["params"]["slo"] == {"ttft_p99_ms": 700.0}
    assert got["result"]["summary"]["slo"] == {"ttft_ms": 700.0, "tpot_ms": None, "e2e_ms": None}
    listed = next(j for j in client.get("/api/runs").json() if j["id"] == row.id)
    assert listed["params"] == got["job"]["params"]
    cost = client.get(f"/api/runs/{row.id}/cost?usd_per_gpu_hour=2").json()
    assert cost["gpus"] == 1


#: Bad SLOs as ``--slo`` text; the web takes the same text, or the object of the same terms.
BAD_SLOS = [
    ("ttft_p99_ms=abc", {"ttft_p99_ms": "abc"}),  # not a number
    ("latency_p99_ms=500", {"latency_p99_ms": 500}),  # an unknown key
    ("ttft_p99_ms=inf", {"ttft_p99_ms": "inf"}),  # not finite
    (",", None),  # empty
    ("ttft_ms=500", None),  # no percentile (the older body's object form is translated instead)
    ("ttft_p99_ms=500,good=0.9", {"ttft_p99_ms": 500, "good": 0.9}),  # judged by saturate and tune
]


def _cli_error(trace: Path, slo: str) -> str:
    res = runner.invoke(app, ["simulate", str(trace), "--slo", slo])
    assert res.exit_code == 2, res.output
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith("error: --slo ") or line.startswith("error: unknown --slo ") or "--slo" in line
    return line.removeprefix("error: ")


@pytest.mark.parametrize(("text", "obj"), BAD_SLOS)
def test_a_bad_slo_is_worded_by_the_web_as_by_the_cli(
    client: TestClient, trace_id: str, tmp_path: Path, text: str, obj: dict[str, Any] | None
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("req_id,arrival_time_s,prompt_len,output_len\nr0,0,100,10\nr1,0.1,120,12\n")
    cli = _cli_error(trace, text)
    for slo in (text, *((obj,) if obj is not None else ())):
        r = client.post("/api/simulate", json={"trace_id": trace_id, "slo": slo})
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        # the same sentence; the input named as each interface names it (--slo, the body's slo)
        assert cli == detail.replace("slo", "--slo", 1), (cli, detail)
        assert r.json()["errors"] == [{"field": "body.slo", "reason": detail}]
    # every tab's SLO is read by the one parser: the sweep and the study word it the same
    if "good=" not in text:
        for path in ("/api/saturate", "/api/tune", "/api/advise"):
            r = client.post(path, json={"trace_id": trace_id, "slo": text})
            assert r.status_code == 422 and r.json()["detail"] == detail, (path, r.text)


def test_an_empty_slo_is_no_slo_as_an_empty_flag_is(client: TestClient, trace_id: str) -> None:
    for slo in ("", {}, {"ttft_p99_ms": None}, None):
        assert SimulateBody.model_validate({"trace_id": trace_id, "slo": slo}).slo is None


def test_the_door_refuses_what_a_shared_server_must_not_run(client: TestClient, trace_id: str) -> None:
    """A profile is a shipped name, never a file on the server; this server's replica bound; a
    body mixing both shapes; a model that is not in the catalog (a config.json path)."""
    cases = [
        ({"deployment": {"profile": "/etc/passwd"}}, "body.deployment.profile"),
        ({"deployment": {"replicas": 17}}, "body.deployment.replicas"),
        ({"deployment": {"model": "/tmp/config.json"}}, None),
        ({"deployment": {}, "engine": {"max_num_seqs": 8}}, None),
        ({"deployment": {"step_time_ms": 5, "gpu": "h100"}}, None),
    ]
    for body, field in cases:
        r = client.post("/api/simulate", json={"trace_id": trace_id, **body})
        assert r.status_code == 422, (body, r.text)
        if field is not None:
            assert r.json()["errors"][0]["field"] == field
    r = client.post("/api/simulate", json={"trace_id": trace_id, "deployment": {"profile": "h100"}})
    assert r.status_code == 202, r.text  # a shipped profile name
    bad = {"max_model_len": "x", "max_num_seqs": 0, "enable_chunked_prefill": "maybe"}
    r = client.post("/api/simulate", json={"trace_id": trace_id, "deployment": {"engine": bad}})
    assert r.status_code == 422, r.text  # every value refused is named, never a 500
    assert [e["field"] for e in r.json()["errors"]] == [f"body.deployment.engine.{k}" for k in bad]
    r = client.post(
        "/api/simulate", json={"trace_id": trace_id, "deployment": {"engine": {"max_num_seqs": "64"}}}
    )
    assert r.status_code == 202 and r.json()["params"]["deployment"]["engine"] == {"max_num_seqs": 64}


def test_the_catalog_offers_the_deployment_fields_as_the_cli_names_them(client: TestClient) -> None:
    cat = client.get("/api/catalog").json()
    dep = {f["name"]: f for f in cat["deployment_fields"]}
    assert list(dep) == [
        "model",
        "gpu",
        "tp",
        "gpu_memory_utilization",
        "replicas",
        "router",
        "num_gpu_blocks",
    ]
    assert (dep["tp"]["flag"], dep["tp"]["default"]) == ("--tp", 1)
    assert (dep["model"]["default"], dep["gpu"]["default"]) == ("llama-3.1-8b", "h100")
    assert dep["replicas"]["maximum"] == 16 and "least_outstanding" in dep["router"]["enum"]
    assert dep["num_gpu_blocks"]["default"] is None and dep["num_gpu_blocks"]["engine"] is True
    assert [f["name"] for f in cat["percentile_slo_fields"]] == [
        "ttft_p99_ms",
        "tpot_p99_ms",
        "e2e_p99_ms",
        "min_good_fraction",
    ]
    assert "hardware_flags" not in cat and "slo_fields" not in cat  # one deployment, one SLO
