"""What the cluster-running commands (``cluster``, ``dashboard``, ``emulate``) share in the CLI:
the ``--fail NODE@TIME`` syntax and printing a recovery comparison (the comparison itself is
``servesim.cluster.compare``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from servesim.cli.common import emit, said_written
from servesim.cluster import FailureEvent, RouterSpec
from servesim.cluster.compare import LinkSpec, StrategyOutcome, cluster_document
from servesim.errors import InputError, shown
from servesim.report.documents import cluster_answer_document, cluster_run_document
from servesim.services.cluster import ClusterAnswer
from servesim.spec import ClusterSpec
from servesim.traces.schema import TraceProvenance
from servesim.views.model import Section


def parse_fail(text: str) -> FailureEvent:
    """``NODE@TIME`` or ``NODE@TIME+RECOVER_AFTER`` (seconds)."""
    node, sep, rest = text.partition("@")
    if not sep or not node:
        raise InputError(f"--fail {shown(text)}: use NODE@TIME or NODE@TIME+RECOVER_AFTER (seconds)")
    when, plus, back = rest.partition("+")
    try:
        return FailureEvent(node=node, time_s=float(when), recover_after_s=float(back) if plus else None)
    except ValueError as e:
        raise InputError(f"--fail {shown(text)}: {e}") from None


def print_comparison(
    rows: Sequence[StrategyOutcome],
    events: Sequence[FailureEvent],
    link: LinkSpec,
    route: RouterSpec,
    as_json: bool,
    title: str,
    provenance: TraceProvenance | None = None,
    out: Path | None = None,
    views: Sequence[Section] = (),
    run: ClusterSpec | None = None,
) -> None:
    """The strategies' outcomes: the table, or with ``--json`` the comparison alone on stdout
    (with the trace's provenance: every row dropped while reading it, and ``run``: the
    ``ClusterSpec`` that produced it); ``out``: that document as a file. ``views``: one run's
    fleet and replica views (``servesim.views.fleet``): the document's ``sections`` (the charts
    ``servesim report`` draws); the table is followed by the fleet's verdicts."""
    if as_json or out is not None:
        doc = cluster_run_document(rows, events, link, route, provenance, run)
        if views:
            doc["sections"] = [v.model_dump(mode="json") for v in views]
        if emit(doc, as_json=as_json, out=out):
            return
    from servesim.cli.render import print_section
    from servesim.views.cluster import cluster_view

    console = Console()
    console.print(escape(title), highlight=False)
    print_section(cluster_view(cluster_document(events, link, route, rows)), console)
    if views:
        fleet = views[0]
        print_section(Section(key=fleet.key, title=fleet.title, verdicts=fleet.verdicts), console)
    said_written(out)


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


__all__ = ["parse_fail", "print_cluster", "print_comparison"]
