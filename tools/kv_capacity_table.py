#!/usr/bin/env python3
"""The KV-capacity table (issue 50): for every catalog model x GPU x TP that fits, servesim's
``num_gpu_blocks`` against vLLM 0.33's own KV cache planning from the same config and the same
memory budget, written to docs/kv-capacity.md.

    .venv/bin/python tools/kv_capacity_table.py                  # writes docs/kv-capacity.md
    .venv/bin/python tools/kv_capacity_table.py --out -          # the table on stdout
    .venv/bin/python tools/kv_capacity_table.py --oracle PYTHON  # another vLLM virtualenv

Each row is one deployment at fixed settings (``SETTINGS``): servesim's memory model
(``servesim.perf.memory.kv_capacity``) gives the KV bytes per GPU and the blocks; vLLM's
planning (``get_kv_cache_groups`` / ``get_kv_cache_config_from_groups``, run by
tools/oracle/hybrid_kv_oracle.py, or mla_kv_oracle.py for MLA models, in the oracle's
virtualenv: tools/oracle/README.md) is handed the model's config and that same byte count, and
says how many blocks it makes of them. So a row checks the KV layout (groups, page size, KV heads
per rank, head size, layers, latent width), not the memory profiling that gives the budget. The
config is the model's own config.json where servesim ships it (src/servesim/data/perf/
hf_configs/; Llama-4-Scout's as vLLM logged it, tests/fixtures/sim2real/17.json); for the other
models it is built from the catalog row (a Llama-style config of its layers, heads, KV heads and
head size), which checks the arithmetic but not the row's transcription of the card.

tests/perf/test_kv_capacity_table.py recomputes servesim's column for every row of the doc (and
that the rows are every deployment that fits), so the table cannot go stale silently.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))

from check_vllm_commands import default_oracle_python  # noqa: E402  (VLLM_ORACLE_PYTHON, else the cache's)

#: The settings every row is sized at (vLLM's defaults on a large GPU, a 32k context).
SETTINGS = {"gpu_memory_utilization": 0.9, "max_model_len": 32768, "max_num_batched_tokens": 8192}
TPS = (1, 2, 4, 8)
CONFIGS = ROOT / "src" / "servesim" / "data" / "perf" / "hf_configs"
SCOUT = ROOT / "tests" / "fixtures" / "sim2real" / "17.json"


def rows() -> list[dict[str, Any]]:
    """Every (model, GPU, TP) of the catalog whose weights and one max-length sequence fit, with
    servesim's KV capacity at ``SETTINGS`` (block size: the one vLLM picks for it)."""
    import warnings

    from servesim.errors import user_errors
    from servesim.perf.catalog import load_catalog
    from servesim.perf.memory import kv_capacity
    from servesim.perf.serve_defaults import vllm_default_block_size

    cat = load_catalog()
    out: list[dict[str, Any]] = []
    for model in cat.models:
        for gpu in cat.gpus:
            for tp in TPS:
                block = vllm_default_block_size(model, gpu) or 16
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        cap = kv_capacity(model, gpu, tp, block_size=block, **SETTINGS)  # type: ignore[arg-type]
                except user_errors():
                    continue  # does not fit, or refused (a layer type or format not modelled here)
                if cap.max_concurrency < 1:
                    continue  # not one max-length sequence: vLLM refuses to start
                out.append(
                    {
                        "model": model,
                        "gpu": gpu,
                        "tp": tp,
                        # vLLM's: raised for a model with state layers (a page holds a state)
                        "block_size": cap.block_size,
                        "kv_cache_bytes": cap.kv_cache_bytes,
                        "num_gpu_blocks": cap.num_gpu_blocks,
                        "groups": len(cap.kv_cache_groups or ()) or 1,
                    }
                )
    return out


def config_of(model: str) -> tuple[dict[str, Any], str]:
    """The config vLLM is handed for ``model``, and where it came from."""
    from servesim.perf.catalog import load_catalog

    shipped = CONFIGS / f"{model}.json"
    if shipped.exists():
        return json.loads(shipped.read_text(encoding="utf-8")), "config.json"
    if model.startswith("llama-4-scout"):
        return json.loads(SCOUT.read_text(encoding="utf-8"))["hf_config"], "config.json (vLLM's log)"
    m = load_catalog().model(model)
    return (
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": m.hidden_size,
            "intermediate_size": m.intermediate_size,
            "num_hidden_layers": m.num_layers,
            "num_attention_heads": m.num_attention_heads,
            "num_key_value_heads": m.num_kv_heads,
            "head_dim": m.head_dim,
            "vocab_size": m.vocab_size,
            "max_position_embeddings": max(m.max_position_embeddings, SETTINGS["max_model_len"]),
            "torch_dtype": m.dtype,
        },
        "catalog row",
    )


def vllm_blocks(table: list[dict[str, Any]], python: Path) -> list[int]:
    """vLLM's ``num_blocks`` for each row, from its own planning of the same bytes."""
    from servesim.perf.catalog import load_catalog

    cat = load_catalog()
    jobs: dict[str, list[int]] = {"hybrid_kv_oracle.py": [], "mla_kv_oracle.py": []}
    items: dict[str, list[dict[str, Any]]] = {"hybrid_kv_oracle.py": [], "mla_kv_oracle.py": []}
    for i, row in enumerate(table):
        tool = "mla_kv_oracle.py" if cat.model(row["model"]).is_mla else "hybrid_kv_oracle.py"
        jobs[tool].append(i)
        items[tool].append(
            {
                "config": config_of(row["model"])[0],
                "tp": row["tp"],
                "block_size": row["block_size"],
                "kv_cache_dtype": "auto",
                "available_memory": row["kv_cache_bytes"],
                "max_model_len": SETTINGS["max_model_len"],
                "max_num_batched_tokens": SETTINGS["max_num_batched_tokens"],
            }
        )
    out = [0] * len(table)
    for tool, idx in jobs.items():
        if not idx:
            continue
        run = subprocess.run(
            [str(python), str(ROOT / "tools" / "oracle" / tool)],
            input=json.dumps(items[tool]),
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if run.returncode != 0:
            raise SystemExit(f"{tool} failed:\n{run.stderr[-3000:]}")
        answers = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
        for i, got in zip(idx, answers, strict=True):
            out[i] = int(got["num_blocks"])
    return out


def markdown(table: list[dict[str, Any]], theirs: list[int]) -> str:
    equal = sum(r["num_gpu_blocks"] == v for r, v in zip(table, theirs, strict=True))
    lines = [
        "# KV capacity: servesim against vLLM's own planning",
        "",
        "Generated by `tools/kv_capacity_table.py` (its docstring says how); do not edit by hand.",
        f"Every catalog model x GPU x TP in {{{', '.join(map(str, TPS))}}} whose weights and one "
        f"{SETTINGS['max_model_len']:,}-token sequence fit, at gpu_memory_utilization "
        f"{SETTINGS['gpu_memory_utilization']}, max_num_batched_tokens "
        f"{SETTINGS['max_num_batched_tokens']:,}, the model's KV dtype and vLLM's block size for it.",
        "`KV bytes` is servesim's KV cache per GPU; `vLLM blocks` is what vLLM 0.33's KV cache "
        "planning makes of exactly those bytes for that config (the memory profiling that gives "
        "the bytes is not part of the check: docs/perf.md compares it with vLLM's logs).",
        "",
        f"**{equal} of {len(table)} rows equal.**",
        "",
        "| model | GPU | TP | block | groups | config | KV bytes per GPU | servesim blocks | vLLM blocks "
        "| equal |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    for r, v in zip(table, theirs, strict=True):
        lines.append(
            f"| {r['model']} | {r['gpu']} | {r['tp']} | {r['block_size']} | {r['groups']} | "
            f"{config_of(r['model'])[1]} | {r['kv_cache_bytes']:,} | {r['num_gpu_blocks']:,} | {v:,} | "
            f"{'yes' if r['num_gpu_blocks'] == v else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--oracle", type=Path, default=default_oracle_python(), help="vLLM's virtualenv Python")
    ap.add_argument("--out", default=str(ROOT / "docs" / "kv-capacity.md"), help="file, or - for stdout")
    args = ap.parse_args()
    if not args.oracle.exists():
        raise SystemExit(f"no vLLM oracle virtualenv at {args.oracle} (tools/oracle/README.md)")
    table = rows()
    text = markdown(table, vllm_blocks(table, args.oracle))
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"{len(table)} rows written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
