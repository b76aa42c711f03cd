"""Every example shipped in examples/ (outside examples/inputs/, which test_user_examples.py runs)
read in the human form a person types, as README.md gives it: exit 0, no traceback, the answer
shown. A new example file fails ``test_every_example_file_is_run`` until it is given a command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO = EXAMPLES / "demo"
runner = CliRunner()

#: (the command as a person types it, with {ex} for examples/, and lines its human output shows).
HUMAN: list[tuple[str, list[str]]] = [
    (
        "simulate {ex}/trace.jsonl --config {ex}/vllm.yaml",
        ["trace.jsonl: 300 requests", "p99 ms", "timed as: "],
    ),
    ("trace inspect {ex}/trace.jsonl", ["native-jsonl", "requests"]),
    ("reschedule {ex}/interrupted.json", ["interrupted.json: re-admission order (sla-aware)", "misses SLA"]),
    ("recover {ex}/failure.json --no-manifests", ["job-1001: ", "timed as: "]),
    (
        "recover {ex}/failure.json --cluster {ex}/survivors.json --no-manifests",
        ["job-1001: COLD_RESTART -> worker-03", "job-1002: COLD_RESTART -> worker-02"],
    ),
    ("calibrate {ex}/steps.csv --model llama-3.1-8b --gpu h100", ["gemm_compute_efficiency", "fitted"]),
    (  # a scrape of vLLM's /metrics (docs/perf.md: 40 requests over 5.79 s on the emulator)
        "calibrate {ex}/vllm-metrics.prom --window-s 5.79 --model llama-3.1-8b --gpu h100 "
        "--max-num-seqs 256 --max-num-batched-tokens 8192",
        ["gemm_bandwidth_efficiency", "before", "after"],
    ),
    (  # a guidellm 0.8.1 sweep against the emulator (docs/perf.md): one fit over its 3 benchmarks
        "calibrate {ex}/guidellm-sweep.json --model llama-3.1-8b --gpu h100",
        ["guidellm-sweep-0-synchronous", "guidellm-sweep-2-constant@26.05", "before", "after"],
    ),
    (  # an inference-perf 0.7.0 stage report against the emulator (docs/perf.md)
        "calibrate {ex}/inference-perf-stage_0.json --model llama-3.1-8b --gpu h100",
        ["inference-perf-stage_0", "before", "after"],
    ),
    ("simulate {ex}/demo/inputs/bursty.csv", ["bursty.csv: 1,200", "p99 ms"]),
    (  # the demo's first interrupted job (the demo regenerates this input: read, not restated)
        "recover {ex}/demo/inputs/failure-n1.json --no-manifests",
        [json.loads((DEMO / "inputs" / "failure-n1.json").read_text())["active_jobs"][0]["job_id"] + ": "],
    ),
    ("reschedule {ex}/demo/inputs/interrupted.json", ["re-admission order (sla-aware)"]),
    (  # the demo cluster step's trace (its cluster.json records the spec it ran on this file)
        "cluster {ex}/demo/inputs/cluster.csv --replicas 3 --fail n1@25 --recovery planner",
        ["cluster.csv: 1,500 requests on 3 replicas", "recovery strategies compared", "planner"],
    ),
]
#: The demo's result documents, read back by `servesim report` (README: a report from JSON results).
DOCUMENTS = sorted(p.name for p in DEMO.glob("*.json"))
#: What `servesim demo` wrote besides its documents: outputs, not inputs a person runs.
DEMO_OUTPUTS = {"actions.jsonl", "report.html", "report.md", "outbox"}


@pytest.mark.parametrize(
    ("command", "shown"), HUMAN, ids=[c.split(" {ex}/")[0] + " " + c.split("/")[1] for c, _ in HUMAN]
)
def test_every_example_reads_in_human_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, shown: list[str]
) -> None:
    monkeypatch.setenv("SERVESIM_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, command.format(ex=EXAMPLES).split())
    assert res.exit_code == 0, res.output
    assert res.exception is None and "Traceback" not in res.output and "error:" not in res.output
    flat = " ".join(res.stdout.split())
    for text in shown:
        assert " ".join(text.split()) in flat, (text, res.stdout[:2000])


def test_the_demo_documents_make_a_report_in_human_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVESIM_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "report"
    res = runner.invoke(app, ["report", *(str(DEMO / n) for n in DOCUMENTS), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "Traceback" not in res.output and "error:" not in res.output
    for name in DOCUMENTS:
        assert f"read {name}: " in res.stdout
    assert f"written: {out / 'report.html'}" in res.stdout and (out / "report.html").stat().st_size > 0


def test_every_example_file_is_run() -> None:
    """Each file in examples/ (but inputs/, run by test_user_examples.py) is an input of a command
    above, a demo document read by the report, or one of the demo's other outputs."""
    named = {
        Path(part.format(ex=EXAMPLES)).resolve() for c, _ in HUMAN for part in c.split() if "{ex}" in part
    }
    for path in sorted(EXAMPLES.rglob("*")):
        rel = path.relative_to(EXAMPLES)
        if path.is_dir() or rel.parts[0] == "inputs":
            continue
        is_demo_output = rel.parts[0] == "demo" and (
            (len(rel.parts) == 2 and rel.name in DOCUMENTS) or rel.parts[1] in DEMO_OUTPUTS
        )
        assert path.resolve() in named or is_demo_output, (
            f"examples/{rel} is run by no test of its human output"
        )
