"""Where the vLLM 0.33 oracle's Python is, for every test that runs vLLM itself: the one rule of
``tools/check_vllm_commands.py`` (``VLLM_ORACLE_PYTHON``, else the virtualenv in the cache folder;
tools/oracle/README.md says how it is made). A module of its own: tests import it by name."""

from __future__ import annotations

import os
from pathlib import Path


def oracle_python() -> Path:
    env = os.environ.get("VLLM_ORACLE_PYTHON")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(env) if env else base / "vllm-oracle-venv" / "bin" / "python"
