"""Builds the engine's compiled core: the hot-loop modules of ``servesim.engine`` compiled by Cython.

The ``.py`` modules stay the pure-Python reference; Cython compiles those same files (typed by the
``.pxd`` files beside them) into extension modules that Python imports in their place. A build
that fails leaves the pure-Python modules in charge (the extensions are optional), and
``SERVESIM_PURE_PYTHON=1`` forces them at run time. ``_native_build.json`` records the source
hashes each extension was built from, so a stale build (a ``.py`` edited since) is never used.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ENGINE = Path("src/servesim/engine")


def _core_sources() -> ModuleType:
    """servesim/engine/_core_sources.py, loaded on its own (the package is not importable yet)."""
    spec = importlib.util.spec_from_file_location("_core_sources", ENGINE / "_core_sources.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SOURCES = _core_sources()
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class BuildEngineCore(build_ext):
    """build_ext that also writes the source hashes next to the extensions it built, and that
    leaves the pure-Python module in place of any extension it cannot build: setuptools'
    ``optional`` covers compile errors but not a missing compiler (an ``OSError``)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        # The modules compile independently: one C compiler per core (a fresh clone's `make
        # sync` spent a minute compiling them one after another on the 2-core machine).
        if self.parallel is None:
            self.parallel = _CORES

    def build_extension(self, ext: Extension) -> None:
        if self.compiler.compiler_type == "unix":
            # The core's float arithmetic must give the pure-Python reference's results to the
            # bit: no fused multiply-adds, which GCC and Clang form when the target has FMA.
            # No debug info (Python's CFLAGS carry -g): a quarter of the compile time, unused.
            ext.extra_compile_args = [*ext.extra_compile_args, "-ffp-contract=off", "-g0"]
        try:
            super().build_extension(ext)
        except Exception as exc:  # any failure at all: the reference module stays
            self.warn(f"{ext.name} not compiled ({exc}); the engine runs its pure-Python core")

    def run(self) -> None:
        super().run()
        built = {}
        target_dir = None
        for ext in self.extensions:
            path = Path(self.get_ext_fullpath(ext.name))
            if path.exists():
                module = ext.name.rsplit(".", 1)[1]
                built[module] = SOURCES.source_digest(ENGINE, module)
                target_dir = path.parent
        if target_dir is not None:
            (target_dir / "_native_build.json").write_text(json.dumps(built, indent=1, sort_keys=True) + "\n")


def _c_compiler_found() -> bool:
    """Whether the C compiler the build would call (``$CC``, else Python's own) is there. Where it
    is not, Cython's translation of the modules (20 of the 30 CPU-s of a wheel's build on the
    2-core machine) would be thrown away: the build skips it and ships the pure-Python core."""
    if os.name == "nt":  # MSVC is found by setuptools itself, not through $CC: let it try
        return True
    words = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    return bool(words) and shutil.which(words[0]) is not None


extensions = [
    Extension(f"servesim.engine.{m}", [str(ENGINE / f"{m}.py")], optional=True)
    for m in SOURCES.COMPILED_MODULES
]
if not _c_compiler_found():
    print("no C compiler found: the engine runs its pure-Python core", file=sys.stderr)
    extensions = []

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": 3, "annotation_typing": False},
        quiet=True,
        nthreads=_CORES,  # Cython's translation of each module, in parallel as well
    )
    if extensions
    else [],
    cmdclass={"build_ext": BuildEngineCore},
)
