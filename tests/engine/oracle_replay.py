"""Replay a stored vLLM-oracle case through servesim and list every difference, step by step."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from servesim.engine import ConstantStepTime, EngineConfig, _native, simulate
from servesim.engine.engine import TraceArrays
from servesim.engine.kv_connector import WAITING_FOR_REMOTE_KVS, OffloadingConnector, StepCountTiming
from servesim.engine.kv_pd import PDConnector
from servesim.traces.schema import Trace

CASES_DIR = Path(__file__).parent / "oracle_cases"
OFFLOAD_CASES_DIR = Path(__file__).parent / "oracle_offload_cases"


def load_case(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)  # type: ignore[no-any-return]


def case_trace(case: dict[str, Any]) -> Trace:
    step_s = case["step_s"]
    records = []
    for r in case["trace"]:
        rec = {
            "req_id": r["req_id"],
            "arrival_time_s": r.get("arrival_step", 0) * step_s,
            "prompt_len": r["prompt_len"],
            "output_len": r["output_len"],
            "priority": r.get("priority", 0),
        }
        if r.get("prefix_group") is not None:
            rec["prefix_group"] = r["prefix_group"]
            rec["prefix_len"] = r.get("prefix_len", r["prompt_len"])
        if r.get("lora") is not None:
            rec["lora"] = r["lora"]
        records.append(rec)
    return Trace.from_records(records, source=case["name"])


def case_config(case: dict[str, Any]) -> EngineConfig:
    keys = EngineConfig.model_fields.keys()
    return EngineConfig(**{k: v for k, v in case["config"].items() if k in keys})


#: What a case's step row holds after its step index, in order, and the step log's field for each.
STEP_FIELDS = (
    ("tokens", "scheduled_tokens"),
    ("preempted", "preempted"),
    ("finished", "finished"),
    ("kv_used", "kv_blocks_used"),
    ("hits", "prefix_hit_tokens"),
    ("running", "num_running"),
    ("waiting", "num_waiting"),
)


def step_diffs(row: list[Any], d: dict[str, Any]) -> list[str]:
    """vLLM's step ``row`` (step index, then ``STEP_FIELDS``) against servesim's step-log line
    ``d``: one line per figure that differs (the lists of requests compared as sets, sorted)."""
    out = []
    for (key, field), want in zip(STEP_FIELDS, row[1:], strict=True):
        got = d[field]
        if key in ("preempted", "finished"):
            got, want = sorted(got), sorted(want)
        if got != want:
            out.append(f"step {row[0]} {key}: vLLM {want} servesim {got}")
    return out


def replay(case: dict[str, Any], fast: bool = True, invariants_every_step: bool = False) -> list[str]:
    """Run the case and return the differences from vLLM's schedule (empty when identical)."""
    log: list[dict[str, Any]] = []
    simulate(
        case_trace(case),
        case_config(case),
        ConstantStepTime(step_time_s=case["step_s"]),
        fast=fast,
        step_log=log.append,
        check_invariants=invariants_every_step,
    )
    ours = {round(d["start_s"] / case["step_s"]): d for d in log}
    diffs: list[str] = []
    for row in case["steps"]:
        step, tokens = row[0], row[1]
        d = ours.pop(step, None)
        if d is None:
            if tokens:
                diffs.append(f"step {step}: vLLM scheduled {tokens}, servesim ran no step")
            continue
        diffs += step_diffs(row, d)
    for step, d in sorted(ours.items()):
        if d["scheduled_tokens"]:
            diffs.append(f"step {step}: servesim scheduled {d['scheduled_tokens']}, vLLM ran no step")
    return diffs


def group_counts_by_step(case: dict[str, Any]) -> dict[int, list[int]]:
    """Each KV cache group's blocks in use after each step servesim ran for ``case`` (invariants
    checked every step), keyed by vLLM's step number: what the cases' ``group_steps`` record."""
    import numpy as np

    from servesim.engine.engine import Engine

    engine = Engine(
        case_trace(case),
        case_config(case),
        ConstantStepTime(step_time_s=case["step_s"]),
        check_invariants=True,
    )
    engine.run()
    rec = engine.rec
    if rec.kv_group_steps is None:
        raise AssertionError("the run recorded no per-group usage: not a hybrid case")
    counts = np.frombuffer(rec.kv_group_steps, dtype=np.intc).reshape(-1, rec.num_kv_groups)
    starts = rec.step_table()["start_s"]
    return {round(t / case["step_s"]): c.tolist() for t, c in zip(starts, counts, strict=True)}


def groups_planned_as_vllm(case: dict[str, Any]) -> None:
    """servesim's KV cache planning of ``case``'s layers gives the groups vLLM planned, in one
    pool page size."""
    from servesim.engine.kv_groups import KVCacheGroup, plan_groups

    groups, size = plan_groups([KVCacheGroup(**x) for x in case["config"]["kv_layers"]])
    assert [g.model_dump(exclude_none=True) for g in groups] == case["config"]["kv_cache_groups"]
    assert size == 1


def mamba_groups_match_step_for_step(case: dict[str, Any]) -> None:
    """``case`` replays step for step (invariants every step), and after every step servesim ran
    each KV cache group holds the blocks vLLM's did; the three mamba groups of Qwen3-Next's
    layer pattern hold alike (each request holds its states in every one)."""
    assert replay(case, fast=True, invariants_every_step=True) == []
    ours = group_counts_by_step(case)
    compared = 0
    for step, want in case["group_steps"]:
        if step not in ours:  # a step vLLM ran without scheduling anything (replay checked it)
            continue
        assert ours[step] == want, f"step {step}: vLLM {want}, servesim {ours[step]}"
        assert want[0] == want[1] == want[2]
        compared += 1
    assert compared == len(ours)


def replay_pp(case: dict[str, Any], fast: bool = False, invariants_every_step: bool = True) -> list[str]:
    """Run a pipeline-parallel case (every request arriving before the first step) and return the
    differences from vLLM's schedule: servesim's steps in order against vLLM's step indices (the
    stages' clock puts servesim's steps off the case's step grid, so the order is the key)."""
    log: list[dict[str, Any]] = []
    simulate(
        case_trace(case),
        case_config(case),
        ConstantStepTime(step_time_s=case["step_s"]),
        fast=fast,
        step_log=log.append,
        check_invariants=invariants_every_step,
    )
    diffs: list[str] = []
    want_steps = case["steps"]
    if [s[0] for s in want_steps] != list(range(len(want_steps))):
        diffs.append("case: vLLM's steps are not numbered 0, 1, 2, ... (an idle gap?)")
    for i, row in enumerate(want_steps):
        if i >= len(log):
            diffs.append(f"step {row[0]}: vLLM scheduled {row[1]}, servesim ran no step")
            continue
        diffs += step_diffs(row, log[i])
    for d in log[len(want_steps) :]:
        if d["scheduled_tokens"]:
            diffs.append(f"step {d['step']}: servesim scheduled {d['scheduled_tokens']}, vLLM ran no step")
    return diffs


def offload_connector(case: dict[str, Any]) -> OffloadingConnector:
    """The CPU tier and fake worker of an offload case, as the oracle ran them."""
    c = case["config"]
    timing = StepCountTiming(case["step_s"], c["load_delay_steps"], c["store_delay_steps"])
    return OffloadingConnector(
        c["kv_offload_chunks"],
        timing,
        c["block_size"],
        c["kv_offload_blocks_per_chunk"],
        c["enable_prefix_caching"],
    )


def replay_offload(case: dict[str, Any], invariants_every_step: bool = True, fast: bool = False) -> list[str]:
    """Run an offload case; return every difference from vLLM's schedule and transfers."""
    conn = offload_connector(case)
    log: list[dict[str, Any]] = []
    seen = [0, 0]

    def on_step(d: dict[str, Any]) -> None:
        st = conn.stats
        d["loaded_blocks"] = st.loaded_blocks - seen[0]
        d["stored_blocks"] = st.stored_blocks - seen[1]
        seen[:] = [st.loaded_blocks, st.stored_blocks]
        d["waiting_for_kv"] = sorted(r.req_id for r in conn.holding if r.status == WAITING_FOR_REMOTE_KVS)
        log.append(d)

    simulate(
        case_trace(case),
        case_config(case),
        ConstantStepTime(step_time_s=case["step_s"]),
        fast=fast,
        step_log=on_step,
        check_invariants=invariants_every_step,
        kv_connector=conn,
    )
    ours = {round(d["start_s"] / case["step_s"]): d for d in log}
    diffs: list[str] = []
    for step, tokens, preempted, finished, kv_used, hits, n_run, n_wait, loads, stores, wfk in case["steps"]:
        d = ours.pop(step, None)
        if d is None:
            if tokens or loads or stores:
                diffs.append(
                    f"step {step}: vLLM scheduled {tokens} (loads {loads}, stores {stores}), "
                    "servesim ran no step"
                )
            continue
        got = [
            d["scheduled_tokens"],
            sorted(d["preempted"]),
            sorted(d["finished"]),
            d["kv_blocks_used"],
            d["prefix_hit_tokens"],
            d["num_running"],
            d["num_waiting"],
            d["loaded_blocks"],
            d["stored_blocks"],
            d["waiting_for_kv"],
        ]
        want = [tokens, sorted(preempted), sorted(finished), kv_used, hits, n_run, n_wait, loads, stores, wfk]
        names = [
            "tokens",
            "preempted",
            "finished",
            "kv_used",
            "hits",
            "running",
            "waiting",
            "loaded_blocks",
            "stored_blocks",
            "waiting_for_kv",
        ]
        for k, g, w in zip(names, got, want, strict=True):
            if g != w:
                diffs.append(f"step {step} {k}: vLLM {w} servesim {g}")
    for step, d in sorted(ours.items()):
        if d["scheduled_tokens"] or d["loaded_blocks"] or d["stored_blocks"]:
            diffs.append(f"step {step}: servesim scheduled {d['scheduled_tokens']}, vLLM ran no step")
    return diffs


PD_CASES_DIR = Path(__file__).parent / "oracle_pd_cases"


def pd_connector(case: dict[str, Any], trace: Trace) -> PDConnector:
    """The P/D connector and fake NIXL worker of a P/D case, as the oracle ran them."""
    c = case["config"]
    idx = {rid: i for i, rid in enumerate(TraceArrays(trace).req_id)}
    kinds = {r["req_id"]: r.get("pd") for r in case["trace"]}
    return PDConnector(
        StepCountTiming(case["step_s"], c["load_delay_steps"]),
        {idx[k] for k, v in kinds.items() if v == "decode"},
        {idx[k] for k, v in kinds.items() if v == "prefill"},
        send_steps=c["store_delay_steps"],
        step_s=case["step_s"],
    )


def replay_pd(case: dict[str, Any], invariants_every_step: bool = True, fast: bool = False) -> list[str]:
    """Run a P/D case; return every difference from vLLM's schedule and transfers."""
    trace = case_trace(case)
    conn = pd_connector(case, trace)
    log: list[dict[str, Any]] = []
    seen = [0, 0]

    def on_step(d: dict[str, Any]) -> None:
        d["recv_blocks"] = conn.recv_blocks - seen[0]
        d["sends"] = conn.stats.store_jobs - seen[1]
        seen[:] = [conn.recv_blocks, conn.stats.store_jobs]
        d["waiting_for_kv"] = sorted(r.req_id for r in conn.holding if r.status == WAITING_FOR_REMOTE_KVS)
        log.append(d)

    simulate(
        trace,
        case_config(case),
        ConstantStepTime(step_time_s=case["step_s"]),
        fast=fast,
        step_log=on_step,
        check_invariants=invariants_every_step,
        kv_connector=conn,
    )
    ours = {round(d["start_s"] / case["step_s"]): d for d in log}
    names = [
        "tokens",
        "preempted",
        "finished",
        "kv_used",
        "hits",
        "running",
        "waiting",
        "recv_blocks",
        "sends",
        "waiting_for_kv",
    ]
    diffs: list[str] = []
    for step, tokens, preempted, finished, kv_used, hits, n_run, n_wait, recv, sends, wfk in case["steps"]:
        d = ours.pop(step, None)
        if d is None:
            if tokens or recv or sends:
                diffs.append(
                    f"step {step}: vLLM scheduled {tokens} (recv {recv}, sends {sends}), servesim ran no step"
                )
            continue
        got = [
            d["scheduled_tokens"],
            sorted(d["preempted"]),
            sorted(d["finished"]),
            d["kv_blocks_used"],
            d["prefix_hit_tokens"],
            d["num_running"],
            d["num_waiting"],
            d["recv_blocks"],
            d["sends"],
            d["waiting_for_kv"],
        ]
        want = [tokens, sorted(preempted), sorted(finished), kv_used, hits, n_run, n_wait, recv, sends, wfk]
        for k, g, w in zip(names, got, want, strict=True):
            if g != w:
                diffs.append(f"step {step} {k}: vLLM {w} servesim {g}")
    for step, d in sorted(ours.items()):
        if d["scheduled_tokens"] or d["recv_blocks"] or d["sends"]:
            diffs.append(f"step {step}: servesim scheduled {d['scheduled_tokens']}, vLLM ran no step")
    return diffs


SPEC_CASES_DIR = Path(__file__).parent / "oracle_spec_cases"


def spec_case_config(case: dict[str, Any]) -> EngineConfig:
    """The case's engine config with its speculation: the case's real eagle/eagle3/mtp config, or
    ngram, or a drafter with its own KV (``eagle``: vLLM's k lookahead slots) where the oracle
    emulated one on an n-gram config."""
    sp = case["speculative"]
    method = sp.get("spec_method", "ngram")
    if method == "ngram" and sp.get("spec_lookahead_tokens"):
        method = "eagle"
    keys = EngineConfig.model_fields.keys()
    cfg = {k: v for k, v in case["config"].items() if k in keys}
    cfg["speculative_config"] = {
        "method": method,
        "num_speculative_tokens": sp["num_speculative_tokens"],
        "draft_step_fraction": 0.0,  # the oracle's clock is the step: no draft time
    }
    return EngineConfig(**cfg)


def replay_spec(case: dict[str, Any], invariants_every_step: bool = True) -> list[str]:
    """Run a speculative case with vLLM's accepted counts; return every difference (step by step:
    scheduled tokens with drafts, drafts scheduled, accepted, preemptions, finishes, KV, queues)."""
    from servesim.engine.engine import Engine
    from servesim.engine.speculative import ScriptedAcceptance, ScriptedDrafts

    script: dict[str, list[int]] = {}
    for row in case["steps"]:
        for rid, a in row[9].items():  # one entry per verification (padding rows: 0)
            script.setdefault(rid, []).append(a)
    log: list[dict[str, Any]] = []
    engine = Engine(
        case_trace(case),
        spec_case_config(case),
        ConstantStepTime(step_time_s=case["step_s"]),
        fast=False,
        step_log=log.append,
        check_invariants=invariants_every_step,
    )
    engine.scheduler.acceptance = ScriptedAcceptance(script)
    if "draft_lengths" in case["speculative"]:  # a drafter that sometimes proposes fewer than k
        engine.scheduler.drafts = ScriptedDrafts(case["speculative"]["draft_lengths"])
    engine.run()
    ours = {round(d["start_s"] / case["step_s"]): d for d in log}
    diffs: list[str] = []
    names = ("tokens", "preempted", "finished", "kv_used", "hits", "running", "waiting", "spec", "accepted")
    for step, tokens, preempted, finished, kv_used, hits, n_run, n_wait, spec, acc in case["steps"]:
        d = ours.pop(step, None)
        if d is None:
            if tokens:
                diffs.append(f"step {step}: vLLM scheduled {tokens}, servesim ran no step")
            continue
        got = [
            d["scheduled_tokens"],
            sorted(d["preempted"]),
            sorted(d["finished"]),
            d["kv_blocks_used"],
            d["prefix_hit_tokens"],
            d["num_running"],
            d["num_waiting"],
            d["spec_scheduled"],
            d["spec_accepted"],
        ]
        want = [tokens, sorted(preempted), sorted(finished), kv_used, hits, n_run, n_wait, spec, acc]
        for k, g, w in zip(names, got, want, strict=True):
            if g != w:
                diffs.append(f"step {step} {k}: vLLM {w} servesim {g}")
    for step, d in sorted(ours.items()):
        if d["scheduled_tokens"]:
            diffs.append(f"step {step}: servesim scheduled {d['scheduled_tokens']}, vLLM ran no step")
    return diffs


#: The pure-Python pass (``SERVESIM_PURE_PYTHON`` set) runs every case on that core already: a
#: test that replays a folder there in a subprocess (``replay_on_pure_python``) skips on it.
PURE_PASS = os.environ.get(_native.ENV_PURE, "").strip() not in ("", "0")
PURE_PASS_REASON = "this pass runs every case on the pure-Python core: a subprocess would run them again"

_PURE_REPLAY = """
import json, sys
from pathlib import Path
import oracle_replay
from servesim.engine import _native
how, runs = getattr(oracle_replay, sys.argv[2]), json.loads(sys.argv[3])
diffs = {}
for p in sorted(Path(sys.argv[1]).glob("*.json.gz")):
    for kw in runs:
        d = how(oracle_replay.load_case(p), **kw)
        if d:
            diffs[" ".join([p.name, *(f"{k}={v}" for k, v in kw.items())])] = d[:3]
print(json.dumps({"core": _native.core(), "diffs": diffs}))
"""


def replay_on_pure_python(
    folder: Path, how: str, runs: list[dict[str, Any]]
) -> tuple[str, dict[str, list[str]]]:
    """Every case of ``folder`` replayed by this module's function ``how``, once per keyword set
    of ``runs``, in a subprocess forced onto the pure-Python core (a process picks its core once,
    at import): the core it ran on and the first differences of each case and run that differs."""
    env = {**os.environ, _native.ENV_PURE: "1", "PYTHONPATH": str(Path(__file__).parent)}
    out = subprocess.run(
        [sys.executable, "-c", _PURE_REPLAY, str(folder), how, json.dumps(runs)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    got = json.loads(out.stdout)
    return got["core"], got["diffs"]
