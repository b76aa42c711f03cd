"""The modules of the compiled engine core and the digest of what each is built from.

Standard library only and free of side effects: ``setup.py`` loads this file on its own (the
package is not importable while it is being built), and ``_native`` checks an installed build
against it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

COMPILED_MODULES = (
    "request",
    "waiting_queue",
    "block_pool",
    "kv_cache_manager",
    "decode_group",
    "step_plan",
    "scheduler",
    "trace_arrays",
    "recorder",
    "spec_draws",
    "engine",
    "stretch_cursor",
    "kv_hybrid",
)


def source_digest(directory: Path, module: str) -> str:
    """sha256 of a compiled module's ``.py`` plus its ``.pxd`` (the Cython types), if any."""
    h = hashlib.sha256((directory / f"{module}.py").read_bytes())
    pxd = directory / f"{module}.pxd"
    if pxd.exists():
        h.update(pxd.read_bytes())
    return h.hexdigest()
