"""The "?" of every metric in a report: a column's or KPI's own help, else the glossary's words.

Why: the views attach help to most figures; a column keyed ``ttft_p99_ms`` or ``goodput_rps``
still deserves a definition, which ``views.glossary`` has under its base key (``ttft_ms``,
``goodput``). The report lists every definition it used at the end, so the Markdown has them too.
"""

from __future__ import annotations

import re

from servesim.views.glossary import METRICS

_PCT = re.compile(r"_(p\d+|mean|max|min)(?=_|$)")
_ALIASES = {
    "goodput_rps": "goodput",
    "throughput_rps": "request_throughput",
    "output_tokens_per_s": "output_token_throughput",
    "output_tok_s": "output_token_throughput",
    "kv_usage_pct": "kv_usage",
    "rate_rps": "offered_rps",
}


def definition(key: str, help_text: str | None = None) -> str | None:
    """The definition to show for a figure keyed ``key`` (None: nothing to say)."""
    if help_text:
        return help_text
    if key in METRICS:
        return METRICS[key].definition
    if key in _ALIASES:
        return METRICS[_ALIASES[key]].definition
    m = _PCT.search(key)
    base = _PCT.sub("", key)
    if base in METRICS:
        which = m.group(1) if m else None
        suffix = ""
        if which and which.startswith("p"):
            suffix = f" ({which[1:]}th percentile)"
        elif which:
            suffix = f" ({which})"
        return METRICS[base].definition + suffix
    return None


__all__ = ["definition"]
