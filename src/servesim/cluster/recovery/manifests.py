"""Hand-off manifests (one JSON file per target node) and decision-matrix export.

A manifest is a *draft for a person*: it says which jobs a survivor should take over and how,
is marked ``requires_human_review: true`` and ``sent: false``, and carries a header saying so.
Nothing here opens a socket, calls an API or runs a command; files are written atomically to a
local outbox folder and that is all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from servesim.cluster.recovery.models import RecoveryPlan
from servesim.errors import InputError
from servesim.io import write_text_atomic
from servesim.version import __version__

MANIFEST_KIND = "servesim.recovery.handoff-manifest"
MANIFEST_VERSION = 1
MANIFEST_HEADER = (
    "DRAFT HAND-OFF MANIFEST - REQUIRES HUMAN REVIEW. Written by `servesim recover` from a failure "
    "record; nothing was sent, scheduled or executed, and no network call was made. Review the "
    "strategies and numbers before acting on them."
)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-.") or "event"


def manifest_name(plan: RecoveryPlan, target: str) -> str:
    """``<batch_id or preemption timestamp>-<target>.json`` with unsafe characters replaced."""
    stem = plan.batch_id if plan.batch_id else str(plan.preemption_timestamp)
    return f"{_safe(stem)}-{_safe(target)}.json"


def manifests_for(plan: RecoveryPlan) -> dict[str, dict[str, Any]]:
    """The manifest of every survivor that receives a job, by target name (plan order)."""
    out: dict[str, dict[str, Any]] = {}
    for d in plan.scheduled_migrations:
        if d.target is None:
            continue
        m = out.get(d.target)
        if m is None:
            m = out[d.target] = {
                "kind": MANIFEST_KIND,
                "version": MANIFEST_VERSION,
                "header": MANIFEST_HEADER,
                "requires_human_review": True,
                "sent": False,
                "generated_by": f"servesim {__version__}",
                "source_node": plan.interrupted_node,
                "target_node": d.target,
                "batch_id": plan.batch_id,
                "preemption_timestamp": plan.preemption_timestamp,
                "context": plan.context.model_dump(mode="json", exclude={"step_time_model"}),
                "jobs": [],
            }
        m["jobs"].append(
            {
                "job_id": d.job_id,
                "strategy": d.strategy.value,
                "recompute_required": d.recompute_required,
                "recompute_tokens": d.recompute_tokens,
                "moved_tokens": d.moved_tokens,
                "bytes_to_move": d.bytes_to_move,
                "checkpoint_covered_tokens": d.checkpoint_covered_tokens,
                "stale_checkpoint": d.stale_checkpoint,
                "blocks_needed": d.blocks_needed,
                "waits_for_capacity": d.waits_for_capacity,
                "capacity_wait_ms": d.capacity_wait_ms,
                "est_recovery_ms": d.est_recovery_ms,
                "break_even_gbps": d.break_even_gbps,
                "reason": d.reason,
            }
        )
    for m in out.values():
        jobs = m["jobs"]
        m["totals"] = {
            "jobs": len(jobs),
            "migrations": sum(j["strategy"] == "MIGRATE_STATE" for j in jobs),
            "cold_restarts": sum(j["strategy"] == "COLD_RESTART" for j in jobs),
            "recompute_tokens": sum(j["recompute_tokens"] for j in jobs),
            "bytes_to_move": sum(j["bytes_to_move"] for j in jobs),
        }
    return out


def manifest_paths(plans: Sequence[RecoveryPlan], outbox_dir: str | Path) -> list[Path]:
    """Where ``write_manifests`` would put every manifest of ``plans``; raises ``ValueError`` when
    two of them would share a file name (give the events distinct batch ids)."""
    seen: dict[Path, int] = {}
    out = []
    for i, plan in enumerate(plans):
        for target in manifests_for(plan):
            p = Path(outbox_dir) / manifest_name(plan, target)
            if p in seen:
                raise InputError(
                    f"records {seen[p]} and {i} would both write manifest {p.name}; "
                    "give the events distinct batch_id"
                )
            seen[p] = i
            out.append(p)
    return out


def write_manifests(plan: RecoveryPlan, outbox_dir: str | Path) -> list[Path]:
    """Write one manifest per target node into ``outbox_dir`` (created if missing), atomically.
    Returns the paths, in plan order. Sends nothing."""
    paths = []
    for target, manifest in manifests_for(plan).items():
        path = Path(outbox_dir) / manifest_name(plan, target)
        write_text_atomic(path, json.dumps(manifest, indent=2) + "\n")
        paths.append(path)
    return paths


def decision_matrix(plans: RecoveryPlan | Sequence[RecoveryPlan]) -> pd.DataFrame:
    """The decision matrix of one plan, or of several with the event's node/batch/timestamp first."""
    if isinstance(plans, RecoveryPlan):
        return plans.decision_matrix()
    frames = []
    for p in plans:
        df = p.decision_matrix()
        df.insert(0, "preemption_timestamp", str(p.preemption_timestamp))
        df.insert(0, "batch_id", p.batch_id)
        df.insert(0, "interrupted_node", p.interrupted_node)
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def matrix_format(path: str | Path) -> str:
    """``csv`` or ``json`` from the decision matrix's file name; an error for any other (checked
    before planning, so a bad name costs no work and leaves no manifest)."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".csv", ".json"):
        raise InputError(f"--matrix {Path(path)}: decision matrix export needs a .csv or .json file name")
    return suffix[1:]


def export_decision_matrix(plans: RecoveryPlan | Sequence[RecoveryPlan], path: str | Path) -> Path:
    """Write the decision matrix as CSV (``.csv``) or JSON records (``.json``), atomically."""
    p = Path(path)
    fmt = matrix_format(p)
    df = decision_matrix(plans)
    if fmt == "csv":
        text = df.to_csv(index=False, lineterminator="\n")
    else:
        records = json.loads(df.to_json(orient="records"))
        text = json.dumps(records, indent=2) + "\n"
    return write_text_atomic(p, text)
