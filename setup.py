"""Builds the engine's compiled core: the hot-loop modules of ``servesim.engine`` compiled by Cython.

The ``.py`` modules stay the pure-Python reference; Cython compiles those same files (typed by the
``.pxd`` files beside them) into extension modules that Python imports in their place. A build
that fails leaves the pure-Python modules in charge (the extensions are optional), and
``SERVESIM_PURE_PYTHON=1`` forces them at run time. ``_native_build.json`` records the source
hashes each extension was built from, so a stale build (a ``.py`` edited since) is never used.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ENGINE = Path("src/servesim/engine")
# Keep in step with servesim/engine/_native.py: COMPILED_MODULES.
COMPILED_MODULES = (
    "request",
    "waiting_queue",
    "block_pool",
    "kv_cache_manager",
    "decode_group",
    "scheduler",
    "engine",
)


def source_digest(module: str) -> str:
    """What an extension is built from: its module, plus its .pxd when there is one."""
    h = hashlib.sha256((ENGINE / f"{module}.py").read_bytes())
    pxd = ENGINE / f"{module}.pxd"
    if pxd.exists():
        h.update(pxd.read_bytes())
    return h.hexdigest()


class BuildEngineCore(build_ext):
    """build_ext that also writes the source hashes next to the extensions it built."""

    def run(self) -> None:
        super().run()
        built = {}
        target_dir = None
        for ext in self.extensions:
            path = Path(self.get_ext_fullpath(ext.name))
            if path.exists():
                built[ext.name.rsplit(".", 1)[1]] = source_digest(ext.name.rsplit(".", 1)[1])
                target_dir = path.parent
        if target_dir is not None:
            (target_dir / "_native_build.json").write_text(json.dumps(built, indent=1, sort_keys=True) + "\n")


extensions = [
    Extension(f"servesim.engine.{m}", [str(ENGINE / f"{m}.py")], optional=True) for m in COMPILED_MODULES
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": 3, "annotation_typing": False},
        quiet=True,
    ),
    cmdclass={"build_ext": BuildEngineCore},
)
