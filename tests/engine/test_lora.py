"""LoRA in the engine: vLLM's ``max_loras`` admission rule, worked by hand and as properties.

vLLM 0.33 (``Scheduler.schedule``): the adapters of every running request form
``scheduled_loras``; a waiting request whose adapter is not among them while they number
``max_loras`` is skipped (it keeps its place: skipped requests return to the front of the queue
in their order) and the loop goes on to the next; an admitted request adds its adapter. Block
hashes include the adapter's name, so equal prompts under two adapters share no KV.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import configs, examples, traces
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.traces.schema import Trace

STEP = ConstantStepTime(step_time_s=0.01)


def _run(rows: list[dict[str, Any]], **config: Any) -> list[dict[str, Any]]:
    log: list[dict[str, Any]] = []
    simulate(Trace.from_records(rows), EngineConfig(**config), STEP, fast=False, step_log=log.append)
    return log


def test_a_request_whose_adapter_exceeds_max_loras_waits_and_keeps_its_place() -> None:
    # r0..r5 arrive together naming a0 a1 a2 a0 a1 -; max_loras 2: r2 (a2) is skipped, r3 and r4
    # join their adapters' slots, r5 (the base model) needs none; r2 runs once a0/a1 are gone.
    adapters = ["a0", "a1", "a2", "a0", "a1", None]
    rows = [
        {"req_id": f"r{i}", "arrival_time_s": 0.0, "prompt_len": 20, "output_len": 2 + (i == 5) * 5}
        | ({"lora": a} if a else {})
        for i, a in enumerate(adapters)
    ]
    log = _run(rows, enable_lora=True, max_loras=2)
    assert log[0]["scheduled_tokens"] == {"r0": 20, "r1": 20, "r3": 20, "r4": 20, "r5": 20}
    assert log[0]["num_waiting"] == 1
    assert log[1]["scheduled_tokens"] == {"r0": 1, "r1": 1, "r3": 1, "r4": 1, "r5": 1}
    assert sorted(log[1]["finished"]) == ["r0", "r1", "r3", "r4"]
    assert log[2]["scheduled_tokens"] == {"r5": 1, "r2": 20}  # a0 and a1 left: a2 fits
    # without the limit everyone starts at once
    assert set(_run(rows, enable_lora=True, max_loras=3)[0]["scheduled_tokens"]) == {
        f"r{i}" for i in range(6)
    }


def test_skipped_requests_stay_ahead_of_later_arrivals() -> None:
    # s1 (b) is skipped while a runs; when a finishes, s1 goes before s2 (c), which arrived later.
    rows = [
        {"req_id": "s0", "arrival_time_s": 0.0, "prompt_len": 8, "output_len": 3, "lora": "a"},
        {"req_id": "s1", "arrival_time_s": 0.0, "prompt_len": 8, "output_len": 3, "lora": "b"},
        {"req_id": "s2", "arrival_time_s": 0.005, "prompt_len": 8, "output_len": 3, "lora": "c"},
    ]
    log = _run(rows, enable_lora=True, max_loras=1)
    order = [next(iter(d["scheduled_tokens"])) for d in log if len(d["scheduled_tokens"]) == 1]
    firsts = list(dict.fromkeys(order))
    assert firsts == ["s0", "s1", "s2"]


@pytest.mark.parametrize(("second", "hit"), [("a", 32), ("b", 0), (None, 0)])
def test_a_prefix_is_shared_only_under_the_same_adapter(second: str | None, hit: int) -> None:
    first = {"req_id": "p0", "arrival_time_s": 0.0, "prompt_len": 40, "output_len": 2, "lora": "a"}
    later = {"req_id": "p1", "arrival_time_s": 1.0, "prompt_len": 40, "output_len": 2}
    for row in (first, later):
        row.update(prefix_group="sys", prefix_len=39)
    if second is not None:
        later["lora"] = second
    log = _run([first, later], enable_lora=True, max_loras=2, block_size=16)
    hits = {d["start_s"]: d["prefix_hit_tokens"] for d in log}
    assert hits[1.0] == ({"p1": hit} if hit else {})


def _with_adapters(trace: Trace, names: list[str | None]) -> Trace:
    df = trace.df.copy()
    df["lora"] = pd.Series([names[i % len(names)] for i in range(len(df))], dtype=object)
    return Trace(df, trace.provenance)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_running_requests_never_hold_more_adapters_than_max_loras(data: st.DataObject) -> None:
    names = data.draw(st.lists(st.sampled_from(["x", "y", "z", "w", None]), min_size=1, max_size=6))
    trace = _with_adapters(data.draw(traces()), names)
    max_loras = data.draw(st.integers(1, 3))
    config = data.draw(configs(trace)).model_copy(update={"enable_lora": True, "max_loras": max_loras})
    config = EngineConfig.model_validate(config.model_dump())
    lora = dict(zip(trace.df["req_id"], trace.df["lora"], strict=True))
    log: list[dict[str, Any]] = []
    result = simulate(trace, config, STEP, fast=data.draw(st.booleans()), step_log=log.append)
    running: set[str] = set()
    for d in log:
        running -= set(d["preempted"])
        running |= set(d["scheduled_tokens"])
        assert len({lora[r] for r in running} - {None}) <= max_loras
        running -= set(d["finished"])
    if config.queue_timeout_s is None:  # nobody starves behind an adapter: all end
        assert result.summary.num_unfinished == 0


@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_with_room_for_every_adapter_lora_changes_nothing(data: st.DataObject) -> None:
    """max_loras at or above the adapters in use, no prefix cache (the adapter splits its keys):
    the same schedule, byte for byte, as the trace without adapters."""
    trace = data.draw(traces())
    names = data.draw(st.lists(st.sampled_from(["x", "y", "z", None]), min_size=1, max_size=4))
    config = data.draw(configs(trace)).model_copy(update={"enable_prefix_caching": False})
    plain = simulate(trace, config, STEP, fast=False)
    lora_config = config.model_copy(update={"enable_lora": True, "max_loras": 3})
    lora = simulate(_with_adapters(trace, names), lora_config, STEP, fast=False)
    assert lora.requests.to_csv() == plain.requests.to_csv()
    assert lora.steps.to_csv() == plain.steps.to_csv()


def test_bad_lora_settings_are_one_line_naming_the_flag(tmp_path: Any) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time_s,prompt_len,output_len,lora\n0,10,2,ad1\n0.1,10,2,\n")
    runner = CliRunner()
    for args, shown in (
        (["--enable-lora", "--max-lora-rank", "7"], "error: --max-lora-rank: must be one of 1, 8, 16, 32"),
        (
            ["--enable-lora", "--max-loras", "0"],
            "error: --max-loras: Input should be greater than or equal to 1",
        ),
        ([], "lora column names 1 LoRA adapter(s) (ad1) but enable_lora is off"),
        (["--enable-lora", "--kv-offloading-size", "4"], "enable_lora with kv_offloading_size 4 GiB"),
        (["--enable-lora", "--prefill-schedule-interval", "2"], "with prefill_schedule_interval 2"),
    ):
        res = runner.invoke(app, ["simulate", str(trace), *args])
        assert res.exit_code == 2 and shown in res.stderr, res.stderr
        assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1
    ok = runner.invoke(app, ["simulate", str(trace), "--enable-lora", "--max-loras", "2", "--json"])
    assert ok.exit_code == 0, ok.stderr


def test_a_config_without_lora_reads_and_writes_as_before() -> None:
    assert not {"enable_lora", "max_loras", "max_lora_rank"} & set(EngineConfig().model_dump())
    on = EngineConfig(enable_lora=True, max_loras=4, max_lora_rank=64)
    assert on.model_dump()["max_loras"] == 4
    assert EngineConfig.model_validate(on.model_dump()) == on


@pytest.mark.parametrize("fast", [False, True])
def test_each_step_records_the_requests_it_left_waiting_for_their_adapter(fast: bool) -> None:
    # The first case above: r2 (a2) is skipped in steps 0 and 1 while a0 and a1 hold both slots,
    # and admitted in step 2; nothing else is ever skipped (the bottleneck verdicts read this).
    adapters = ["a0", "a1", "a2", "a0", "a1", None]
    rows = [
        {"req_id": f"r{i}", "arrival_time_s": 0.0, "prompt_len": 20, "output_len": 2 + (i == 5) * 5}
        | ({"lora": a} if a else {})
        for i, a in enumerate(adapters)
    ]
    res = simulate(Trace.from_records(rows), EngineConfig(enable_lora=True, max_loras=2), STEP, fast=fast)
    assert res.steps["lora_skipped"].tolist()[:4] == [1, 1, 0, 0]
    assert res.steps["lora_skipped"].sum() == 2
    # room for every adapter: no skip, and no column (the steps equal those without adapters)
    roomy = simulate(Trace.from_records(rows), EngineConfig(enable_lora=True, max_loras=3), STEP)
    assert "lora_skipped" not in roomy.steps
