"""Traces over the API: upload (validated, size-limited), generate, list, inspect, delete."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
from fastapi.testclient import TestClient
from web_helpers import GOOD_CSV, settings_for

from servesim.actionlog import read_log
from servesim.web.app import create_app


def test_upload_csv_stores_the_trace_with_its_summary_view(client: TestClient) -> None:
    r = client.post("/api/traces?name=mine.csv", content=GOOD_CSV, headers={"content-type": "text/csv"})
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["name"] == "mine.csv" and t["num_requests"] == 200 and t["num_dropped"] == 0
    assert t["stats"]["source"] == "mine.csv"  # the user's name, never the server's scratch path
    summary = client.get(f"/api/traces/{t['id']}/summary").json()
    view = summary["sections"][0]
    assert {h["key"] for h in view["histograms"]} >= {"prompt_len", "output_len"}
    assert sum(next(h for h in view["histograms"] if h["key"] == "prompt_len")["counts"]) == 200
    assert any(s["key"] == "arrival_rate" and len(s["x"]) > 1 for s in view["series"])
    assert t["id"] in {x["id"] for x in client.get("/api/traces").json()}


def test_upload_parquet_and_jsonl(client: TestClient) -> None:
    df = pd.read_csv(io.BytesIO(GOOD_CSV))
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    r = client.post("/api/traces?name=t.parquet", content=buf.getvalue())
    assert r.status_code == 201, r.text
    assert r.json()["num_requests"] == 200
    jsonl = df.head(5).to_json(orient="records", lines=True).encode()
    r = client.post("/api/traces?name=t.jsonl", content=jsonl)
    assert r.status_code == 201 and r.json()["num_requests"] == 5


def test_bad_rows_are_listed_with_row_and_field(client: TestClient) -> None:
    body = b"req_id,arrival_time_s,prompt_len,output_len\nr1,0,10,5\nr2,1,-3,5\nr3,2,12,x\n"
    r = client.post("/api/traces?name=some-bad.csv", content=body)
    assert r.status_code == 201
    dropped = r.json()["dropped"]
    assert [(d["row"], d["field"]) for d in dropped] == [(2, "prompt_len"), (3, "output_len")]


def test_a_file_without_a_usable_row_is_422_with_every_row_error(client: TestClient) -> None:
    body = b"req_id,arrival_time_s,prompt_len,output_len\nr1,0,x,5\nr2,1,-3,5\n"
    r = client.post("/api/traces?name=bad.csv", content=body)
    assert r.status_code == 422
    assert r.headers["content-type"] == "application/problem+json"
    p = r.json()
    assert p["status"] == 422 and p["detail"].startswith("bad.csv: no usable request")
    assert [(e["row"], e["field"]) for e in p["errors"]] == [(1, "prompt_len"), (2, "prompt_len")]
    assert "/web/uploads" not in r.text  # no server path in the answer


def test_a_structural_error_names_the_file_not_the_server_path(client: TestClient) -> None:
    r = client.post("/api/traces?name=cols.csv", content=b"a,b\n1,2\n")
    assert r.status_code == 422
    assert r.json()["detail"].startswith("cols.csv")
    assert "uploads" not in r.json()["detail"]


def test_unsupported_type_and_extension_are_415(client: TestClient) -> None:
    assert client.post("/api/traces?name=x.exe", content=b"MZ").status_code == 415
    r = client.post("/api/traces?name=x.csv", content=b"a", headers={"content-type": "image/png"})
    assert r.status_code == 415 and "image/png" in r.json()["detail"]


def test_empty_upload_and_unknown_format_are_422(client: TestClient) -> None:
    assert client.post("/api/traces?name=x.csv", content=b"").status_code == 422
    r = client.post("/api/traces?name=x.csv&format=nope", content=GOOD_CSV)
    assert r.status_code == 422 and "format" in r.json()["detail"]


def test_missing_name_is_422(client: TestClient) -> None:
    r = client.post("/api/traces", content=GOOD_CSV)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "query.name"


def test_upload_over_the_limit_is_413_while_streaming(tmp_path: Path) -> None:
    with TestClient(create_app(settings_for(tmp_path, max_upload_bytes=1000))) as c:
        declared = c.post("/api/traces?name=big.csv", content=GOOD_CSV)
        assert declared.status_code == 413

        def chunks():  # no Content-Length: the limit must hold while the body streams in
            for _ in range(50):
                yield b"x" * 100

        streamed = c.post("/api/traces?name=big.csv", content=chunks())
        assert streamed.status_code == 413, streamed.text
        assert streamed.json()["status"] == 413 and "limit of 1,000 bytes" in streamed.json()["detail"]
        assert not list((tmp_path / "web" / "uploads").iterdir())  # nothing left behind


def test_too_many_requests_per_trace_is_refused(tmp_path: Path) -> None:
    with TestClient(create_app(settings_for(tmp_path, max_requests_per_trace=50))) as c:
        assert c.post("/api/traces?name=m.csv", content=GOOD_CSV).status_code == 413
        r = c.post("/api/traces/generate", json={"num_requests": 51})
        assert r.status_code == 422 and "at most 50" in r.json()["detail"]


def test_generate_list_inspect_delete(client: TestClient, data_dir: Path) -> None:
    """The action log names what the web did: an upload of its own (the module's other uploads
    may have run on another xdist worker, with a data folder of its own), a generate, a delete."""
    assert client.post("/api/traces?name=logged.csv", content=GOOD_CSV).status_code == 201
    r = client.post("/api/traces/generate", json={"preset": "bursty", "num_requests": 120, "seed": 3})
    assert r.status_code == 201
    t = r.json()
    assert t["origin"] == "generated" and t["num_requests"] == 120
    assert client.get(f"/api/traces/{t['id']}").json()["digest"] == t["digest"]
    assert client.delete(f"/api/traces/{t['id']}").status_code == 204
    assert client.get(f"/api/traces/{t['id']}").status_code == 404
    assert client.delete(f"/api/traces/{t['id']}").status_code == 404
    actions = [a.action for a in read_log(data_dir) if a.interface == "web"]
    assert {"generate", "delete-trace", "ingest"} <= set(actions)


def test_unknown_preset_and_bad_ids(client: TestClient) -> None:
    r = client.post("/api/traces/generate", json={"preset": "no-such", "num_requests": 10})
    assert r.status_code == 422 and "unknown preset" in r.json()["detail"]
    assert client.get("/api/traces/../../etc/passwd").status_code == 404
    assert client.get("/api/traces/not-an-id").status_code == 422
