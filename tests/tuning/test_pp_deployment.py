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
    assert Deployment(max_model_len=4096, pipeline_parallel_size=2).async_scheduling  # vLLM's default
    with pytest.raises(ValueError, match="pipeline_parallel_size 2 with async scheduling off"):
        Deployment(max_model_len=4096, pipeline_parallel_size=2, async_scheduling=False)


def test_the_space_searches_stages_only_when_asked() -> None:
    """Off by default (the space's fingerprint and size as before the knob); ``--space
    pipeline_parallel_size=1,2`` counts a replica's GPUs as TP x PP against the budget, and a
    deployment with stages searches {1, P}, each trial with stages scheduling asynchronously."""
    from servesim.services.tune import _fixed
    from servesim.tuning.jobs import TrialSpec, build_deployment
    from servesim.tuning.space import Knob, SearchSpace

    base = SearchSpace()
    assert "pipeline_parallel_size" in base.knobs_off() and "pipeline_parallel_size" not in base.describe()
    small = base.with_overrides(
        {
            k: Knob(choices=[v])
            for k, v in {
                "max_num_seqs": 64,
                "max_num_batched_tokens": 2048,
                "enable_chunked_prefill": True,
                "long_prefill_token_threshold": 0,
                "enable_prefix_caching": True,
                "block_size": 16,
                "gpu_memory_utilization": 0.9,
                "queue_timeout_s": None,
            }.items()
        }
        | {"tensor_parallel_size": Knob(choices=[1, 2]), "replicas": Knob(low=1, high=4)}
    )
    assert small.size(max_gpus=4) == 4 + 2  # TP 1: 1-4 replicas; TP 2: 1-2
    staged = small.with_overrides({"pipeline_parallel_size": Knob(choices=[1, 2])})
    assert staged.fingerprint() != small.fingerprint()
    # (tp, pp) = (1,1): 4, (1,2): 2, (2,1): 2, (2,2): 1 replica counts within 4 GPUs
    assert staged.size(max_gpus=4) == 4 + 2 + 2 + 1
    grid = staged.grid(max_gpus=4)
    assert len(grid) == 9
    assert all(
        g["replicas"] * g["tensor_parallel_size"] * g.get("pipeline_parallel_size", 1) <= 4 for g in grid
    )
    assert all("pipeline_parallel_size" not in g or g["pipeline_parallel_size"] == 2 for g in grid)
    spec = DeploymentSpec(model="llama-3.1-70b", gpu="h100", tp=2, engine={"pipeline_parallel_size": 2})
    _, searched = _fixed(spec, SearchSpace())
    assert searched.pipeline_parallel_size.choices == [1, 2]
    trial = TrialSpec(target_rate=1.0, fixed={"max_model_len": 4096})
    d = build_deployment(trial, {"tensor_parallel_size": 2, "pipeline_parallel_size": 2})
    assert d.async_scheduling and d.parallelism == "TP 2 x PP 2" and d.gpus == 4
