"""docs/kv-capacity.md, the table of servesim's KV blocks against vLLM 0.33's own planning for every
catalog model x GPU x TP that fits (issue 50), is current: its rows are exactly the deployments
that fit today, servesim's figures in it are what the memory model gives now, and every row's
vLLM figure (written by tools/kv_capacity_table.py from vLLM's planning of the same bytes)
equals servesim's. A change to the memory model, the catalog or a KV layout fails here until the
tool is run again, which asks vLLM afresh.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "kv-capacity.md"


def _tool() -> ModuleType:
    path = ROOT / "tools" / "kv_capacity_table.py"
    spec = importlib.util.spec_from_file_location("kv_capacity_table", path)
    if spec is None or spec.loader is None:
        raise ImportError("tools/kv_capacity_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _doc_rows() -> dict[tuple[str, str, int], tuple[int, int, int, int]]:
    """(model, GPU, TP) -> (block size, KV bytes, servesim blocks, vLLM blocks), from the doc."""
    out = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 10 or not re.fullmatch(r"\d+", cells[2]):
            continue
        num = [int(c.replace(",", "")) for c in (cells[3], cells[6], cells[7], cells[8])]
        out[(cells[0], cells[1], int(cells[2]))] = (num[0], num[1], num[2], num[3])
    return out


def test_the_table_is_every_deployment_that_fits_with_todays_figures() -> None:
    doc = _doc_rows()
    now = {(r["model"], r["gpu"], r["tp"]): r for r in _tool().rows()}
    assert len(now) > 1000  # every catalog model on every GPU it fits
    assert set(doc) == set(now), (
        f"docs/kv-capacity.md is stale (run tools/kv_capacity_table.py): missing "
        f"{sorted(set(now) - set(doc))[:5]}, extra {sorted(set(doc) - set(now))[:5]}"
    )
    for key, (block, kv_bytes, ours, _) in doc.items():
        r = now[key]
        assert (block, kv_bytes, ours) == (r["block_size"], r["kv_cache_bytes"], r["num_gpu_blocks"]), key


def test_every_row_equals_vllms_planning() -> None:
    doc = _doc_rows()
    text = DOC.read_text(encoding="utf-8")
    assert f"**{len(doc)} of {len(doc)} rows equal.**" in text
    assert {k: v[2] for k, v in doc.items()} == {k: v[3] for k, v in doc.items()}
    assert "**no**" not in text
