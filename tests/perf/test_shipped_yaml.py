"""The shipped YAML (catalog, GPUs, links, prices, draft heads) reads the same through libyaml's
loader, which servesim uses for it (``servesim.perf.shipped.shipped_yaml``: a tenth of the pure-Python
parse, which took 0.12 CPU-s of every command that names a model), as through ``yaml.safe_load``.

Why: the two loaders are separate implementations; a construct one of them reads otherwise (a
timestamp, a float spelling, a merge key) would change a model's figures without an error.
"""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from servesim.perf.shipped import shipped_yaml

SHIPPED = sorted(
    p.name for p in (resources.files("servesim") / "data" / "perf").iterdir() if p.name.endswith(".yaml")
)


def test_every_shipped_yaml_file_is_covered() -> None:
    assert {"models.yaml", "gpus.yaml", "links.yaml", "gpu_prices.yaml", "speculators.yaml"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_fast_loader_reads_what_safe_load_reads(name: str) -> None:
    text = (resources.files("servesim") / "data" / "perf" / name).read_text(encoding="utf-8")
    fast = shipped_yaml(name)
    slow = yaml.safe_load(text)
    assert fast == slow
    assert repr(fast) == repr(slow)  # the same types too (1 vs 1.0, a date vs a string)
