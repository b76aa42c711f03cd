"""Markdown tables of a leave-one-out sim2real run, as docs/perf.md shows them.

    servesim sim2real tests/fixtures/sim2real --out pred.json --calibrate loo --workers 2 --json > loo.json
    python tools/sim2real_loo_tables.py loo.json tests/fixtures/sim2real

Per run: the APE of mean E2E, TTFT and ITL (stage -1) predicted by the profile fitted without
that run, and beside it the all-data fit's (in sample). Per group (model, TP, workload, MoE or
dense): the medians of the same. The leave-one-out figure is the honest one; the gap to the
in-sample one is what fitting on the run itself was worth.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from servesim.perf.sim2real import load_experiments
from servesim.perf.sim2real_groups import experiment_groups

METRICS = ("e2e_mean", "ttft_mean", "itl_mean")


def _cell(loo: dict[str, float], ins: dict[str, float], m: str) -> str:
    if m not in loo:
        return "–"
    return f"{loo[m]:.1f} ({ins[m]:.1f})" if m in ins else f"{loo[m]:.1f}"


def main(doc_path: str, exp_dir: str) -> None:
    doc = json.loads(Path(doc_path).read_text(encoding="utf-8"))
    loo, ins = doc["ape"], doc.get("in_sample_ape") or {}
    exps = load_experiments(exp_dir)
    print("| run | model | TP | workload | e2e_mean | ttft_mean | itl_mean |")
    print("|---|---|---|---|---|---|---|")
    for e in exps:
        g = experiment_groups(e)
        cells = " | ".join(_cell(loo.get(e.id, {}), ins.get(e.id, {}), m) for m in METRICS)
        print(f"| {e.id} | {g['model'].split('/')[-1]} | {e.tp} | {g['workload']} | {cells} |")
    for label, table in (("median", statistics.median), ("mean", statistics.fmean)):
        cells = []
        for m in METRICS:
            a = [loo[i][m] for i in loo if m in loo[i]]
            b = [ins[i][m] for i in ins if m in ins[i]]
            cells.append(f"**{table(a):.1f}** ({table(b):.1f})" if b else f"**{table(a):.1f}**")
        print(f"| **{label}** | | | | {' | '.join(cells)} |")
    print()
    print("| group | runs | e2e_mean | ttft_mean | itl_mean |")
    print("|---|---|---|---|---|")
    for kind, rows in doc["groups"].items():
        for name, row in rows.items():
            other = (doc.get("in_sample_groups") or {}).get(kind, {}).get(name, {})
            cells = " | ".join(_cell(row, other, m) for m in METRICS)
            print(f"| {kind}: {name.split('/')[-1]} | {row['n']:.0f} | {cells} |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tools/sim2real_loo_tables.py LOO.json EXPERIMENT_DIR")
    main(sys.argv[1], sys.argv[2])
