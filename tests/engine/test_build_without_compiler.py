"""A machine without a C compiler still installs servesim: the build leaves the pure-Python engine
core in place of the extensions it cannot compile (setuptools' ``optional`` alone lets a missing
compiler fail the whole install), and that core gives the same results."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".tools" / "bin" / "uv"


@pytest.mark.slow
@pytest.mark.skipif(not UV.exists(), reason="needs the checkout's uv (make sync installs it)")
@pytest.mark.skipif(
    os.environ.get("SERVESIM_PURE_PYTHON", "").strip() not in ("", "0"),
    reason="the build does not depend on the core the tests run: the main pass builds it",
)
def test_a_wheel_builds_without_a_c_compiler_and_ships_the_pure_python_core(tmp_path: Path) -> None:
    src = tmp_path / "checkout"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "src",
        src / "src",
        ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__", "_native_build.json", "*.egg-info"),
    )
    out = tmp_path / "dist"
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc"), "UV_NO_PROGRESS": "1"}
    proc = subprocess.run(
        [str(UV), "build", "--wheel", "--out-dir", str(out), str(src)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "the engine runs its pure-Python core" in proc.stderr + proc.stdout
    (wheel,) = out.glob("servesim-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "servesim/engine/engine.py" in names and "servesim/engine/block_pool.py" in names
    assert not [n for n in names if n.endswith(".so")], "an extension was built without a compiler"
