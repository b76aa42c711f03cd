"""Issue 46: the recommendation as a Kubernetes manifest (a Deployment per replica set, GPU
resources, the ``vllm serve`` args, probes on ``/health``, a Service), structurally valid and
byte-for-byte deterministic."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from servesim.tuning import SchedulerRecommendation
from servesim.tuning.deploy import VLLM_IMAGE, VLLM_PORT, kubernetes_manifest, recommendation_manifest
from servesim.tuning.deployment import Deployment

DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo" / "outbox" / "recommendation"
EAGLE3 = {"method": "eagle3", "num_speculative_tokens": 3}


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _check(text: str, d: Deployment, command: str) -> dict:
    deployment, service = _docs(text)
    assert (deployment["apiVersion"], deployment["kind"]) == ("apps/v1", "Deployment")
    assert (service["apiVersion"], service["kind"]) == ("v1", "Service")
    name = deployment["metadata"]["name"]
    assert DNS_1123.match(name) and service["metadata"]["name"] == name
    spec = deployment["spec"]
    assert spec["replicas"] == d.replicas
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"] == spec["selector"]["matchLabels"]
    (container,) = spec["template"]["spec"]["containers"]
    assert container["image"] == VLLM_IMAGE
    assert container["command"] + container["args"] == shlex.split(command)  # the command's args
    assert container["resources"]["limits"]["nvidia.com/gpu"] == d.tensor_parallel_size
    assert container["resources"]["requests"]["nvidia.com/gpu"] == d.tensor_parallel_size
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": VLLM_PORT}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    (svc_port,) = service["spec"]["ports"]
    assert svc_port["targetPort"] in ports and svc_port["port"] == VLLM_PORT
    mounts = {m["name"] for m in container["volumeMounts"]}
    assert mounts <= {v["name"] for v in spec["template"]["spec"]["volumes"]}
    assert "&id" not in text and "*id" not in text  # no YAML anchors: plain objects for kubectl
    return deployment


def test_a_replica_set_with_tp_speculation_offloading_and_a_timeout() -> None:
    d = Deployment(
        max_model_len=28179,
        replicas=3,
        tensor_parallel_size=2,
        queue_timeout_s=60.0,
        kv_offloading_size=16.5,
        num_speculative_tokens=3,
        speculative_config=EAGLE3,
    )
    text = kubernetes_manifest(d, "llama-3.1-8b", router="prefix_aware")
    deployment = _check(text, d, d.vllm_serve_command("llama-3.1-8b"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" in container["args"][-1]  # the published head
    assert container["resources"]["requests"]["memory"] == "17Gi"  # the CPU KV tier's host memory
    notes = deployment["metadata"]["annotations"]
    assert notes["servesim.io/simulated-router"] == "prefix_aware"
    assert notes["servesim.io/gateway-queue-timeout-s"] == "60"
    assert "prefix_aware router" in text and "set it in the gateway" in text
    assert kubernetes_manifest(d, "llama-3.1-8b", router="prefix_aware") == text  # deterministic


def test_one_replica_says_so_and_names_no_router() -> None:
    d = Deployment(max_model_len=4096)
    text = kubernetes_manifest(d, "qwen2.5-7b", router="round_robin")
    deployment = _check(text, d, d.vllm_serve_command("qwen2.5-7b"))
    assert deployment["metadata"]["name"] == "qwen2-5-7b-instruct-vllm"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "router" not in text.split("---")[0].lower() and "memory" not in container["resources"]["requests"]
    assert "One replica" in text


def test_the_recommendation_and_the_demo_outbox_carry_it() -> None:
    rec = SchedulerRecommendation.model_validate_json((DEMO / "recommendation.json").read_text())
    text = recommendation_manifest(rec)
    _check(text, rec.deployment, rec.vllm_serve_command)
    assert (DEMO / "vllm-k8s.yaml").read_text() == text
