"""Which engine core runs: the compiled one (Cython, built by setup.py) or the pure-Python reference.

The hot-loop modules exist once, as ``.py`` files: they are the reference, and Cython compiles
those same files into extension modules beside them, which Python would import instead. This
module, imported by ``servesim.engine`` before any of them, decides once per process:

* ``SERVESIM_PURE_PYTHON=1`` forces the reference;
* so does a missing build (no C compiler at install time) or a stale one (a ``.py`` or ``.pxd``
  edited since it was built: the extension would run old code), with a warning for the latter;
* otherwise the compiled modules run. Both give byte-identical results (``make unit`` runs the
  engine's oracle and fast-path tests on each).

The reference is chosen by putting a finder in front of the import system that loads these
modules from their ``.py`` source.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

from servesim.engine._core_sources import COMPILED_MODULES, source_digest

ENV_PURE = "SERVESIM_PURE_PYTHON"
_PACKAGE = __name__.rsplit(".", 1)[0]
_HERE = Path(__file__).parent


def _digest(module: str) -> str:
    return source_digest(_HERE, module)


def _has_extension(module: str) -> bool:
    return any((_HERE / f"{module}{suffix}").exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def _why_pure() -> str | None:
    """None when the compiled core can run, else why the reference runs."""
    if os.environ.get(ENV_PURE, "").strip() not in ("", "0"):
        return f"{ENV_PURE} is set"
    try:
        built = json.loads((_HERE / "_native_build.json").read_text())
    except (OSError, ValueError):
        return "the compiled core is not built"
    missing = [m for m in COMPILED_MODULES if m not in built or not _has_extension(m)]
    if missing:
        return f"the compiled core is not built ({', '.join(missing)} missing)"
    stale = [m for m in COMPILED_MODULES if built[m] != _digest(m)]
    if stale:
        reason = f"the compiled core is stale ({', '.join(stale)} changed since it was built)"
        warnings.warn(
            f"servesim: {reason}; running the pure-Python engine (rebuild: `make sync` or `uv sync`)",
            RuntimeWarning,
            stacklevel=2,
        )
        return reason
    return None


class _ReferenceFinder(importlib.abc.MetaPathFinder):
    """Loads the compiled modules from their ``.py`` source instead of the extension."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != _PACKAGE or name not in COMPILED_MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, _HERE / f"{name}.py")


PURE_REASON = _why_pure()
if PURE_REASON is not None and not any(isinstance(f, _ReferenceFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _ReferenceFinder())


def core() -> str:
    """``"compiled"`` or ``"pure-python"``: the engine core this process runs (read from the
    modules actually imported, so a test can trust it)."""
    for name in COMPILED_MODULES:
        module = sys.modules.get(f"{_PACKAGE}.{name}")
        if module is not None and not str(module.__file__).endswith(".py"):
            return "compiled"
    return "pure-python"


def describe() -> str:
    """One line for people: which core runs, and why the reference if it does."""
    return "compiled (Cython)" if core() == "compiled" else f"pure Python ({PURE_REASON or 'as built'})"
