"""Issue 46, a command that starts: every ``vllm serve`` command servesim emits (the demo's outputs,
the docs' code blocks, a deployment per knob of the tuning space) passes vLLM 0.33's argument
handling: against the committed snapshot of its flag table here (CI), and through vLLM's own
parser and config checks where the oracle's virtualenv exists (``tools/check_vllm_commands.py``)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
M = "meta-llama/Llama-3.1-8B-Instruct"


def _tool(name: str) -> ModuleType:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "tools"))


check = _tool("check_vllm_commands")
commands = _tool("vllm_commands")


@pytest.fixture(scope="module")
def emitted() -> list:
    return commands.all_commands(ROOT)


def _bad(argv: list[str]) -> object:
    c = commands.Command("control", argv)
    c.models = commands.stand_ins(c)
    return c


def test_the_snapshot_is_vllm_0_33s_flag_table_and_holds_every_flag_servesim_writes() -> None:
    table = check.load_table()
    assert table["vllm_version"] == "0.33.0"
    flags = table["flags"]
    for flag in (
        "--max-num-seqs",
        "--no-enable-chunked-prefill",
        "--kv-offloading-backend",
        "--speculative-config",
    ):
        assert flag in flags
    assert flags["--gpu-memory-utilization"]["range"] == {"gt": 0, "le": 1}
    assert flags["--scheduling-policy"]["choices"] == ["fcfs", "priority"]
    assert {"eagle", "eagle3", "mtp", "draft_model", "ngram"} <= set(
        table["speculative_config"]["method"]["choices"]
    )


def test_every_emitted_command_passes_the_flag_table(emitted: list) -> None:
    table = check.load_table()
    sources = {c.source.split(" ", 1)[0] for c in emitted}
    assert {"examples/demo/outbox/recommendation/vllm-serve-command.txt", "examples/demo/report.md"} <= {
        s.split(" #")[0] for s in sources
    }
    assert any(c.source.startswith("docs/") for c in emitted), "the docs print no command any more"
    assert any(c.config_yaml for c in emitted) and any("Deployment" in c.source for c in emitted)
    problems = [f"{c.source}: {p}" for c in emitted for p in check.table_problems(c, table)]
    assert problems == []


def test_the_knob_set_covers_the_tuning_space() -> None:
    deps = [d for _, d, _ in commands.knob_deployments()]
    methods = {d.speculative().method for d in deps if d.speculative() is not None}
    assert methods == {"eagle", "eagle3", "draft_model", "ngram"}  # mtp: no catalog model has MTP layers
    assert {d.block_size for d in deps} == {16, 32, 64, 128}
    assert {d.tensor_parallel_size for d in deps} == {1, 2, 4, 8}
    assert {d.enable_chunked_prefill for d in deps} == {True, False}
    assert False in {d.enable_prefix_caching for d in deps}
    assert any(d.kv_offloading_size for d in deps) and any(d.queue_timeout_s for d in deps)
    assert max(d.replicas for d in deps) > 1 and "priority" in {d.policy for d in deps}


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([M, "--max-num-seq", "8"], "not a flag"),
        ([M, "--gpu-memory-utilization", "1.5"], "out of vLLM's range"),
        ([M, "--max-num-seqs", "lots"], "not a value of type int"),
        ([M, "--kv-offloading-backend", "disk"], "not one of lmcache, native"),
        ([M, "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}'], 'without "model"'),
        (
            [
                M,
                "--speculative-config",
                '{"method": "ngram", "num_speculative_tokens": 3, "acceptance_rates": [1]}',
            ],
            "not a key",
        ),
        ([M, "--max-num-seqs", "1024", "--max-num-batched-tokens", "512"], "SchedulerConfig refuses"),
        ([M, "--max-model-len", "32768", "--no-enable-chunked-prefill"], "chunked prefill off"),
        ([M, "--max-model-len", "200000"], "above the model's context"),
        ([M, "--tensor-parallel-size", "3"], "does not divide"),
        ([M, "--block-size", "8"], "no NVIDIA attention backend"),
        ([M, "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'], "without MTP layers"),
    ],
)
def test_the_table_check_refuses_what_vllm_refuses(argv: list[str], said: str) -> None:
    assert any(said in p for p in check.table_problems(_bad(argv), check.load_table()))


def test_a_config_yaml_reads_as_vllms_loader_reads_it() -> None:
    table = check.load_table()
    text = (
        "model: m\nno-enable-chunked-prefill: true\nenable-prefix-caching: false\n"
        "speculative-config:\n  a: 1\n"
    )
    argv = check.config_argv(text, table)
    assert argv == [
        "--model",
        "m",
        "--no-enable-chunked-prefill",
        "--no-enable-prefix-caching",
        "--speculative-config",
        '{"a": 1}',
    ]


def test_shell_lines_give_the_argv_after_vllm_serve() -> None:
    text = (
        "CUDA_VISIBLE_DEVICES=0,1 vllm serve m --port 8001  # replica 2 of 3\n"
        "vllm serve \\\n  m --x '{\"a\": 1}' && echo"
    )
    assert commands.shell_commands(text) == [["m", "--port", "8001"], ["m", "--x", '{"a": 1}']]


ORACLE = check.default_oracle_python()


@pytest.mark.slow
@pytest.mark.skipif(
    not ORACLE.exists(),
    reason=f"no vLLM 0.33 oracle virtualenv at {ORACLE} (../shared/vllm-oracle/setup.sh beside the "
    "checkout makes it; or set VLLM_ORACLE_PYTHON): vLLM's own parser is not run, "
    "the flag-table tests above still are",
)
def test_every_emitted_command_passes_vllms_own_parser_and_config_checks(emitted: list) -> None:
    control = _bad([M, "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}'])
    runnable, notes = check.oracle_checkable(emitted, ORACLE)  # --quantization: a venv that can run it
    assert len(runnable) == len(emitted) or notes
    refused = check.oracle_problems([*runnable, control], ORACLE)
    assert "without speculative model" in refused.pop("control")  # the oracle can say no
    assert refused == {}, json.dumps(refused, indent=1)
