"""Presentation-neutral views: what each result shows, for every interface to render.

A view is a ``Section`` of KPIs, typed tables, down-sampled series, binned histograms and
verdicts (``views.model``); ``views.glossary`` defines every metric once. Renderers: the Rich CLI
(``servesim.cli.render``), the HTML/Markdown report, the web page and the terminal dashboard.
Import the specific module (``servesim.views.simulation`` ...): each pulls in only its result type.
"""

from servesim.views.model import Cell, Column, Histogram, Kpi, Section, Series, Table, Verdict

__all__ = ["Cell", "Column", "Histogram", "Kpi", "Section", "Series", "Table", "Verdict"]
