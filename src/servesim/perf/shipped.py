"""The YAML files servesim ships (``servesim/data/perf``: the catalog, links, prices, draft heads).

They are parsed with libyaml's safe loader where PyYAML was built with it (its wheels are): the
same documents as ``yaml.safe_load`` (tests/perf/test_shipped_yaml.py), a tenth of the time. The
shipped catalog took 0.12 of a ``servesim simulate``'s 1.9 CPU-s to parse in pure Python, and
every command that names a model or a GPU reads it. Users' files keep ``yaml.safe_load`` and its
messages.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

_FAST_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def shipped_yaml(name: str) -> Any:
    """The shipped ``servesim/data/perf/<name>``, parsed."""
    text = (resources.files("servesim") / "data" / "perf" / name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=_FAST_SAFE_LOADER)  # a safe loader (C or Python)
