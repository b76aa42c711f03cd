"""servesim: simulate vLLM-style LLM serving without a GPU.

The public API is small on purpose; interfaces (CLI, web, TUI, reports) call only this::

    import servesim
    trace = servesim.open_trace("azure-conv")            # a file, a bundled trace or a preset
    result = servesim.simulate(trace, servesim.EngineConfig(max_num_seqs=256),
                               slo=servesim.SLO(ttft_ms=500, tpot_ms=50))
    result.summary.ttft_ms.p99, result.summary.goodput    # vLLM's metric definitions
    result.to_pandas()                                    # one row per request
"""

from typing import TYPE_CHECKING, Any

from servesim.version import __version__

# The public API, imported on first use (PEP 562): `import servesim` stays cheap, so the CLI
# starts fast and each interface pays only for what it touches. Type checkers see the imports.
if TYPE_CHECKING:
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
    from servesim.live import (
        LiveClusterRun,
        LiveFleetRun,
        LivePDRun,
        LiveRun,
        ReplicaState,
        RequestTimeline,
        RunSnapshot,
        Slot,
    )
    from servesim.online import OnlineFleet, OnlineRequest, ReplicaMetrics
    from servesim.perf.setup import ReplicaSetup, default_deployment, replica_setup
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

_LAZY: dict[str, str] = {
    "ClusterResult": "servesim.cluster",
    "FailureEvent": "servesim.cluster",
    "RecoveryContext": "servesim.cluster",
    "Replica": "servesim.cluster",
    "RouterSpec": "servesim.cluster",
    "simulate_cluster": "servesim.cluster",
    "LiveClusterRun": "servesim.live",
    "LiveFleetRun": "servesim.live",
    "LivePDRun": "servesim.live",
    "LiveRun": "servesim.live",
    "ReplicaState": "servesim.live",
    "RequestTimeline": "servesim.live",
    "RunSnapshot": "servesim.live",
    "Slot": "servesim.live",
    "OnlineFleet": "servesim.online",
    "OnlineRequest": "servesim.online",
    "ReplicaMetrics": "servesim.online",
    "SLO": "servesim.engine",
    "BatchComposition": "servesim.engine",
    "ConstantStepTime": "servesim.engine",
    "EngineConfig": "servesim.engine",
    "LatencyStats": "servesim.engine",
    "LinearStepTime": "servesim.engine",
    "SimulationReport": "servesim.engine",
    "SimulationResult": "servesim.engine",
    "SimulationSummary": "servesim.engine",
    "StepTimeModel": "servesim.engine",
    "simulate": "servesim.engine",
    "ReplicaSetup": "servesim.perf.setup",
    "default_deployment": "servesim.perf.setup",
    "replica_setup": "servesim.perf.setup",
    "GeneratorSpec": "servesim.traces",
    "RequestRecord": "servesim.traces",
    "Trace": "servesim.traces",
    "TraceError": "servesim.traces",
    "TraceStats": "servesim.traces",
    "generate_trace": "servesim.traces",
    "inspect_trace": "servesim.traces",
    "load_trace": "servesim.traces",
    "open_trace": "servesim.traces",
    "preset_spec": "servesim.traces",
    "write_trace": "servesim.traces",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'servesim' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


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
    "LiveFleetRun",
    "LivePDRun",
    "LiveRun",
    "OnlineFleet",
    "OnlineRequest",
    "RecoveryContext",
    "Replica",
    "ReplicaMetrics",
    "ReplicaSetup",
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
    "default_deployment",
    "generate_trace",
    "inspect_trace",
    "load_trace",
    "open_trace",
    "preset_spec",
    "replica_setup",
    "simulate",
    "simulate_cluster",
    "write_trace",
]
