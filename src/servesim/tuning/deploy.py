"""The recommendation as something to deploy: N replicas x this command, router, gateway timeout.

``DeployPlan`` gathers what a platform engineer needs to act: the replica count with one
``vllm serve`` line per replica (``Deployment.replica_commands``), the router that spreads the
requests, the gateway queue timeout (not a vLLM flag), where ``--max-model-len`` came from (flagged
when it is the trace's own longest request + 1: a longer request would be refused), the GPU-hours
a day and, at a $/GPU-hour (the user's, else the GPU's list price from ``servesim.perf.prices``,
its source stated), the $ an hour, a day and per 1M tokens at the predicted throughput, and the
headroom to the SLO knee (the highest rate where the SLO still holds) next to the headroom to
queue instability. Numbers only: ``views.tuning`` words them.

``kubernetes_manifest`` (``recommendation_manifest`` of a recommendation) writes the same answer as
a Kubernetes Deployment per replica set and a Service, the args those of the ``vllm serve`` line.
"""

from __future__ import annotations

import math
import re
import shlex
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, Field

from servesim.perf.offload import HOST_MEMORY_USD_PER_GIB_HOUR
from servesim.tuning.deployment import Deployment

if TYPE_CHECKING:
    from servesim.tuning.recommend import SchedulerRecommendation


def usd_per_million(
    gpus: int, usd_per_gpu_hour: float, tokens_per_s: float, host_usd_per_hour: float = 0.0
) -> float | None:
    """$ per 1M tokens: the GPUs' (and the CPU KV tier's host memory) $/s over the tokens served
    per second (None: no tokens)."""
    usd_per_s = (gpus * usd_per_gpu_hour + host_usd_per_hour) / 3600.0
    return usd_per_s / tokens_per_s * 1e6 if tokens_per_s > 0 else None


class DeployPlan(BaseModel):
    """What to run: the replicas, their command, the router, the gateway, the cost and headroom."""

    replicas: int = Field(description="Identical vLLM instances.")
    tensor_parallel_size: int
    gpus: int = Field(description="replicas x tensor_parallel_size x pipeline_parallel_size.")
    router: str = Field(description="How requests are spread over the replicas (the simulated policy).")
    gateway_queue_timeout_s: float | None = Field(
        description="Reject requests waiting longer than this, at the gateway (None: no timeout)."
    )
    commands: list[str] = Field(description="One vllm serve line per replica (GPUs, port).")
    max_model_len: int
    max_model_len_source: Literal["trace_max", "given"] = Field(
        description="trace_max: the trace's longest request + 1 (a longer request is refused); "
        "given: set by the user."
    )
    longest_request_tokens: int = Field(description="The trace's longest prompt + output.")
    gpu_hours_per_day: float = Field(description="gpus x 24.")
    gpu: str | None = Field(None, description="The GPU type (catalog name; None: no GPU modelled).")
    usd_per_gpu_hour: float | None = Field(description="The price used (None: no price, no $ figures).")
    price_source: str | None = Field(
        None, description="Where usd_per_gpu_hour comes from: 'given', or the list price's source and month."
    )
    usd_per_hour: float | None = Field(
        None,
        description="gpus x usd_per_gpu_hour (+ the CPU KV tier's host memory): the deployment's $/hour.",
    )
    host_memory_gib: float = Field(
        0.0, description="Host memory of the CPU KV tiers: replicas x --kv-offloading-size (0: no tier)."
    )
    usd_per_host_gib_hour: float | None = Field(
        None,
        description="The host memory price assumed (servesim.perf.offload.HOST_MEMORY_USD_PER_GIB_HOUR), "
        "set only with a GPU price and a CPU tier; it is in usd_per_day and the per-1M figures.",
    )
    usd_per_day: float | None = None
    usd_per_1m_output_tokens: float | None = Field(None, description="At the predicted output tokens/s.")
    usd_per_1m_tokens: float | None = Field(None, description="Prompt + output tokens, same throughput.")
    target_rate_rps: float
    slo_knee_rps: float | None = Field(description="Highest rate meeting the SLO on every fresh seed.")
    headroom_to_slo_knee: float | None = Field(description="slo_knee_rps / target - 1.")
    unstable_rps: float | None = Field(description="Lowest rate at which the queue grows.")
    headroom_to_instability: float | None = Field(description="unstable_rps / target - 1.")


def deploy_plan(
    d: Deployment,
    model: str,
    router: str,
    *,
    longest_request_tokens: int,
    rate: float,
    throughput_rps: float,
    output_tokens_per_s: float,
    mean_request_tokens: float,
    knee_rps: float | None,
    knee_headroom: float | None,
    unstable_rps: float | None,
    headroom: float | None,
    usd_per_gpu_hour: float | None,
    gpu: str | None = None,
    price_source: str | None = None,
) -> DeployPlan:
    """The plan of ``d`` at ``rate``; $ figures only with a price (the CPU tier's host memory at
    the stated per-GiB assumption added to the GPUs' price)."""
    host_gib = d.replicas * (d.kv_offloading_size or 0.0)
    host_price = HOST_MEMORY_USD_PER_GIB_HOUR if host_gib and usd_per_gpu_hour is not None else None
    host_usd_h = host_gib * host_price if host_price is not None else 0.0
    usd_h = None if usd_per_gpu_hour is None else d.gpus * usd_per_gpu_hour + host_usd_h
    usd = None if usd_h is None else usd_h * 24
    out_m = tot_m = None
    if usd_per_gpu_hour is not None:
        out_m = usd_per_million(d.gpus, usd_per_gpu_hour, output_tokens_per_s, host_usd_h)
        tot_m = usd_per_million(d.gpus, usd_per_gpu_hour, throughput_rps * mean_request_tokens, host_usd_h)
    return DeployPlan(
        replicas=d.replicas,
        tensor_parallel_size=d.tensor_parallel_size,
        gpus=d.gpus,
        router=router,
        gateway_queue_timeout_s=d.queue_timeout_s,
        commands=d.replica_commands(model),
        max_model_len=d.max_model_len,
        max_model_len_source="trace_max" if d.max_model_len == longest_request_tokens + 1 else "given",
        longest_request_tokens=longest_request_tokens,
        gpu_hours_per_day=d.gpus * 24.0,
        gpu=gpu,
        usd_per_gpu_hour=usd_per_gpu_hour,
        price_source=price_source if usd_per_gpu_hour is not None else None,
        usd_per_hour=usd_h,
        host_memory_gib=host_gib,
        usd_per_host_gib_hour=host_price,
        usd_per_day=usd,
        usd_per_1m_output_tokens=out_m,
        usd_per_1m_tokens=tot_m,
        target_rate_rps=rate,
        slo_knee_rps=knee_rps,
        headroom_to_slo_knee=knee_headroom,
        unstable_rps=unstable_rps,
        headroom_to_instability=headroom,
    )


# ---------------------------------------------------------------------- Kubernetes
#: The image the manifest runs: vLLM's OpenAI server at the release servesim models (vLLM 0.33).
VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"

#: vllm serve's default port (``--port``), the container's and the Service's.
VLLM_PORT = 8000

#: The seconds the startup probe allows before the liveness probe may restart the pod: a first
#: start downloads the weights and compiles (a 70B model: tens of GB); 60 x 30 s = 30 min.
STARTUP_PERIOD_S, STARTUP_FAILURES = 30, 60


def k8s_name(model: str) -> str:
    """A DNS-1123 name for the model's objects: its repo name, lower case, ``-vllm`` added."""
    base = re.sub(r"[^a-z0-9]+", "-", model.rsplit("/", 1)[-1].lower()).strip("-") or "model"
    return f"{base[:58].rstrip('-')}-vllm"


def kubernetes_manifest(
    d: Deployment,
    model: str,
    *,
    router: str | None = None,
    name: str | None = None,
    header: list[str] | None = None,
) -> str:
    """``d`` serving ``model`` as Kubernetes objects, as NVIDIA's AIConfigurator and llm-d's
    configurators emit them: one Deployment for the replica set (``replicas`` pods of one
    ``vllm serve`` on ``nvidia.com/gpu: TP`` GPUs each, the command's args, startup / readiness
    / liveness probes on vLLM's ``/health``, shared memory for TP) and a Service in front.

    The Service spreads connections over the pods as separate servers, which is what servesim
    simulates (not vLLM's ``--data-parallel-size``); the simulated ``router`` policy and the
    gateway queue timeout are not Kubernetes settings: the header and the annotations say so.
    Deterministic: the same deployment gives the same bytes."""
    from servesim.perf.speculators import served_id

    model = served_id(model)
    name = name or k8s_name(model)
    args = shlex.split(d.vllm_serve_command(model))[2:]  # what follows `vllm serve`

    def labels() -> dict[str, str]:  # a fresh mapping at each use: no YAML anchors
        return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name}

    annotations = {"servesim.io/tensor-parallel-size": str(d.tensor_parallel_size)}
    if router is not None and d.replicas > 1:
        annotations["servesim.io/simulated-router"] = router
    if d.queue_timeout_s is not None:
        annotations["servesim.io/gateway-queue-timeout-s"] = f"{d.queue_timeout_s:g}"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": {**labels(), "app.kubernetes.io/managed-by": "servesim"},
            "annotations": annotations,
        },
        "spec": {
            "replicas": d.replicas,
            "selector": {"matchLabels": labels()},
            "template": {
                "metadata": {"labels": labels()},
                "spec": {
                    "containers": [_container(d, args)],
                    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels()},
        "spec": {
            "type": "ClusterIP",
            "selector": labels(),
            "ports": [{"name": "http", "port": VLLM_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    body = yaml.safe_dump_all([deployment, service], sort_keys=False, default_flow_style=False, width=1000)
    lines = [f"# {h}" for h in _manifest_header(d, router, header)]
    return "\n".join([*lines, "---", body.rstrip("\n")]) + "\n"


def _probe(period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": period_s,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _container(d: Deployment, args: list[str]) -> dict[str, Any]:
    """The vllm serve container: its GPUs (requests = limits, as extended resources must be), the
    CPU KV tier's host memory when there is one, the probes, a Hugging Face token if the cluster
    has the ``hf-token`` secret (gated models), shared memory at /dev/shm."""
    gpus = {"nvidia.com/gpu": d.gpus_per_replica}
    requests: dict[str, Any] = dict(gpus)
    if d.kv_offloading_size is not None:  # host memory of the CPU KV tier (the server needs more)
        requests["memory"] = f"{math.ceil(d.kv_offloading_size)}Gi"
    token = {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}}
    limits = dict(gpus)
    return {
        "name": "vllm",
        "image": VLLM_IMAGE,
        "command": ["vllm", "serve"],
        "args": args,
        "ports": [{"name": "http", "containerPort": VLLM_PORT, "protocol": "TCP"}],
        "env": [{"name": "HF_TOKEN", "valueFrom": token}],
        "resources": {"requests": requests, "limits": limits},
        "startupProbe": _probe(STARTUP_PERIOD_S, STARTUP_FAILURES),
        "readinessProbe": _probe(10, 3),
        "livenessProbe": _probe(30, 3),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def _manifest_header(d: Deployment, router: str | None, extra: list[str] | None) -> list[str]:
    out = list(
        extra or ["Generated by servesim (simulation): review before use (requires_human_review: true)."]
    )
    gpus = f"{d.gpus_per_replica} GPU{'s' if d.gpus_per_replica > 1 else ''}"
    if d.replicas == 1:
        out.append(f"One replica: one vllm serve on {gpus}, behind one Service.")
    else:
        out.append(
            f"{d.replicas} replicas, each one vllm serve on {gpus} ({d.gpus} GPUs), behind one Service."
        )
    if router in ("random", "round_robin") and d.replicas > 1:
        out.append(
            f"servesim simulated a {router} router; a Service spreads connections much like it, per "
            "connection rather than per request (clients that keep one connection stick to one pod)."
        )
    elif router is not None and d.replicas > 1:
        out.append(
            f"servesim simulated a {router} router; a Service spreads connections at random: put a "
            "router that implements it in front (e.g. llm-d's inference scheduler, vLLM's production-stack)."
        )
    if d.queue_timeout_s is not None:
        out.append(f"queue_timeout_s {d.queue_timeout_s:g} is not a vLLM flag: set it in the gateway.")
    return out


def recommendation_manifest(rec: SchedulerRecommendation) -> str:
    """The recommendation as Kubernetes objects (``kubernetes_manifest``): what ``servesim tune
    --out-dir`` writes as ``vllm-k8s.yaml`` and the web and the report can offer."""
    router = rec.deploy.router if rec.deploy is not None else rec.router
    return kubernetes_manifest(rec.deployment, rec.model, router=router if rec.replicas > 1 else None)
