""" "Apply" = write the advice to an outbox folder for a human to review. Nothing is sent anywhere,
nothing touches a running server. Files are named by their content (same advice, same name) and
written atomically."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from servesim.advisor.cases import BatchingCase, Case
from servesim.advisor.models import AdviceResult, BatchingAdvice
from servesim.io import write_text_atomic
from servesim.tuning.deployment import Deployment

HEADER = "servesim advice: NOT APPLIED. Review it before use; nothing was sent to any server."


def write_outbox(result: AdviceResult, case: Case, outbox: str | Path, model: str = "<model>") -> list[Path]:
    """Write the advice (and for batching the vLLM config + command) under ``outbox``."""
    body = result.model_dump(mode="json")
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:10]
    out = Path(outbox)
    manifest = {"header": HEADER, "requires_human_review": True, **body}
    paths = []
    if isinstance(case, BatchingCase) and isinstance(result.advice, BatchingAdvice):
        a = result.advice
        deployment = Deployment.from_engine_config(
            case.config_of(a), max_model_len=case.max_model_len, replicas=a.replicas
        )
        manifest["vllm_serve"] = deployment.vllm_serve_command(model)
        manifest["replicas_note"] = f"run {a.replicas} such replica(s) behind the router"
        yaml_text = deployment.vllm_config_yaml(model, header=[HEADER, f"advisor: {result.advisor}"])
        paths.append(write_text_atomic(out / f"batching-{digest}.yaml", yaml_text))
    paths.insert(
        0,
        write_text_atomic(
            out / f"{result.task}-{digest}.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        ),
    )
    return paths
