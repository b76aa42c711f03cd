"""How a cluster's answer reads on the terminal (``servesim cluster``, ``dashboard --headless``):
the recovery strategies' table and the shown run's fleet verdicts, or the answer's document."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from servesim.cli.common import emit, said_written
from servesim.report.documents import cluster_answer_document
from servesim.services.cluster import ClusterAnswer
from servesim.views.model import Section


def print_cluster(answer: ClusterAnswer, as_json: bool, out: Path | None = None) -> None:
    """A cluster run's answer: the strategies' table, or with ``--json`` its document alone on
    stdout (``report.documents.cluster_answer_document``, the one every interface writes);
    ``out``: that document as a file. The table is followed by the shown run's fleet verdicts."""
    doc = cluster_answer_document(answer)
    if (as_json or out is not None) and emit(doc, as_json=as_json, out=out):
        return
    from servesim.cli.render import print_section
    from servesim.views.cluster import cluster_view

    console = Console()
    console.print(escape(answer.title), highlight=False)
    table = {k: v for k, v in doc.items() if k not in ("decisions", "num_starved")}  # the comparison
    print_section(cluster_view(table), console)
    fleet = Section.model_validate(doc["sections"][0])  # the shown run's fleet view
    print_section(Section(key=fleet.key, title=fleet.title, verdicts=fleet.verdicts), console)
    said_written(out)


__all__ = ["print_cluster"]
