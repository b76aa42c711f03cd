"""servesim: simulate vLLM-style LLM serving without a GPU.

The public API is small on purpose; interfaces (CLI, web, TUI, reports) call only this::

    import servesim
    trace = servesim.open_trace("azure-conv")            # a file, a bundled trace or a preset
    result = servesim.simulate(trace, servesim.EngineConfig(max_num_seqs=256),
                               slo=servesim.SLO(ttft_ms=500, tpot_ms=50))
    result.summary.ttft_ms.p99, result.summary.goodput    # vLLM's metric definitions
    result.to_pandas()                                    # one row per request
"""

from servesim.cluster import (
    ClusterResult,
    FailureEvent,
    RecoveryContext,
    Replica,
    RouterSpec,
    simulate_cluster,
)
from servesim.engine import (
    SLO,
    BatchComposition,
    ConstantStepTime,
    EngineConfig,
    LatencyStats,
    LinearStepTime,
    SimulationReport,
    SimulationResult,
    SimulationSummary,
    StepTimeModel,
    simulate,
)
from servesim.live import LiveClusterRun, LiveRun, ReplicaState, RequestTimeline, RunSnapshot, Slot
from servesim.traces import (
    GeneratorSpec,
    RequestRecord,
    Trace,
    TraceError,
    TraceStats,
    generate_trace,
    inspect_trace,
    load_trace,
    open_trace,
    preset_spec,
    write_trace,
)
from servesim.version import __version__

__all__ = [
    "SLO",
    "BatchComposition",
    "ClusterResult",
    "ConstantStepTime",
    "EngineConfig",
    "FailureEvent",
    "GeneratorSpec",
    "LatencyStats",
    "LinearStepTime",
    "LiveClusterRun",
    "LiveRun",
    "RecoveryContext",
    "Replica",
    "ReplicaState",
    "RequestRecord",
    "RequestTimeline",
    "RouterSpec",
    "RunSnapshot",
    "SimulationReport",
    "SimulationResult",
    "SimulationSummary",
    "Slot",
    "StepTimeModel",
    "Trace",
    "TraceError",
    "TraceStats",
    "__version__",
    "generate_trace",
    "inspect_trace",
    "load_trace",
    "open_trace",
    "preset_spec",
    "simulate",
    "simulate_cluster",
    "write_trace",
]
