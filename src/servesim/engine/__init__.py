"""The replica engine: vLLM V1's scheduler and KV-cache manager, step by step, timed by a model."""

# First: decides whether the compiled core or the pure-Python reference is imported below.
from servesim.engine import _native  # noqa: F401  (isort: skip)
from servesim.engine.config import EngineConfig
from servesim.engine.engine import Engine, EngineStallError
from servesim.engine.results import SLO, LatencyStats, SimulationReport, SimulationResult, SimulationSummary
from servesim.engine.simulate import simulate
from servesim.engine.step_time import BatchComposition, ConstantStepTime, LinearStepTime, StepTimeModel

__all__ = [
    "SLO",
    "BatchComposition",
    "ConstantStepTime",
    "Engine",
    "EngineConfig",
    "EngineStallError",
    "LatencyStats",
    "LinearStepTime",
    "SimulationReport",
    "SimulationResult",
    "SimulationSummary",
    "StepTimeModel",
    "simulate",
]
