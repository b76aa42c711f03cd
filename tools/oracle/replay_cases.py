#!/usr/bin/env python3
"""Replay every oracle case in a folder through servesim (fast and naive engines) and list the
differences — for fresh case sets made with ``make_cases.py --seed N --out DIR`` that are not
committed (an independent check beyond the stored cases). Run with the project's environment:

    uv run --frozen python tools/oracle/replay_cases.py DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "engine"))

from oracle_replay import load_case, replay


def main() -> int:
    folder = Path(sys.argv[1])
    paths = sorted(folder.glob("*.json.gz"))
    bad = 0
    for p in paths:
        case = load_case(p)
        for fast in (True, False):
            diffs = replay(case, fast=fast)
            if diffs:
                bad += 1
                print(f"{case['name']} ({'fast' if fast else 'naive'}): {len(diffs)} differences")
                for d in diffs[:5]:
                    print(f"  {d}")
    steps = sum(len(load_case(p)["steps"]) for p in paths)
    print(f"{len(paths)} cases, {steps} steps: {bad} engine runs differ from vLLM")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
