"""P/D disaggregation equals vLLM 0.33's own Scheduler + NixlConnector, step by step.

The cases were produced by ``tools/oracle/make_pd_cases.py``: vLLM's real scheduler with the
NixlConnector's scheduler side (kv_both) and a fake worker that reports each receive finished
0-4 steps after the step that issued it and each send 0-8 steps after the step that handed it
over. Families: decode legs (prompt KV remote) with local short prompts (``pd_decode``), prefill
legs whose blocks stay held until their send is done (``pd_prefill``), both legs and local
requests on one replica, chunked prefill sometimes off (``pd_mixed``), decodes outgrowing the
pool after their KV landed (``pd_pressure``), the priority policy (``pd_priority``). Every step's
scheduled tokens, preemptions, finishes, KV blocks in use, hits at admission (GPU + received),
queue sizes, requests in WAITING_FOR_REMOTE_KVS, blocks received and sends handed over must
match, with the invariants checked after every step.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_replay import PD_CASES_DIR, case_config, case_trace, load_case, pd_connector, replay_pd

from servesim.engine import ConstantStepTime, simulate
from servesim.engine.engine import TraceArrays

CASES = sorted(PD_CASES_DIR.glob("*.json.gz"))


def test_the_pd_cases_exercise_both_legs_and_preemption() -> None:
    families = {p.name.rsplit("_", 1)[0] for p in CASES}
    assert {"pd_decode", "pd_prefill", "pd_mixed", "pd_pressure", "pd_priority"} <= families
    cases = [load_case(p) for p in CASES]
    assert sum(c["pd_totals"]["recvs"] for c in cases) > 200
    assert sum(c["pd_totals"]["sends"] for c in cases) > 100
    assert sum(c["total_preemptions"] for c in cases) > 20
    assert sum(1 for c in cases for s in c["steps"] if s[10]) > 100  # steps with requests waiting for KV


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_pd_matches_vllm(path: Path) -> None:
    assert replay_pd(load_case(path)) == []


@pytest.mark.parametrize("path", CASES, ids=[p.name.removesuffix(".json.gz") for p in CASES])
def test_pd_matches_vllm_on_the_fast_path(path: Path) -> None:
    """The decode group, its stretches and idle spans change nothing the oracle sees."""
    assert replay_pd(load_case(path), invariants_every_step=False, fast=True) == []


def test_remote_kv_changes_the_schedule() -> None:
    """Not a no-op: without the connector the decode legs prefill their prompts themselves."""
    case = load_case(PD_CASES_DIR / "pd_decode_00.json.gz")
    log: list[dict] = []
    tr = case_trace(case)
    simulate(tr, case_config(case), ConstantStepTime(step_time_s=case["step_s"]), step_log=log.append)
    plain_prefill = sum(sum(n for n in d["scheduled_tokens"].values() if n > 1) for d in log)
    conn = pd_connector(case, tr)
    log2: list[dict] = []
    simulate(
        tr,
        case_config(case),
        ConstantStepTime(step_time_s=case["step_s"]),
        kv_connector=conn,
        step_log=log2.append,
    )
    pd_prefill = sum(sum(n for n in d["scheduled_tokens"].values() if n > 1) for d in log2)
    assert pd_prefill < plain_prefill
    # every decode leg received its KV exactly once, and decoded only after it landed
    legs = {
        i
        for i, r in enumerate(TraceArrays(tr).req_id)
        if any(x["req_id"] == r and x.get("pd") == "decode" for x in case["trace"])
    }
    assert set(conn.recv_done) == set(conn.recv_started) and set(conn.recv_started) <= legs
    assert conn.stats.load_jobs == len(conn.recv_started)
