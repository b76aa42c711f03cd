"""Where the vLLM 0.33 oracle's Python is, for every test that runs vLLM itself: the one rule of
``tools/check_vllm_commands.py`` (``VLLM_ORACLE_PYTHON``, else the virtualenv in the cache folder;
tools/oracle/README.md says how it is made). A module of its own: tests import it by name."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "oracle"


def oracle_python() -> Path:
    env = os.environ.get("VLLM_ORACLE_PYTHON")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(env) if env else base / "vllm-oracle-venv" / "bin" / "python"


def run_oracle_tool(tool: str, items: list[dict[str, Any]], timeout: int = 600) -> list[dict[str, Any]]:
    """``tools/oracle/<tool>`` run by vLLM's Python on ``items`` (a JSON list on stdin): its JSON
    lines, one per item. Skips the calling test where the virtualenv is not made."""
    python = oracle_python()
    if not python.exists():
        pytest.skip(f"no vLLM oracle virtualenv at {python} (tools/oracle/README.md)")
    run = subprocess.run(
        [str(python), str(TOOLS / tool)],
        input=json.dumps(items),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
