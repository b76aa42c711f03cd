"""One question, one answer (issue 45): the capacity questions asked of the CLI, the web API and
the demo give the same document.

The same trace and settings go through ``servesim saturate --json``, ``servesim tune --json``
(with and without ``--layouts``) and the web's jobs (``POST /api/saturate`` or ``/api/tune``, then
``GET /api/runs/{id}/document.json``); the demo's sweep and study are compared with the command
lines they say they are (``SATURATE_COMMAND``, ``TUNE_COMMAND``). What is left out, and why:

* ``trace_provenance``: the CLI read the CSV file, the server its stored Parquet copy of the same
  upload; the provenance says so (format, path), as it should.
* ``storage`` (``study.storage``, ``recommendation.source.storage``): where the study is kept, the
  server's SQLite database against the CLI's ``--storage memory``; the study's name, which is
  derived from everything that defines the study, must still be the same.

Everything else, every figure included, must be equal.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from parity import upload, web_client, web_document, write_trace
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
SLO = "ttft_p99_ms=400,tpot_p99_ms=40"
LINEAR = ["--linear-step-time", "--num-gpu-blocks", "3000"]
LINEAR_SPEC = {"linear_step_time": True, "engine": {"num_gpu_blocks": 3000}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parity")
    write_trace(path, "t.csv")
    return path


@pytest.fixture(scope="module")
def client(folder: Path) -> Iterator[TestClient]:
    """A server of its own: its study storage holds only this module's studies."""
    with web_client(folder / "web") as c:
        yield c


@pytest.fixture(scope="module")
def trace_id(client: TestClient, folder: Path) -> str:
    return upload(client, folder / "t.csv")


def _cli(folder: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> dict[str, Any]:
    """The command's ``--json`` document, run where the trace is (it names it ``t.csv``, as the
    upload is named)."""
    monkeypatch.chdir(folder)
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _web(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return web_document(client, path, body)


def _comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """The document less where it was asked (see the module docstring)."""
    out = json.loads(json.dumps(doc))
    out.pop("trace_provenance", None)
    if isinstance(out.get("study"), dict):
        out["study"].pop("storage")
    rec = out.get("recommendation")
    if isinstance(rec, dict):
        rec["source"].pop("storage")
    return out


def test_saturate_cli_and_web(
    folder: Path, client: TestClient, trace_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = _cli(
        folder, monkeypatch, "saturate", "t.csv", *LINEAR, "--slo", SLO, "--seeds", "1", "--rtol", "0.1"
    )
    body = {"trace_id": trace_id, "deployment": LINEAR_SPEC, "slo": SLO, "seeds": 1, "rtol": 0.1}
    web = _web(client, "/api/saturate", body)
    assert cli["kind"] == "saturate" and cli["goodput_knee_rps"] is not None
    assert cli["settings"]["seeds"] == [1000]  # the fresh seed tune's headroom also runs on
    assert _comparable(web) == _comparable(cli)


def test_tune_cli_and_web(
    folder: Path, client: TestClient, trace_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    space = {"replicas": [1, 2], "max_num_seqs": [16, 64], "enable_chunked_prefill": [True]}
    flags = [f"--space={k}={','.join(str(v).lower() for v in vs)}" for k, vs in space.items()]
    cli = _cli(
        folder,
        monkeypatch,
        "tune",
        "t.csv",
        *LINEAR,
        "--slo",
        SLO,
        "--trials",
        "3",
        "--trial-seeds",
        "1",
        "--verify-seeds",
        "1",
        *flags,
        "--gpu-hour-usd",
        "2.5",
        "--storage",
        "memory",
        "--executor",
        "local",
        "--jobs",
        "1",
    )
    body = {
        "trace_id": trace_id,
        "deployment": LINEAR_SPEC,
        "slo": SLO,
        "n_trials": 3,
        "trial_seeds": 1,
        "verify_seeds": 1,
        "space": space,
        "gpu_hour_usd": 2.5,
    }
    web = _web(client, "/api/tune", body)
    assert cli["kind"] == "tune" and cli["recommendation"] is not None
    assert cli["recommendation"]["deploy"]["usd_per_gpu_hour"] == 2.5
    assert _comparable(web) == _comparable(cli)


def test_tune_layouts_cli_and_web(
    folder: Path, client: TestClient, trace_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = _cli(
        folder,
        monkeypatch,
        "tune",
        "t.csv",
        "--layouts",
        "agg,disagg",
        "--gpus",
        "2",
        "--slo",
        SLO,
        "--verify-seeds",
        "1",
        "--no-break-even",
    )
    body = {
        "trace_id": trace_id,
        "slo": SLO,
        "verify_seeds": 1,
        "layouts": {"kinds": ["agg", "disagg"], "gpus": 2, "break_even": False},
    }
    web = _web(client, "/api/tune", body)
    assert cli["kind"] == "layouts" and cli["layouts"]["verification"] is not None
    assert _comparable(web) == _comparable(cli)


def test_tune_gpu_types_cli_and_web(
    folder: Path, client: TestClient, trace_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tune --gpu-types h100,l40s --gpu-price l40s=0.9`` and the Tune job's ``gpu_types`` and
    ``gpu_prices``: one study per type, the same comparison and the chosen type's study."""
    slo = "ttft_p99_ms=2000,tpot_p99_ms=200"
    space = {
        "replicas": [1, 2],
        "max_num_seqs": [64],
        "max_num_batched_tokens": [2048],
        "tensor_parallel_size": [1],
    }
    flags = [f"--space={k}={','.join(str(v) for v in vs)}" for k, vs in space.items()]
    cli = _cli(
        folder,
        monkeypatch,
        "tune",
        "t.csv",
        "--gpu-types",
        "h100,l40s",
        "--gpu-price",
        "l40s=0.9",
        "--slo",
        slo,
        "--trials",
        "2",
        "--trial-seeds",
        "1",
        "--verify-seeds",
        "1",
        *flags,
        "--storage",
        "memory",
        "--executor",
        "local",
        "--jobs",
        "1",
    )
    body = {
        "trace_id": trace_id,
        "slo": slo,
        "n_trials": 2,
        "trial_seeds": 1,
        "verify_seeds": 1,
        "space": space,
        "gpu_types": ["h100", "l40s"],
        "gpu_prices": {"l40s": 0.9},
    }
    web = _web(client, "/api/tune", body)
    ans = cli["gpu_types"]
    assert [r["gpu"] for r in ans["rows"]] == ["h100", "l40s"] and ans["rows"][1]["price_source"] == "given"
    assert ans["cheapest"] in ("h100", "l40s")
    assert _comparable(web) == _comparable(cli)
    # the run's report (built from that document) shows the comparison as `servesim report` does
    run = next(r for r in client.get("/api/runs?kind=tune").json() if r["params"].get("gpu_types"))
    html = client.get(f"/api/runs/{run['id']}/report.html")
    assert html.status_code == 200 and "The cheapest deployment across GPU types" in html.text


#: The demo's committed output: tests/report/test_examples.py checks that ``servesim demo`` writes
#: these bytes today.
DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"


@pytest.mark.slow
@pytest.mark.parametrize("step", ["saturate", "tune"])
def test_the_demo_step_is_its_command(step: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's sweep and study write the document of the command line they name. The demo's
    document is the committed one, which tests/report/test_examples.py checks the demo writes
    byte for byte (a third run of the demo's study, 6 CPU-s, would check nothing more)."""
    from servesim.cli import demo_steps

    command = {"saturate": demo_steps.SATURATE_COMMAND, "tune": demo_steps.TUNE_COMMAND}[step]
    args = shlex.split(command)[1:]
    assert args[-1] == "--json"
    cli = _cli(tmp_path, monkeypatch, *args[:-1])
    demo = json.loads((DEMO / f"{step}.json").read_text(encoding="utf-8"))
    assert demo == cli


def test_tune_defaults_are_the_same_study_everywhere(
    folder: Path, client: TestClient, trace_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left to their defaults, ``servesim tune`` and the web's Tune ask the same question: the same
    trials, seeds per trial and verification seeds (``servesim.tune_defaults``), so the same
    study and the same recommendation. (The web once defaulted to 12 trials of one seed verified
    on two, the CLI to 40 of two verified on three: two answers for one trace.)"""
    space = {"replicas": [1, 2], "max_num_seqs": [16, 64]}
    flags = [f"--space={k}={','.join(str(v) for v in vs)}" for k, vs in space.items()]
    cli = _cli(folder, monkeypatch, "tune", "t.csv", *LINEAR, "--slo", SLO, *flags, "--storage", "memory")
    web = _web(
        client, "/api/tune", {"trace_id": trace_id, "deployment": LINEAR_SPEC, "slo": SLO, "space": space}
    )
    assert cli["recommendation"] is not None
    assert _comparable(web) == _comparable(cli)
    trial = next(t for t in cli["study"]["trials"] if t["outcome"] is not None)
    assert cli["study"]["n_trials"] == 40 and trial["outcome"]["good_fraction"]["n"] == 2  # seeds per trial
    assert cli["recommendation"]["verification_seeds"] == [1000, 1001, 1002]
