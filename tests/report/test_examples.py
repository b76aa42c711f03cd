"""The committed examples are what the code produces today (same seeds, same bytes), and
``servesim demo`` runs the whole workflow and says where everything went."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from typer.testing import CliRunner

from servesim.actionlog import ActionRecord, read_log
from servesim.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "demo"
#: Files whose bytes must not change from run to run (the action log has times and durations).
DETERMINISTIC = ("*.json", "*.md", "*.csv", "*.yaml", "*.txt")


def committed() -> list[Path]:
    files = [p for pattern in DETERMINISTIC for p in EXAMPLES.rglob(pattern)]
    return sorted(p for p in files if p.name != "actions.jsonl")


def test_demo_reproduces_the_committed_examples(tmp_path: Path, monkeypatch) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("SERVESIM_DATA_DIR", str(data))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    out = tmp_path / "demo"
    res = CliRunner().invoke(
        app, ["demo", "--out", str(out), "--advisor", "rules", "--format", "md", "--json"]
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["out_dir"] == str(out)
    assert {"simulate.json", "saturate.json", "tune.json", "cluster.json", "recover.json"} <= set(
        summary["files"]
    )
    assert all(Path(p).exists() for p in summary["files"].values())
    files = committed()
    assert len(files) >= 15
    for expected in files:
        rel = expected.relative_to(EXAMPLES)
        produced = out / rel
        assert produced.exists(), f"the demo no longer writes {rel}"
        assert produced.read_bytes() == expected.read_bytes(), f"{rel} differs: run `make examples`"
    # every step was logged once, then the demo itself; none of them failed
    actions = [r.action for r in read_log(data)]
    assert actions[-1] == "demo"
    for a in (
        "ingest",
        "generate",
        "simulate",
        "saturate",
        "tune",
        "cluster",
        "recover",
        "reschedule",
        "advise",
        "report",
    ):
        assert a in actions
    assert all(r.outcome == "ok" for r in read_log(data))


def test_the_committed_action_log_validates_and_holds_no_machine_path() -> None:
    lines = (EXAMPLES / "actions.jsonl").read_bytes().splitlines()
    records = [ActionRecord.model_validate(orjson.loads(line)) for line in lines]
    assert [r.action for r in records][:3] == ["ingest", "generate", "ingest"]
    advise = next(r for r in records if r.action == "advise")
    assert advise.advisor is not None and advise.advisor.advisor == "rules"
    for path in [o for r in records for o in r.outputs]:
        assert not Path(path).is_absolute(), path


def test_committed_results_are_the_commands_json_shapes() -> None:
    from servesim.report import read_document

    kinds = {p.name: read_document(p).kind for p in EXAMPLES.glob("*.json")}
    assert kinds["simulate.json"] == "simulate" and kinds["tune.json"] == "tune"
    assert kinds["recover.json"] == "recover" and kinds["inspect-azure-conv.json"] == "trace"


def test_the_demo_simulation_is_the_simulate_command_it_records() -> None:
    """The demo's simulate.json is what `servesim simulate` prints for the command line it
    records (same spec, same resolve, same defaults, same document), not a hand-built run."""
    import shlex

    demo = json.loads((EXAMPLES / "simulate.json").read_text(encoding="utf-8"))
    words = shlex.split(demo.pop("command"))
    assert words[0] == "servesim" and "--json" in words
    res = CliRunner().invoke(app, words[1:])
    assert res.exit_code == 0, res.output
    cli = json.loads(res.stdout)
    assert demo.pop("model") == "llama-3.1-8b"  # the demo's provenance, beside the command line
    assert demo["setup"]["defaults_applied"], "the demo runs on vllm serve's defaults and says which"
    assert cli == demo
