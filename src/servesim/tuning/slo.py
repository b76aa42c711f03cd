"""The run's SLO: ``servesim.spec.slo`` is its one definition and parser (kept importable here)."""

from servesim.spec.slo import PercentileSLO

__all__ = ["PercentileSLO"]
