"""``tune --gpu-types``: one study per GPU type, memory fit checked first, the cheapest meeting the
SLO recommended with its $/hour, $ per 1M output tokens and GPU-hours a day."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.perf.prices import load_prices
from servesim.services.capacity import Execution
from servesim.services.gpu_types import GpuTypeRow, GpuTypesAnswer, choose, compare_gpu_types
from servesim.services.inputs import TraceInput
from servesim.services.tune import TuneRequest
from servesim.spec import DeploymentSpec, PercentileSLO
from servesim.tuning import SearchSpace, parse_space

SPACE = ["max_num_seqs=64", "max_num_batched_tokens=2048", "replicas=1..2", "tensor_parallel_size=1"]
ARGS = [
    "tune", "poisson_5_rps", "-n", "150", "--target-rate", "5", "--executor", "local",
    "--slo", "ttft_p99_ms=2000,tpot_p99_ms=200", "--trials", "2", "--trial-seeds", "1",
    "--verify-seeds", "1", "--storage", "memory",
    *[x for s in SPACE for x in ("--space", s)],
]  # fmt: skip


def _request(
    model: str, gpus: list[str], prices: dict[str, float] | None = None, space: list[str] = SPACE
) -> TuneRequest:
    return TuneRequest(
        trace=TraceInput(source="poisson_5_rps", num_requests=150),
        deployment=DeploymentSpec(model=model),
        slo=PercentileSLO(ttft_p99_ms=2000, tpot_p99_ms=200),
        target_rate=5,
        trials=2,
        trial_seeds=1,
        verify_seeds=1,
        space=parse_space(space, SearchSpace()),
        gpu_prices=prices or {},
        gpu_types=gpus,
        storage=None,
        execution=Execution(executor="local"),
    )


def test_two_gpu_types_priced_and_the_cheapest_chosen() -> None:
    res = compare_gpu_types(_request("llama-3.1-8b", ["h100", "l40s"], {"l40s": 0.9}))
    ans = res.answer
    assert [r.gpu for r in ans.rows] == ["h100", "l40s"] and ans.cheapest in ("h100", "l40s")
    table = load_prices({"l40s": 0.9})
    for r in ans.rows:
        assert r.feasible and r.usd_per_gpu_hour == table.price(r.gpu).usd_per_gpu_hour
        assert r.replicas is not None and r.tensor_parallel_size is not None and r.usd_per_hour is not None
        assert math.isclose(r.usd_per_hour, r.replicas * r.tensor_parallel_size * r.usd_per_gpu_hour)
        assert r.output_tokens_per_s and r.usd_per_1m_output_tokens is not None
        closed = r.usd_per_hour / 3600.0 / r.output_tokens_per_s * 1e6
        assert math.isclose(r.usd_per_1m_output_tokens, closed, rel_tol=1e-9)
        assert r.gpu_hours_per_day == 24.0 * r.replicas * r.tensor_parallel_size
    assert ans.rows[1].price_source == "given" and "lambda" in ans.rows[0].price_source.lower()
    chosen = res.chosen
    assert chosen is not None and chosen.recommendation is not None
    plan = chosen.recommendation.deploy
    assert plan is not None and plan.gpu == ans.cheapest
    assert ans.cheapest == choose(ans.rows, True)
    best = min((r for r in ans.rows if r.meets_slo), key=lambda r: r.usd_per_hour or 0)
    assert best.gpu == ans.cheapest
    # the recommended vllm serve command stays a plain command of the chosen deployment
    assert plan.commands and all("vllm serve" in c for c in plan.commands)


def test_a_gpu_that_cannot_hold_the_model_is_infeasible_with_the_reason() -> None:
    # mistral-nemo-12b's ~24 GB of BF16 weights on one 24 GB L4 (TP fixed at 1 by the space)
    res = compare_gpu_types(_request("mistral-nemo-12b", ["l4", "l40s"]))
    rows = {r.gpu: r for r in res.answer.rows}
    assert not rows["l4"].feasible and rows["l4"].reason is not None
    assert "does not fit" in rows["l4"].reason and "TP 1" in rows["l4"].reason
    assert rows["l40s"].feasible and res.answer.cheapest in ("l40s", None)
    assert "l4" not in res.answers  # no trial ran on it


def test_a_gpu_that_needs_tp_gets_a_baseline_that_fits() -> None:
    # TP 1 cannot hold mistral-nemo-12b on an L4, TP 2 can: vllm serve's defaults at TP 2 are the
    # baseline, and the type is compared like any other
    space = [*SPACE[:-1], "tensor_parallel_size=1,2"]
    res = compare_gpu_types(_request("mistral-nemo-12b", ["l4"], space=space))
    (row,) = res.answer.rows
    assert row.feasible and row.tensor_parallel_size == 2, row
    assert res.answers["l4"].request.deployment.tp == 2


def test_the_rule_prefers_the_slo_then_the_lower_hourly_price() -> None:
    def row(gpu: str, hour: float, meets: bool) -> GpuTypeRow:
        return GpuTypeRow(
            gpu=gpu, usd_per_gpu_hour=1, price_source="given", feasible=True, meets_slo=meets,
            usd_per_hour=hour, usd_per_1m_output_tokens=hour,
        )  # fmt: skip

    assert choose([row("a", 1, False), row("b", 5, True), row("c", 3, True)], True) == "c"
    assert choose([row("a", 1, False)], True) is None
    assert choose([row("a", 2, False), row("b", 1, False)], False) == "b"


def test_cli_human_json_and_report(tmp_path: Path) -> None:
    args = [*ARGS, "--gpu-types", "h100,l40s", "--gpu-price", "l40s=0.9"]
    saved = tmp_path / "g.json"
    res = CliRunner().invoke(app, [*args, "--json", "--out", str(saved)])
    assert res.exit_code == 0, res.output
    doc = json.loads(saved.read_text())
    ans = GpuTypesAnswer.model_validate(doc["gpu_types"])
    plan = doc["recommendation"]["deploy"]
    assert doc["kind"] == "tune" and plan["gpu"] == ans.cheapest
    assert plan["usd_per_hour"] == pytest.approx(plan["gpus"] * plan["usd_per_gpu_hour"])
    assert plan["gpu_hours_per_day"] == 24 * plan["gpus"] and plan["usd_per_1m_output_tokens"] > 0
    human = CliRunner().invoke(app, args)
    assert human.exit_code == 0, human.output
    out = human.output
    assert "GPU types (* chosen)" in out and "rule: the cheapest that meets the SLO" in out
    assert f"cheapest GPU type: {ans.cheapest}" in out and "/hour" in out
    assert "per 1M output tokens" in out and "GPU-hours a day" in out
    assert "l40s: given" in out and "vllm serve" in out
    rep = CliRunner().invoke(app, ["report", str(saved), "--out", str(tmp_path / "r"), "--format", "md"])
    assert rep.exit_code == 0, rep.output
    md = (tmp_path / "r" / "report.md").read_text()
    assert "The cheapest deployment across GPU types" in md and f"cheapest GPU type: {ans.cheapest}" in md


def test_plain_tune_prices_at_the_gpu_list_price() -> None:
    res = CliRunner().invoke(app, [*ARGS, "--gpu", "h100", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)["recommendation"]["deploy"]
    h100 = load_prices().price("h100")
    assert plan["usd_per_gpu_hour"] == h100.usd_per_gpu_hour and plan["gpu"] == "h100"
    assert h100.source in plan["price_source"] and plan["usd_per_hour"] > 0


def test_a_baseline_that_cannot_run_is_not_compared_with() -> None:
    # vllm serve's TP 1 cannot hold mistral-nemo-12b on an L4: the recommendation is a TP 2 one
    space = ["tensor_parallel_size=1,2", "max_num_seqs=64", "max_num_batched_tokens=2048", "replicas=1"]
    args = [
        "tune", "poisson_5_rps", "-n", "150", "--target-rate", "5", "--model", "mistral-nemo-12b",
        "--gpu", "l4", "--slo", "ttft_p99_ms=2000,tpot_p99_ms=200", "--trials", "3",
        "--trial-seeds", "1", "--verify-seeds", "1", "--storage", "memory", "--executor", "local",
        *[x for s in space for x in ("--space", s)], "--json",
    ]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)["recommendation"]
    assert rec["deployment"]["tensor_parallel_size"] == 2 and rec["deploy"]["gpu"] == "l4"
    plan = rec["deploy"]
    assert plan["usd_per_hour"] == pytest.approx(plan["gpus"] * load_prices().price("l4").usd_per_gpu_hour)


@pytest.mark.parametrize(
    ("update", "words"),
    [
        ({"deployment": DeploymentSpec(gpu="h100")}, "--gpu sets one GPU"),
        ({"gpu_hour_usd": 2.5}, "--gpu-hour-usd prices one GPU"),
        ({"deployment": DeploymentSpec(linear_step_time=True)}, "roofline step-time model"),
        ({"recommend": False}, "drop --no-recommend"),
        ({"gpu_types": ["h100", "tpu"]}, "unknown GPU 'tpu'"),
    ],
)
def test_the_service_refuses_what_cannot_go_with_gpu_types(update: dict[str, object], words: str) -> None:
    """Every interface gets the refusal from the service, before any trace is read or trial run."""
    from servesim.errors import InputError

    with pytest.raises(InputError, match=words):
        compare_gpu_types(_request("llama-3.1-8b", ["h100", "l40s"]).model_copy(update=update))
