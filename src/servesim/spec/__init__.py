"""The one way into a run: a typed spec every interface builds, resolved the same way.

* ``DeploymentSpec`` — model × GPU × TP × replicas × router × memory share × the vLLM keys set;
  ``resolve(spec)`` fills the rest with what ``vllm serve`` runs on that GPU
  (``servesim.perf.serve_defaults``), sizes the KV cache and builds the step-time model.
* ``RunSpec`` — a trace, a deployment, an SLO and a seed: what a result document records.
* ``ClusterSpec`` — a cluster run (replicas, router, failures, recovery; or prefill/decode pools),
  ``resolve_cluster(spec, trace)`` its replicas, router, failure events and link.
* ``PercentileSLO`` / ``parse_slo`` — the one SLO syntax (``ttft_p99_ms=500,tpot_p99_ms=50``).

Library code never words CLI flags: the CLI derives its options from these fields
(``servesim.cli.engine_flags``), the web takes these models as its request bodies.
"""

from servesim.perf.serve_defaults import apply_serve_defaults, vllm_serve_defaults
from servesim.spec.cluster import (
    ClusterSpec,
    DisaggregatedSpec,
    MigrationLink,
    NamedReplica,
    ResolvedCluster,
    ResolvedDisaggregated,
    resolve_cluster,
)
from servesim.spec.deployment import (
    MAX_REPLICAS,
    DeploymentSpec,
    Rebuild,
    ResolvedDeployment,
    engine_values,
    resolve,
    resolve_for_trace,
    resolve_replicas,
)
from servesim.spec.run import RunSpec
from servesim.spec.slo import PercentileSLO, SLOError, parse_slo

__all__ = [
    "MAX_REPLICAS",
    "ClusterSpec",
    "DeploymentSpec",
    "DisaggregatedSpec",
    "MigrationLink",
    "NamedReplica",
    "PercentileSLO",
    "Rebuild",
    "ResolvedCluster",
    "ResolvedDeployment",
    "ResolvedDisaggregated",
    "RunSpec",
    "SLOError",
    "apply_serve_defaults",
    "engine_values",
    "parse_slo",
    "resolve",
    "resolve_cluster",
    "resolve_for_trace",
    "resolve_replicas",
    "vllm_serve_defaults",
]
