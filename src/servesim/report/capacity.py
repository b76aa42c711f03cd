"""The ``--json`` documents of the capacity answers, one function each: what ``servesim saturate
--json`` / ``servesim tune --json`` (with or without ``--layouts``) print, what the web stores for
its saturation and Tune jobs (``GET /api/runs/{id}/document.json``) and what the demo writes, for
the same request (``servesim.services.capacity``, ``.tune``, ``.layouts``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesim.errors import InputError
from servesim.report.documents import stamped

if TYPE_CHECKING:
    from servesim.services.capacity import SaturateAnswer
    from servesim.services.gpu_types import GpuTypesResult
    from servesim.services.layouts import LayoutsAnswer
    from servesim.services.tune import TuneAnswer
    from servesim.traces.schema import TraceProvenance


def _provenance(prov: TraceProvenance | None) -> dict[str, Any] | None:
    return None if prov is None else prov.model_dump(mode="json")


def saturate_document(answer: SaturateAnswer) -> dict[str, Any]:
    """The ``saturate`` document: the sweep's report and the trace's provenance."""
    doc = {**answer.report.model_dump(mode="json"), "trace_provenance": _provenance(answer.provenance)}
    return stamped("saturate", doc)


def tune_document(answer: TuneAnswer) -> dict[str, Any]:
    """The ``tune`` document: ``{study, recommendation, trace_provenance}``."""
    rec = answer.recommendation
    doc = {
        "study": answer.study.model_dump(mode="json"),
        "recommendation": rec.model_dump(mode="json") if rec is not None else None,
        "trace_provenance": _provenance(answer.provenance),
    }
    return stamped("tune", doc)


def gpu_types_document(result: GpuTypesResult) -> dict[str, Any]:
    """``tune --gpu-types``: the ``tune`` document of the chosen type (else of the first type that
    ran) with ``gpu_types``, the comparison (``services.gpu_types.GpuTypesAnswer``), beside it."""
    shown = result.chosen or next(iter(result.answers.values()), None)
    if shown is None:
        raise InputError(
            "no GPU type can run this model: " + "; ".join(f"{r.gpu}: {r.reason}" for r in result.answer.rows)
        )
    doc = tune_document(shown)
    return {**doc, "gpu_types": result.answer.model_dump(mode="json")}


def layouts_document(answer: LayoutsAnswer) -> dict[str, Any]:
    """The ``layouts`` document: ``{layouts}``, the comparison's answer."""
    return stamped("layouts", {"layouts": answer.answer.model_dump(mode="json")})


__all__ = ["gpu_types_document", "layouts_document", "saturate_document", "tune_document"]
