"""One question, one answer: a run of one replica gives the same document from ``servesim
simulate --json``, the web's Run tab (its stored document) and ``servesim dashboard --headless
--json`` — the same request answered by ``servesim.services.run``."""

from __future__ import annotations

from pathlib import Path

import pytest
from parity import cli_json, upload, web_client, web_document, without, write_trace

SLO = "ttft_p99_ms=500,tpot_p99_ms=50"
DEPLOYMENT = ["--model", "qwen2.5-7b", "--gpu", "a100-80gb", "--max-num-seqs", "48", "--slo", SLO]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parity-run")
    write_trace(path)
    return path


def test_simulate_web_and_dashboard_give_one_document(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli = cli_json(["simulate", "trace.csv", *DEPLOYMENT, "--json"], folder, monkeypatch)
    dash = cli_json(["dashboard", "trace.csv", *DEPLOYMENT, "--headless", "--json"], folder, monkeypatch)
    assert dash == cli
    assert cli["summary"]["num_requests"] == 120 and cli["setup"]["spec"]["engine"] == {"max_num_seqs": 48}
    with web_client(folder / "web") as client:
        body = {
            "trace_id": upload(client, folder / "trace.csv"),
            "deployment": {"model": "qwen2.5-7b", "gpu": "a100-80gb", "engine": {"max_num_seqs": 48}},
            "slo": SLO,
        }
        web = web_document(client, "/api/simulate", body)
    # the web keeps per-request records as its CSV download, not in the document (--no-requests)
    assert web["requests"] is None
    assert without(web, "requests") == without(cli, "requests")


def test_a_cluster_with_a_failure_gives_one_document(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``servesim cluster --recovery planner``, the web's Run tab with replicas and a failure, and
    ``servesim dashboard --headless`` of the same cluster: one ``ClusterSpec``, one answer."""
    flags = ["--replicas", "2", "--fail", "n1@2", "--recovery", "planner", "--model", "qwen2.5-7b"]
    cli = cli_json(["cluster", "trace.csv", *flags, "--slo", SLO, "--json"], folder, monkeypatch)
    dash = cli_json(
        ["dashboard", "trace.csv", *flags, "--slo", SLO, "--headless", "--json"], folder, monkeypatch
    )
    assert cli["strategies"][0]["strategy"] == "planner" and cli["strategies"][0]["interrupted"] > 0
    assert [s["key"] for s in cli["sections"]] == ["fleet", "replica.n0", "replica.n1"]
    assert dash == cli
    with web_client(folder / "web-cluster") as client:
        body = {
            "trace_id": upload(client, folder / "trace.csv"),
            "deployment": {"model": "qwen2.5-7b", "replicas": 2},
            "failures": [{"node": "n1", "time_s": 2}],
            "recovery": "planner",
            "slo": SLO,
        }
        web = web_document(client, "/api/simulate", body)
    assert web == cli


def test_pools_with_a_failure_give_one_document(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefill/decode pools with a decode replica lost and back: ``servesim cluster``, ``servesim
    dashboard --headless`` and the web's Run tab with pools send one ``ClusterSpec`` to the
    cluster service and write one document."""
    flags = ["--prefill-replicas", "1", "--decode-replicas", "2", "--fail", "d1@2+1", "--model", "qwen2.5-7b"]
    cli = cli_json(["cluster", "trace.csv", *flags, "--slo", SLO, "--json"], folder, monkeypatch)
    dash = cli_json(
        ["dashboard", "trace.csv", *flags, "--slo", SLO, "--headless", "--json"], folder, monkeypatch
    )
    assert [f["node"] for f in cli["run"]["failures"]] == ["d1"]
    assert dash == cli
    with web_client(folder / "web-pools") as client:
        body = {
            "trace_id": upload(client, folder / "trace.csv"),
            "deployment": {"model": "qwen2.5-7b"},
            "disaggregated": {"prefill": {"replicas": 1}, "decode": {"replicas": 2}},
            "failures": [{"node": "d1", "time_s": 2, "recover_after_s": 1}],
            "slo": SLO,
        }
        web = web_document(client, "/api/simulate", body)
    assert web == cli
