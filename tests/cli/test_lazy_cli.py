"""`servesim --help` lists every command without importing one; a command imports only its own stack.

The start-up figures are in benchmarks/startup.py; these tests pin the behaviour that makes them
possible: which heavy libraries a process has imported after a given command line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest

from servesim.cli.main import COMMANDS, load_module_commands

HEAVY = (
    "pandas",
    "numpy",
    "optuna",
    "anthropic",
    "pydantic_ai",
    "scipy",
    "fastapi",
    "textual",
    "rich",
    "ray",
    "dspy",
    "litellm",
    "pyarrow.parquet",
)

PROBE = """
import json, sys
from servesim.cli.main import app
try:
    app(sys.argv[1:], prog_name="servesim")
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)), file=sys.stderr)
"""


def _imported_after(*args: str) -> list[str]:
    res = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = res.stderr.strip().splitlines()[-1]
    out: list[str] = json.loads(last)
    return out


def test_the_command_table_matches_what_the_modules_register() -> None:
    by_module: dict[str, set[str]] = defaultdict(set)
    for name, (module, help_text) in COMMANDS.items():
        by_module[module].add(name)
        assert help_text and len(help_text) < 160
    for module, names in by_module.items():
        assert set(load_module_commands(module)) == names, module


def test_help_imports_no_command_module_nor_heavy_library() -> None:
    assert _imported_after("--help") == []


def test_help_lists_every_command() -> None:
    res = subprocess.run(
        [sys.executable, "-c", "from servesim.cli.main import app; app(['--help'])"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    for name in COMMANDS:
        assert f"  {name} " in res.stdout, name


@pytest.mark.parametrize(
    ("args", "absent"),
    [
        (["simulate", "--help"], ("optuna", "anthropic", "pydantic_ai", "fastapi", "textual")),
        (["reschedule", "--help"], ("optuna", "anthropic", "pydantic_ai", "fastapi", "textual")),
        (["recover", "--help"], ("optuna", "anthropic", "pydantic_ai", "fastapi", "textual")),
        (["advise", "--help"], ("dspy", "litellm")),
        (["emulate", "--help"], ("ray", "optuna", "anthropic", "pydantic_ai", "fastapi", "textual")),
        # Parquet's reader and writer load when a trace is Parquet (0.04 s of every start else)
        (["simulate", "examples/trace.jsonl", "--json"], ("pyarrow.parquet", "optuna", "fastapi")),
    ],
)
def test_a_command_imports_only_its_own_stack(args: list[str], absent: tuple[str, ...]) -> None:
    loaded = _imported_after(*args)
    assert not set(loaded) & set(absent), loaded


def test_advice_without_a_key_never_imports_dspy_nor_anthropics_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No key: the rules answer, and DSPy / LiteLLM, Anthropic's client and pydantic-ai (seconds
    of imports: `advise` took 3.0 CPU-s with the last two, 0.9 without) stay unloaded."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    loaded = _imported_after("advise", "examples/inputs/s002_a.input.json", "--json")
    assert not {"dspy", "litellm", "anthropic", "pydantic_ai"} & set(loaded), loaded
