"""Which searched settings mattered for a tuning study's objective (Optuna's parameter importance)."""

from __future__ import annotations

from collections.abc import Mapping

from servesim.views.model import Column, Section, Table


def importance_view(importances: Mapping[str, float], objective: str) -> Section:
    """Importances (shares summing to 1, largest first) as a table."""
    items = sorted(importances.items(), key=lambda kv: (-kv[1], kv[0]))
    names = [k for k, _ in items]
    values = [float(v) for _, v in items]
    return Section(
        key="importance",
        title="which settings mattered",
        tables=[
            Table(
                key="importance",
                title="parameter importance",
                columns=[
                    Column(key="setting", label="setting", kind="str"),
                    Column(key="importance", label="importance", kind="pct"),
                ],
                rows=[[n, v] for n, v in zip(names, values, strict=True)],
                notes=[
                    "Optuna's parameter importance over the study's complete trials, for "
                    f"{objective}; a setting the search never varied has none"
                ],
            )
        ],
    )
