"""Views of a tuning study and its recommendation, under one name: the study's trials
(``views.trials``), the recommendation card and the verdict sentence (``views.recommendation``)
and every measured ``Reason`` worded as one sentence (``views.reasons``). The tuner measures,
these modules word it, so the CLI, the web workbench, the TUI and the report say the same thing."""

from __future__ import annotations

from servesim.views.reasons import effect_text, reason_text
from servesim.views.reasons import ms_unit as _ms_unit
from servesim.views.recommendation import (
    baseline_name,
    change_list,
    changes_text,
    lead_clauses,
    lead_sentence,
    recommendation_lines,
    recommendation_view,
    verdict_text,
)
from servesim.views.trials import infeasibility_table, scatter_trials, trials_table, trials_view

__all__ = [
    "_ms_unit",
    "baseline_name",
    "change_list",
    "changes_text",
    "effect_text",
    "infeasibility_table",
    "lead_clauses",
    "lead_sentence",
    "reason_text",
    "recommendation_lines",
    "recommendation_view",
    "scatter_trials",
    "trials_table",
    "trials_view",
    "verdict_text",
]
