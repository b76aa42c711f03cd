#!/usr/bin/env python3
"""Replay stored oracle cases of every kind (plain, offload, P/D, speculative) and say, per case,
whether the schedule is identical to the stored one or how it differs.

Two engines can replay a case (``--against``):

* ``vllm``: vLLM 0.33's own scheduler again, through this folder's ``vllm_oracle.py`` (the oracle
  virtualenv's python): the stored case is reproduced from its trace and config, step by step.
  Checks that a case (committed, or freshly made with ``make_*_cases.py --out DIR``) is what vLLM
  does, and that the harness still makes it.
* ``servesim``: servesim's engine (the project's environment), fast and naive engines for a plain
  case, the connector/drafter replays of ``tests/engine/oracle_replay.py`` for the others.

The default is ``vllm`` when this python can import vLLM, else ``servesim``. Arguments are case
files (``*.json.gz``) or folders of them. Usage (from the checkout's root)::

    ~/.cache/vllm-oracle-venv/bin/python tools/oracle/replay_cases.py tests/engine/oracle_pd_cases
    .tools/bin/uv run --frozen python tools/oracle/replay_cases.py tests/engine/oracle_offload_cases

Exit status 0 when every case is identical, 1 otherwise.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_cases import load_oracle, plain_steps, run_oracle  # noqa: E402

KINDS = ("plain", "offload", "pd", "spec")


def load_case(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)  # type: ignore[no-any-return]


def case_kind(case: dict[str, Any]) -> str:
    """Which maker made the case: speculative, P/D, offload, pipeline-parallel or plain."""
    if int(case["config"].get("pipeline_parallel_size", 1)) > 1:
        return "pp"
    if case.get("speculative"):
        return "spec"
    if case["config"].get("pd_connector"):
        return "pd"
    if case["config"].get("kv_offload_chunks") is not None:
        return "offload"
    return "plain"


def case_paths(args: list[Path]) -> list[Path]:
    paths: list[Path] = []
    for a in args:
        if a.is_dir():
            paths += sorted(a.glob("*.json.gz"))
        elif a.is_file():
            paths.append(a)
        else:
            raise SystemExit(f"no such case file or folder: {a}")
    return paths


def _first_differences(want: list, got: list, limit: int = 5) -> list[str]:
    diffs = []
    for i in range(max(len(want), len(got))):
        w = want[i] if i < len(want) else None
        g = got[i] if i < len(got) else None
        if w != g:
            diffs.append(f"row {i}: stored {w} replayed {g}")
            if len(diffs) >= limit:
                break
    if len(want) != len(got):
        diffs.append(f"{len(want)} stored steps, {len(got)} replayed")
    return diffs


def vllm_replayer() -> Callable[[dict[str, Any]], list[str]]:
    """Replays a case through vLLM's scheduler (this folder's harness) and compares its steps."""
    os.environ["VLLM_LOGGING_LEVEL"] = "ERROR"  # vLLM warns on every store a full CPU tier refuses
    oracle = load_oracle()
    from make_offload_cases import offload_steps
    from make_pd_cases import pd_steps
    from make_spec_cases import draft_lengths, spec_steps

    builders: dict[str, Callable[[list[dict]], list[list]]] = {
        "plain": plain_steps,
        "offload": offload_steps,
        "pd": lambda records: pd_steps(records)[0],
        "spec": spec_steps,
        "pp": plain_steps,
    }
    td = tempfile.mkdtemp(prefix="servesim-replay-")

    def replay(case: dict[str, Any]) -> list[str]:
        spec = dict(case.get("speculative", {}))
        stored_lengths = spec.pop("draft_lengths", None)  # recorded by the run, not a config key
        cfg = {**case["config"], **spec}
        cfg.pop("kv_cache_groups", None)  # a hybrid case's groups are vLLM's output, planned again
        summary, records = run_oracle(oracle, td, case["name"], case["trace"], cfg)
        got = json.loads(json.dumps(builders[case_kind(case)](records)))  # tuples as JSON stores them
        diffs = _first_differences(case["steps"], got)
        if stored_lengths is not None and draft_lengths(records) != stored_lengths:
            diffs.append("draft lengths: the drafter proposed other lengths than stored")
        if summary["total_preemptions"] != case["total_preemptions"]:
            diffs.append(
                f"preemptions: stored {case['total_preemptions']} replayed {summary['total_preemptions']}"
            )
        return diffs

    return replay


def servesim_replayer() -> Callable[[dict[str, Any]], list[str]]:
    """Replays a case through servesim (the committed tests' replays) and lists the differences."""
    sys.path.insert(0, str(HERE.parents[1] / "tests" / "engine"))
    from oracle_replay import replay, replay_offload, replay_pd, replay_pp, replay_spec

    def run(case: dict[str, Any]) -> list[str]:
        kind = case_kind(case)
        if kind == "plain":
            return [f"fast: {d}" for d in replay(case, fast=True)] + [
                f"naive: {d}" for d in replay(case, fast=False)
            ]
        return {"offload": replay_offload, "pd": replay_pd, "spec": replay_spec, "pp": replay_pp}[kind](case)

    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+", type=Path, help="case files (*.json.gz) or folders of them")
    ap.add_argument(
        "--against",
        choices=("vllm", "servesim"),
        default="vllm" if importlib.util.find_spec("vllm") else "servesim",
        help="the engine that replays them (default: vllm where this python has it, else servesim)",
    )
    args = ap.parse_args(argv)
    paths = case_paths(args.cases)
    replay = vllm_replayer() if args.against == "vllm" else servesim_replayer()
    print(f"replaying {len(paths)} cases against {args.against}", flush=True)
    same: Counter[str] = Counter()
    differ: Counter[str] = Counter()
    for p in paths:
        case = load_case(p)
        kind = case_kind(case)
        diffs = replay(case)
        if diffs:
            differ[kind] += 1
            print(f"{case['name']} ({kind}, {len(case['steps'])} steps): different", flush=True)
            for d in diffs[:5]:
                print(f"  {d}")
        else:
            same[kind] += 1
            print(f"{case['name']} ({kind}, {len(case['steps'])} steps): identical", flush=True)
    counts = ", ".join(
        f"{k}: {same[k]} identical, {differ[k]} different" for k in KINDS if same[k] + differ[k]
    )
    print(f"{len(paths)} cases against {args.against}: {counts}")
    return 1 if sum(differ.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
