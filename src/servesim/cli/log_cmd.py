"""``servesim log``: what was run, with what, and how it ended (the action log, filtered).

Reads the data folder's ``actions.jsonl`` (``servesim.actionlog``); ``--action`` and ``--since``
filter it; ``--json`` prints the matching records as a JSON list (each one an ``ActionRecord``:
``servesim schema ActionRecord``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from servesim.actionlog import ActionRecord, log_path, read_log
from servesim.cli.common import print_json
from servesim.errors import InputError, shown

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``--since``: an ISO time (``2026-12-01``, ``2026-12-01T10:00Z``) or an age (``30m``, ``7d``)."""
    t = text.strip()
    now = now or datetime.now(UTC)
    if t and t[-1] in _UNITS and t[:-1].replace(".", "", 1).isdigit():
        try:
            return now - timedelta(seconds=float(t[:-1]) * _UNITS[t[-1]])
        except OverflowError:  # an age before year 1: no record is older
            return datetime.min.replace(tzinfo=UTC)
    try:
        when = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            f"--since {shown(text)}: give an ISO time (2026-12-01T10:00Z) or an age (30m, 2h, 7d)"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def select(records: list[ActionRecord], action: list[str], since: datetime | None) -> list[ActionRecord]:
    wanted = {a.strip() for a in action for a in a.split(",") if a.strip()}
    out = []
    for r in records:
        if wanted and r.action not in wanted:
            continue
        if since is not None and datetime.fromisoformat(r.time.replace("Z", "+00:00")) < since:
            continue
        out.append(r)
    return out


def log_table(records: list[ActionRecord], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("time (UTC)", "action", "outcome", "s"):
        table.add_column(col, justify="right" if col == "s" else "left", no_wrap=col != "outcome")
    table.add_column("inputs / outputs / error", overflow="fold")
    for r in records:
        what = [f"in {k} {d.removeprefix('sha256:')[:12]}" for k, d in r.inputs.items()]
        what += [f"out {o}" for o in r.outputs]
        if r.advisor is not None:
            what.append(f"advisor {r.advisor.advisor}" + (f" ({r.advisor.model})" if r.advisor.model else ""))
        if r.error:
            what.append(f"error: {r.error}")
        table.add_row(
            r.time.replace("T", " ")[:19],
            r.action,
            "[green]ok[/green]" if r.outcome == "ok" else "[red]error[/red]",
            f"{r.duration_s:,.2f}",
            "; ".join(what) or "-",
        )
    return table


def register(app: typer.Typer) -> None:
    @app.command("log")
    def log_cmd(
        action: list[str] = typer.Option(
            [],
            "--action",
            "-a",
            help="Only these actions (repeatable or comma-separated), e.g. simulate,tune.",
        ),
        since: str | None = typer.Option(
            None, help="Only actions since: an ISO time or an age (30m, 2h, 7d)."
        ),
        last: int | None = typer.Option(
            None, "--last", "-n", min=1, help="Only the last N matching actions."
        ),
        data_dir: Path | None = typer.Option(
            None, help="Data folder holding actions.jsonl (default: $SERVESIM_DATA_DIR or the user's)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the matching records as a JSON list."),
    ) -> None:
        """List the action log: every command run, its inputs' digests, outputs, duration and outcome."""
        when = parse_since(since) if since else None
        records = select(read_log(data_dir), action, when)
        if last is not None:
            records = records[-last:]
        if as_json:
            print_json([r.model_dump(mode="json") for r in records])
            return
        console = Console()
        console.print(log_table(records, f"{len(records):,} actions"))
        console.print(f"log: {log_path(data_dir)}", soft_wrap=True)
