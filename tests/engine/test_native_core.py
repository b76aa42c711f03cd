"""The compiled engine core (Cython over the engine's own ``.py`` modules, built by setup.py) and the
pure-Python reference give byte-identical results; the build runs the compiled one unless
``SERVESIM_PURE_PYTHON`` asks for the reference; a missing or stale build falls back to it.

``make unit`` also runs all of tests/engine (the vLLM oracle cases, the fast == naive property
tests) a second time with ``SERVESIM_PURE_PYTHON=1``, so both cores pass every one of them.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from servesim.engine import _native

HERE = Path(__file__).parent
PURE_FORCED = os.environ.get(_native.ENV_PURE, "").strip() not in ("", "0")


def c_compiler() -> str | None:
    """The C compiler setuptools would build the core with (``$CC``, else Python's own), if any."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(cc)
    return shutil.which(words[0]) if words else None


def digest(pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != _native.ENV_PURE}
    if pure:
        env[_native.ENV_PURE] = "1"
    out = subprocess.run(
        [sys.executable, str(HERE / "native_digest.py")],
        env={**env, "PYTHONPATH": str(HERE)},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, str] = json.loads(out.stdout)
    return result


@pytest.mark.skipif(PURE_FORCED, reason="this run tests the pure-Python reference")
@pytest.mark.skipif(c_compiler() is None, reason="no C compiler here: setup installs the pure-Python core")
def test_the_installed_build_runs_the_compiled_core() -> None:
    assert _native.core() == "compiled", (
        f"the engine runs as {_native.describe()}: the build did not compile it (`make sync`)"
    )
    import servesim.engine.engine as engine_module

    assert not str(engine_module.__file__).endswith(".py")


@pytest.mark.skipif(PURE_FORCED, reason="the main pass compares both cores (each subprocess picks its own)")
def test_compiled_and_pure_python_cores_give_identical_bytes() -> None:
    pure = digest(pure=True)
    assert pure["core"] == "pure-python"
    compiled = digest(pure=False)
    if not PURE_FORCED:
        assert compiled["core"] == "compiled"
    assert compiled["digest"] == pure["digest"]


def test_the_reference_is_chosen_when_the_build_is_missing_or_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_native.ENV_PURE, raising=False)
    monkeypatch.setattr(_native, "_HERE", tmp_path)
    for m in _native.COMPILED_MODULES:
        (tmp_path / f"{m}.py").write_text(f"# {m}\n")
    assert _native._why_pure() == "the compiled core is not built"
    suffix = _native.importlib.machinery.EXTENSION_SUFFIXES[0]
    for m in _native.COMPILED_MODULES:
        (tmp_path / f"{m}{suffix}").write_bytes(b"")
    built = {m: _native._digest(m) for m in _native.COMPILED_MODULES}
    (tmp_path / "_native_build.json").write_text(json.dumps(built))
    assert _native._why_pure() is None  # built from exactly these sources
    (tmp_path / "scheduler.py").write_text("# edited since the build\n")
    with pytest.warns(RuntimeWarning, match="stale"):
        reason = _native._why_pure()
    assert reason is not None and "scheduler" in reason
    (tmp_path / "scheduler.py").write_text("# scheduler\n")
    monkeypatch.setenv(_native.ENV_PURE, "1")
    assert _native._why_pure() == f"{_native.ENV_PURE} is set"
