"""Adapter loads (issue 51, LoRA): vLLM 0.33's worker-side caches, worked by hand, and what they add
to a step.

vLLM (``vllm/lora/worker_manager.py`` ``LRUCacheWorkerLoRAManager.add_adapter``, ``vllm/lora/
model_manager.py`` ``LRUCacheLoRAModelManager``): each step, for each adapter of the batch: not in
the host cache (``max_cpu_loras``) -> read from disk, the host cache's oldest removed first when
full (which also deactivates it on the GPU); then activated: not active -> the oldest active
adapter deactivated when the ``max_loras`` slots are full, and the weights copied in. Touches move
an adapter to the young end of each cache.
"""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.engine import ConstantStepTime, EngineConfig, simulate
from servesim.engine.adapter_cache import AdapterCache
from servesim.perf.catalog import resolve_gpu, resolve_model
from servesim.perf.lora import ADAPTER_READ_BYTES_PER_S, adapter_load_times, lora_params_per_slot
from servesim.traces.schema import Trace

COPY, READ = 0.002, 0.04


def test_host_and_gpu_caches_evict_their_oldest_as_vllm_does() -> None:
    c = AdapterCache(gpu_slots=2, host_slots=3, to_gpu_s=COPY, read_s=READ)
    assert c.step([1, 2, 0]) == pytest.approx(2 * (READ + COPY))  # both read and copied; 0: base model
    assert c.step([1, 2]) == 0.0  # already active: touched only
    assert c.step([1, 3]) == pytest.approx(READ + COPY)  # 3 takes 2's slot (2 is older than 1)
    assert list(c.gpu) == [1, 3] and list(c.host) == [2, 1, 3]
    assert c.step([2]) == pytest.approx(COPY)  # still in host memory: copied, not read
    assert list(c.gpu) == [3, 2]  # 1 was the oldest active
    # a fourth adapter: the host cache's oldest (1) goes, read again on its next use
    assert c.step([4]) == pytest.approx(READ + COPY)
    assert list(c.host) == [3, 2, 4] and list(c.gpu) == [2, 4]
    assert c.step([1]) == pytest.approx(READ + COPY)
    assert (c.gpu_loads, c.reads) == (6, 5)
    assert c.load_s == pytest.approx(5 * READ + 6 * COPY)


def test_leaving_the_host_cache_deactivates_an_adapter_on_the_gpu() -> None:
    # max_cpu_loras == max_loras (vLLM's default): host eviction of an active adapter frees its slot
    c = AdapterCache(gpu_slots=2, host_slots=2, to_gpu_s=COPY, read_s=READ)
    c.step([1, 2])
    c.step([2])  # 1 is now the oldest in both caches
    c.step([3])
    assert list(c.host) == [2, 3] and list(c.gpu) == [2, 3]


def test_a_load_by_hand_llama_8b_rank_16_on_an_h100() -> None:
    model, gpu = resolve_model("llama-3.1-8b"), resolve_gpu("h100")
    per_gpu = lora_params_per_slot(model, 1, 16) * model.dtype_bytes
    assert per_gpu == 41_943_040 * 2  # the slot docs/engine.md works out
    t = adapter_load_times(model, gpu, 1, 16)
    assert t.to_gpu_s == pytest.approx(gpu.host_link_overhead_s + per_gpu / gpu.pcie_bandwidth)
    assert t.read_s == pytest.approx(per_gpu / ADAPTER_READ_BYTES_PER_S)
    # TP 2: each rank copies half its slot over its own link; the disk read is the whole adapter
    t2 = adapter_load_times(model, gpu, 2, 16)
    assert t2.to_gpu_s < t.to_gpu_s and t2.read_s == t.read_s


class _Timed(ConstantStepTime):
    """A constant step that also times adapter loads (as perf's roofline does)."""

    def adapter_load_times(self) -> Any:
        class T:
            to_gpu_s, read_s = COPY, READ

        return T()


def test_the_step_that_first_runs_an_adapter_lasts_its_load_longer() -> None:
    # max_loras 1: a0's two requests run, then a1's; a0 returns last. Host cache of 1 (vLLM's
    # default): a0 is read again; of 2: only copied back.
    rows = [
        {"req_id": "x0", "arrival_time_s": 0.0, "prompt_len": 8, "output_len": 2, "lora": "a0"},
        {"req_id": "y0", "arrival_time_s": 0.0, "prompt_len": 8, "output_len": 2, "lora": "a1"},
        {"req_id": "x1", "arrival_time_s": 0.5, "prompt_len": 8, "output_len": 2, "lora": "a0"},
    ]
    step = _Timed(step_time_s=0.01)

    def durations(**cfg: Any) -> list[float]:
        res = simulate(Trace.from_records(rows), EngineConfig(enable_lora=True, max_loras=1, **cfg), step)
        return [round(d, 6) for d in res.steps["duration_s"]]

    base, full, copied = 0.01, round(0.01 + READ + COPY, 6), round(0.01 + COPY, 6)
    assert durations() == [full, base, full, base, full, base]
    assert durations(max_cpu_loras=2) == [full, base, full, base, copied, base]
    lora = simulate(Trace.from_records(rows), EngineConfig(enable_lora=True, max_loras=1), step).summary.lora
    assert lora is not None and (lora.gpu_loads, lora.disk_reads) == (3, 3)
    assert lora.load_s == pytest.approx(3 * (READ + COPY))
    # a fixed step time times no load: the summary says so
    plain = simulate(
        Trace.from_records(rows), EngineConfig(enable_lora=True), ConstantStepTime(step_time_s=0.01)
    )
    assert plain.summary.lora is not None and plain.summary.lora.gpu_loads is None


def test_simulate_shows_the_adapters_loaded_and_refuses_a_host_cache_below_max_loras(tmp_path: Any) -> None:
    trace = tmp_path / "lora.csv"
    runner = CliRunner()
    made = runner.invoke(
        app, ["generate", "default", "-n", "200", "--rate", "20", "--lora-adapters", "6", "--out", str(trace)]
    )
    assert made.exit_code == 0, made.output
    human = runner.invoke(
        app, ["simulate", str(trace), "--enable-lora", "--max-loras", "2", "--max-cpu-loras", "3"]
    )
    assert human.exit_code == 0, human.output
    text = " ".join(human.output.split())
    assert "LoRA" in text and "adapters copied to the GPU" in text and "(host cache of 3)" in text
    doc = runner.invoke(app, ["simulate", str(trace), "--enable-lora", "--max-loras", "2", "--json"])
    import json

    lora = json.loads(doc.output)["summary"]["lora"]
    assert lora["max_cpu_loras"] == 2 and lora["gpu_loads"] >= 6 and lora["disk_reads"] >= 6
    bad = runner.invoke(
        app, ["simulate", str(trace), "--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"]
    )
    assert bad.exit_code != 0
    assert "max_cpu_loras (2) must be >= max_loras (4)" in bad.output and "Traceback" not in bad.output
