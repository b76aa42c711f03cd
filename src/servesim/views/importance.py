"""Which searched settings mattered for a tuning study's objective (Optuna's parameter importance)."""

from __future__ import annotations

from collections.abc import Mapping

from servesim.tuning.changes import flag_name
from servesim.views.model import Column, Section, Table


def setting_name(param: str) -> str:
    """An Optuna parameter as a user finds the setting: its ``vllm serve`` flag
    (``max_num_seqs`` and a narrowed ``max_num_seqs:[64..256]`` both read ``--max-num-seqs``)."""
    return flag_name(param.split(":", 1)[0])


def importance_view(importances: Mapping[str, float], objective: str) -> Section:
    """Importances (shares summing to 1, largest first) as a table, by ``vllm serve`` flag."""
    shares: dict[str, float] = {}
    for param, share in importances.items():
        name = setting_name(param)
        shares[name] = shares.get(name, 0.0) + float(share)
    items = sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))
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
