"""``tune`` searches TP degrees at which one replica holds the model (issue 51: "DeepSeek-V3 on
8xH200"): with the space's default TP choices (1, 2, 4) a model too large for them had every trial
pruned for memory and no answer; now the study searches the smallest power of two that fits, leaves
out the default choices that cannot fit, starts its baseline at the fewest GPUs that hold vllm
serve's defaults, and says so. A TP the user chose is kept."""

from __future__ import annotations

from typing import Any

from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.services.capacity import Execution
from servesim.services.inputs import TraceInput
from servesim.services.tune import TuneRequest, prepare, tune
from servesim.spec import DeploymentSpec
from servesim.tuning import SearchSpace, parse_space


def _request(model: str, gpu: str, space: list[str] | None = None, **extra: Any) -> TuneRequest:
    return TuneRequest(
        trace=TraceInput(source="poisson_2_rps", num_requests=60),
        deployment=DeploymentSpec(model=model, gpu=gpu),
        trials=2,
        trial_seeds=1,
        recommend=False,
        space=parse_space(space or [], SearchSpace()),
        storage=None,
        execution=Execution(executor="local"),
        **extra,
    )


def _tps(answer: Any) -> list[int]:
    return [int(t.params["tensor_parallel_size"]) for t in answer.study.trials]


def test_a_model_too_large_for_the_default_choices_is_searched_at_the_smallest_tp_that_fits() -> None:
    answer = tune(_request("deepseek-v3", "h200"))
    prepared = answer.prepared
    assert prepared.space.tensor_parallel_size.choices == [8]
    assert prepared.hardware.default_tensor_parallel_size == 8  # the baseline: vllm serve's at TP 8
    assert set(_tps(answer)) == {8}
    assert "memory_fit" not in answer.study.invalid_reasons
    note = answer.study.budget_notes[0]
    assert note.startswith("TP 1, 2, 4 cannot hold deepseek-v3 on one h200 replica (at TP 4 the weights need")
    assert "the space searches TP 8, the smallest that fits" in note


def test_default_choices_that_cannot_fit_are_left_out_and_the_baseline_starts_where_it_fits() -> None:
    prepared = prepare(_request("llama-3.1-70b", "h100"))
    assert prepared.space.tensor_parallel_size.choices == [2, 4]  # 140 GB of weights: not on one H100
    # vllm serve's 0.9 memory share holds 70B at TP 4, not 2 (2 fits only at 0.95, the space's top)
    assert prepared.hardware.default_tensor_parallel_size == 4
    assert prepared.tp_notes == ("TP 1 left out of the space: one replica does not fit there",)


def test_a_tp_the_user_chose_is_kept_and_a_model_that_fits_changes_nothing() -> None:
    mine = prepare(_request("deepseek-v3", "h200", ["tensor_parallel_size=4"]))
    assert mine.space.tensor_parallel_size.choices == [4] and mine.tp_notes == ()
    small = prepare(_request("llama-3.1-8b", "h100"))
    assert small.space.tensor_parallel_size == SearchSpace().tensor_parallel_size and small.tp_notes == ()
    # a GPU budget below the smallest TP that fits: nothing to widen to, the trials say why
    capped = prepare(_request("deepseek-v3", "h200", max_gpus=4))
    assert capped.tp_notes == ()


def test_the_cli_says_which_tp_it_searched() -> None:
    run = CliRunner().invoke(
        app,
        ["tune", "poisson_2_rps", "-n", "60", "--model", "deepseek-v3", "--gpu", "h200", "--trials", "2",
         "--trial-seeds", "1", "--no-recommend", "--storage", "memory", "--executor", "local"],
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    text = " ".join(run.output.split())
    assert "the space searches TP 8, the smallest that fits" in text
    assert "[memory_fit]" not in text  # no trial pruned for memory
