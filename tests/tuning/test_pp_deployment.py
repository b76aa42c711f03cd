"""A deployment with pipeline parallelism (issue 51, item 1): carried from the spec, written as
``vllm serve --pipeline-parallel-size``, its GPUs counted as replicas x TP x PP."""

from __future__ import annotations

import pytest

from servesim.spec import DeploymentSpec
from servesim.tuning.deployment import Deployment


def _pp(replicas: int = 1) -> Deployment:
    spec = DeploymentSpec(
        model="llama-3.1-70b", gpu="h100", tp=2, replicas=replicas, engine={"pipeline_parallel_size": 2}
    )
    return Deployment.from_spec(spec, 4096)


def test_the_command_says_the_stages_and_the_scheduler_vllm_runs_them_with() -> None:
    d = _pp()
    assert d.pipeline_parallel_size == 2 and d.async_scheduling  # vLLM 0.33's default with PP
    cmd = d.vllm_serve_command("llama-3.1-70b")
    assert "--tensor-parallel-size 2 --pipeline-parallel-size 2 " in cmd
    assert cmd.endswith("--async-scheduling")
    assert d.engine_keys()["pipeline_parallel_size"] == 2


def test_gpus_are_tp_times_pp_per_replica() -> None:
    d = _pp(replicas=3)
    assert (d.gpus_per_replica, d.gpus) == (4, 12)
    lines = d.replica_commands("llama-3.1-70b")
    assert [line.split(" ", 1)[0] for line in lines] == [
        "CUDA_VISIBLE_DEVICES=0,1,2,3",
        "CUDA_VISIBLE_DEVICES=4,5,6,7",
        "CUDA_VISIBLE_DEVICES=0,1,2,3",  # the third replica on a second node
    ]
    assert "node 2" in lines[2]


def test_without_pp_the_document_and_command_are_as_before() -> None:
    d = Deployment.from_spec(DeploymentSpec(model="llama-3.1-70b", gpu="h100", tp=4), 4096)
    assert "pipeline_parallel_size" not in d.model_dump(mode="json")
    assert "pipeline" not in d.vllm_serve_command("llama-3.1-70b")
    assert "pipeline_parallel_size" not in d.engine_keys()


def test_sync_scheduling_with_pp_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="pipeline_parallel_size 2 with async scheduling off"):
        Deployment(max_model_len=4096, pipeline_parallel_size=2)


def test_tune_keeps_the_stages_in_every_trial() -> None:
    """``tune --pipeline-parallel-size 2``: a study-wide key (not the user's baseline by itself),
    with async scheduling on in every trial, as vLLM runs PP."""
    from servesim.services.tune import STUDY_KEYS, _fixed
    from servesim.tuning.space import SearchSpace

    spec = DeploymentSpec(model="llama-3.1-70b", gpu="h100", tp=2, engine={"pipeline_parallel_size": 2})
    fixed, _ = _fixed(spec, SearchSpace())
    assert fixed["pipeline_parallel_size"] == 2 and fixed["async_scheduling"] is True
    assert "pipeline_parallel_size" in STUDY_KEYS
    d = Deployment.model_validate({**fixed, "max_model_len": 4096, "tensor_parallel_size": 2})
    assert d.parallelism == "TP 2 x PP 2" and d.gpus == 4
    assert "pipeline_parallel_size" not in _fixed(DeploymentSpec(), SearchSpace())[0]
