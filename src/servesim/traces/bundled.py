"""Real traces shipped inside the package, addressable by short names (``azure-conv``...).

They live under ``servesim/data/traces/`` so that they are in the wheel and the product never
needs a network or a machine-specific path. Licences: see the ATTRIBUTION.md next to them.
"""

from __future__ import annotations

import os
from pathlib import Path

from servesim.errors import UnknownNameError, shown

_DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "traces"

#: Short name -> path relative to ``servesim/data/traces``.
BUNDLED_TRACES: dict[str, str] = {
    "azure-code": "azure-llm-2023/AzureLLMInferenceTrace_code.csv",
    "azure-conv": "azure-llm-2023/AzureLLMInferenceTrace_conv.csv",
}


def bundled_trace_path(name: str) -> Path:
    """Path of a bundled trace by short name; ``UnknownNameError`` (a ``KeyError``) lists the known names."""
    try:
        rel = BUNDLED_TRACES[name]
    except KeyError:
        raise UnknownNameError(
            f"unknown bundled trace {shown(name)}; known: {', '.join(sorted(BUNDLED_TRACES))}"
        ) from None
    return _DATA_DIR / rel


def resolve_trace_path(source: str | os.PathLike[str]) -> Path:
    """A file path, or a bundled trace's short name when no file of that name exists."""
    path = Path(source)
    if not path.exists() and str(source) in BUNDLED_TRACES:
        return bundled_trace_path(str(source))
    return path
