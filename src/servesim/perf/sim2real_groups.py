"""sim2real errors grouped by what a run shares with others: model, TP degree, workload, MoE or dense.

A median over all runs hides where the timing model is wrong; the same errors grouped by the
deployment's shape say whether a term of the model (the TP all-reduces, the MoE experts, a
workload's context lengths) is the cause, rather than one run. Used for the leave-one-out
report (``servesim sim2real --calibrate loo``), where each run's error is out of sample and the
all-data fit's in-sample error stands beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping

from servesim.perf.sim2real import Sim2RealExperiment

#: The metrics the groups summarize (the issue's targets: mean E2E, TTFT and ITL).
GROUP_METRICS = ("e2e_mean", "ttft_mean", "itl_mean")

#: Group kinds, in the order reports list them.
GROUP_KINDS = ("model", "tp", "workload", "architecture")


def experiment_groups(exp: Sim2RealExperiment) -> dict[str, str]:
    """``{kind: group}`` of one run: its model's name, ``TP<n>``, its workload's name (the
    experiment's ``workload_name``, ``unnamed`` if absent) and ``moe`` or ``dense``."""
    spec = exp.model_spec()
    return {
        "model": spec.name,
        "tp": f"TP{exp.tp}",
        "workload": str(exp.raw.get("workload_name") or "unnamed"),
        "architecture": "moe" if spec.num_moe_layers else "dense",
    }


def group_medians(
    apes: Mapping[str, Mapping[str, float]],
    experiments: Iterable[Sim2RealExperiment],
    metrics: Iterable[str] = GROUP_METRICS,
) -> dict[str, dict[str, dict[str, float]]]:
    """``{kind: {group: {"n": runs, metric: median APE %}}}`` over the runs in ``apes``."""
    names = list(metrics)
    members: dict[str, dict[str, list[str]]] = {k: {} for k in GROUP_KINDS}
    for e in experiments:
        if e.id not in apes:
            continue
        for kind, group in experiment_groups(e).items():
            members[kind].setdefault(group, []).append(e.id)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for kind in GROUP_KINDS:
        rows: dict[str, dict[str, float]] = {}
        for group, ids in sorted(members[kind].items()):
            row: dict[str, float] = {"n": float(len(ids))}
            for m in names:
                vals = [apes[i][m] for i in ids if m in apes[i]]
                if vals:
                    row[m] = statistics.median(vals)
            rows[group] = row
        out[kind] = rows
    return out


__all__ = ["GROUP_KINDS", "GROUP_METRICS", "experiment_groups", "group_medians"]
