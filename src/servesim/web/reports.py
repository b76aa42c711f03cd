"""The report of a stored run (servesim.report): the run's result in the shape of the CLI's
``--json``, rendered as one self-contained HTML file; two runs of a kind give the report's diff."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import orjson

from servesim.web.db import JobRow
from servesim.web.problems import Problem

if TYPE_CHECKING:
    from servesim.report.documents import Kind


def cli_shape(row: JobRow) -> dict[str, Any]:
    """What ``servesim <command> --json`` would have printed for this run: the typed document
    (``kind``, ``schema_version``), the same one the CLI writes for the same run."""
    from servesim.report.documents import stamped

    r = row.result or {}
    if row.kind in ("recover", "reschedule", "advise") and isinstance(r.get("document"), dict):
        return dict(r["document"])  # the service's answer as the command's document
    if row.kind == "simulate" and isinstance(r.get("document"), dict):
        doc = dict(r["document"])  # written by the job, as ``servesim simulate/cluster --json`` writes it
        if doc.get("kind") == "cluster" and "sections" not in doc:
            # the fleet's and each replica's views, as shown; the page's event table is not the CLI's
            doc["sections"] = [x for x in r.get("sections", []) if x.get("key") != "timeline"]
        return doc
    shape = _shape(row, r)
    kind = _KINDS.get(row.kind)
    return stamped(kind, shape) if kind is not None else shape


#: The document kind of each job kind whose result is a command's document.
_KINDS: dict[str, Kind] = {
    "simulate": "simulate",
    "saturate": "saturate",
    "tune": "tune",
    "recover": "recover",
    "reschedule": "reschedule",
    "advise": "advise",
}


def _shape(row: JobRow, r: dict[str, Any]) -> dict[str, Any]:
    """A stored result in its command's ``--json`` layout (runs stored before the job kept the
    document, and the kinds whose result is the command's own model)."""
    if row.kind == "simulate" and "cluster" not in r:
        return {
            "config": r["config"],
            "step_time_model": r.get("step_time_model", {}),
            "summary": r["summary"],
        }
    if row.kind == "saturate":
        return dict(r["report"])
    if row.kind == "tune":
        return {
            "study": {**r["study"], "trials": r.get("trials", [])},
            "recommendation": r.get("recommendation"),
        }
    if row.kind in ("recover", "reschedule"):
        return dict(r["plan"])
    if row.kind == "advise":
        return {**r["advice"], "action_log": []}
    raise Problem(
        422,
        f"there is no report of a {row.kind} run with a cluster"
        if row.kind == "simulate"
        else f"there is no report of a {row.kind} run",
    )


def document(row: JobRow) -> Any:
    from servesim.report import Document
    from servesim.report.documents import detect

    data = cli_shape(row)
    kind = detect(data)
    if kind is None:
        raise Problem(422, f"the {row.kind} run's result is not a shape the report reads")
    digest = "sha256:" + hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return Document(kind, f"{row.kind}-{row.id[:8]}", digest, data)


def report_html(rows: list[JobRow]) -> str:
    from servesim.report import build_report
    from servesim.report.html import render_html

    report = build_report([document(r) for r in rows], command_line="servesim serve (web workbench)")
    return render_html(report)
