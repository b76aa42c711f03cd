"""Speculative decoding over the API (issue 33): the catalog's group, the body's
``deployment.engine.speculative_config`` as the CLI's ``--speculative-config`` JSON, 422s naming
the nested field in the library's words, and a run's tile, acceptance rate and series."""

from __future__ import annotations

from typing import get_args

import pytest
from fastapi.testclient import TestClient
from web_helpers import run_job, section

from servesim.engine.results import tokens_per_verifying_step
from servesim.engine.speculative import ACCEPTANCE_PRESETS, MAX_SPEC_TOKENS, SpecMethod

SPEC = {"method": "eagle3", "num_speculative_tokens": 3}


def test_the_catalog_offers_the_group_not_a_text_flag(client: TestClient) -> None:
    cat = client.get("/api/catalog").json()
    assert "speculative_config" not in {f["name"] for f in cat["engine_flags"]}  # an object, not a flag
    sp = cat["speculative"]
    assert sp["name"] == "speculative_config" and sp["flag"] == "--speculative-config"
    assert sp["methods"] == list(get_args(SpecMethod))
    assert sp["max_num_speculative_tokens"] == MAX_SPEC_TOKENS
    assert sp["presets"]["eagle3"] == list(ACCEPTANCE_PRESETS["eagle3"])
    assert sp["field_help"]["num_speculative_tokens"]


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        (
            {"method": "eagle3", "num_speculative_tokens": 0},
            "num_speculative_tokens",
            "greater than or equal to 1",
        ),
        (
            {"method": "eagle3", "num_speculative_tokens": 17},
            "num_speculative_tokens",
            "less than or equal to 16",
        ),
        ({"method": "medusa", "num_speculative_tokens": 2}, "method", "'ngram', 'eagle', 'eagle3'"),
        ({"method": "eagle3"}, "num_speculative_tokens", "Field required"),
        ({**SPEC, "acceptance_rates": [0.8, 1.5]}, "acceptance_rates", "each in [0, 1]"),
        ({**SPEC, "acceptance_rates": []}, "acceptance_rates", "at least one rate"),
        ({**SPEC, "bogus": 1}, "bogus", "unknown key; known: method, num_speculative_tokens"),
        ({**SPEC, "acceptance_sed": 1}, "acceptance_sed", "unknown key; did you mean 'acceptance_seed'?"),
    ],
)
def test_a_bad_config_is_a_422_naming_the_nested_field(
    client: TestClient, trace_id: str, config: dict[str, object], field: str, words: str
) -> None:
    r = client.post(
        "/api/simulate", json={"trace_id": trace_id, "deployment": {"engine": {"speculative_config": config}}}
    )
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    errors = r.json()["errors"]
    assert errors[0]["field"] == f"body.deployment.engine.speculative_config.{field}", errors
    assert words in errors[0]["reason"] and not errors[0]["reason"].startswith("Value error")
    assert f"speculative_config.{field}: " in r.json()["detail"]


def test_a_speculating_run_carries_its_config_and_shows_tokens_per_step(
    client: TestClient, trace_id: str
) -> None:
    config = {**SPEC, "acceptance_rates": [0.7]}
    run = run_job(
        client,
        "/api/simulate",
        {"trace_id": trace_id, "deployment": {"engine": {"speculative_config": config}}},
    )
    # the document carries the config as it was given (the CLI's JSON), and the engine ran it
    assert run["job"]["params"]["deployment"]["engine"]["speculative_config"]["method"] == "eagle3"
    assert run["result"]["config"]["speculative_config"]["acceptance_rates"] == [0.7]
    sp = run["result"]["summary"]["speculative"]
    assert sp["num_speculative_tokens"] == 3 and sp["verifications"] > 0
    view = section(run["result"], "simulation")
    tiles = {k["key"]: k for k in view["kpis"]}
    want = tokens_per_verifying_step(sp["accepted_tokens"], sp["verifications"])
    assert tiles["accepted_tokens_per_step"]["value"] == pytest.approx(want)
    assert 1.0 < want < 4.0
    assert tiles["spec_acceptance_rate"]["value"] == pytest.approx(sp["accepted_tokens"] / sp["draft_tokens"])
    assert 0.4 < sp["acceptance_rate"] < 0.75  # one rate 0.7 at every position, truncated at k = 3
    line = next(s for s in view["series"] if s["key"] == "accepted_tokens_per_step")
    assert line["reference"] == 4.0 and all(1.0 <= y <= 4.0 for y in line["y"])
    off = run_job(client, "/api/simulate", {"trace_id": trace_id})
    assert "speculative" not in off["result"]["summary"]
    assert "accepted_tokens_per_step" not in {k["key"] for k in section(off["result"], "simulation")["kpis"]}
    p50 = {k["key"]: k["value"] for k in run["result"]["kpis"]["p50"]}
    off_p50 = {k["key"]: k["value"] for k in off["result"]["kpis"]["p50"]}
    assert p50["tpot_ms_p50"] < off_p50["tpot_ms_p50"]  # 300 requests at a light rate: speculation pays
