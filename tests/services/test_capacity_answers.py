"""The capacity answers themselves (issue 46, items 2, 6 and 7): one capacity number, checked
before work, one list of changes.

* ``saturate`` and ``tune``'s headroom are one search on the same fresh seeds: the same
  deployment gives the same SLO knee and unstable rate; no rate is called "stable" where the SLO
  fails or the queue grows; a knee measured on resampled traffic says so on its line.
* ``tune``, ``saturate`` and ``tune --layouts`` refuse an unknown model or GPU, a TP the model
  cannot split over, or a bad ``--space`` before the first run, naming the flag (these used to
  run every trial and end "no trial ... could run").
* The CLI's verdict, the web's card, the report's first page (HTML, Markdown, PDF) name the same
  changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.engine.step_time import LinearStepTime
from servesim.tuning import (
    Deployment,
    PercentileSLO,
    SaturationSettings,
    SchedulerRecommendation,
    Workload,
    find_saturation,
    recommend,
)
from servesim.tuning.hardware import FixedHardware
from servesim.tuning.stats import QueueTestSettings
from servesim.tuning.workload import fresh_seeds

runner = CliRunner()
FAST = ["--linear-step-time", "--num-gpu-blocks", "3000", "--executor", "local"]
SLO = "ttft_p99_ms=400,tpot_p99_ms=40"
LAYOUTS = ["tune", "poisson_5_rps", "--layouts", "agg", "--gpus", "2"]


def _fast_case() -> tuple[Workload, FixedHardware, PercentileSLO, Deployment]:
    from servesim.traces import preset_spec

    wl = Workload.from_spec(preset_spec("poisson_5_rps").model_copy(update={"num_requests": 120}))
    hw = FixedHardware(LinearStepTime(), 3000)
    d = Deployment(max_num_seqs=32, max_num_batched_tokens=2048, max_model_len=wl.default_max_model_len())
    return wl, hw, PercentileSLO.parse(SLO), d


# ------------------------------------------------------------------------ one capacity number
def test_saturate_and_tunes_headroom_are_one_search_on_the_same_fresh_seeds() -> None:
    from servesim.services.capacity import SaturateRequest
    from servesim.services.tune import TuneRequest

    assert SaturateRequest.model_fields["seeds"].default == TuneRequest.model_fields["verify_seeds"].default
    assert SaturationSettings().seeds == fresh_seeds(3)
    wl, hw, slo, d = _fast_case()
    seeds = fresh_seeds(2)
    st = SaturationSettings(seeds=seeds, rtol=0.05)
    sweep = find_saturation(wl, d, hw, slo, target_rate=wl.base_rate, settings=st, executor="local")
    rec = recommend(
        wl, hw, slo, [d], verify_seeds=seeds, saturation=SaturationSettings(rtol=0.05), executor="local"
    )
    assert rec.deployment == d and sweep.goodput_knee_rps is not None and sweep.saturation_rps is not None
    assert (rec.goodput_knee_rps, rec.saturation_rps) == (sweep.goodput_knee_rps, sweep.saturation_rps)
    assert (rec.knee_headroom, rec.headroom) == (sweep.knee_headroom, sweep.headroom)


def test_no_rate_is_stable_where_the_slo_fails_or_the_queue_grows() -> None:
    """The issue's 17.1 req/s, "stable" with TTFT p99 at 18 s against a 500 ms SLO, reads "over
    the SLO"; a queue that grows as throughput falls behind is "overloaded" or "unstable"."""
    from servesim.views.saturation import curve_table, point_state, saturation_view

    wl, hw, slo, d = _fast_case()
    rep = find_saturation(
        wl, d, hw, slo, settings=SaturationSettings(seeds=[1000], rtol=0.05), executor="local"
    )
    states = [point_state(p) for p in rep.points]
    assert "stable" in states and any(p.slo_ok is False and not p.queue_saturated for p in rep.points)
    cut = QueueTestSettings().min_slope
    for p, state in zip(rep.points, states, strict=True):
        behind = p.throughput_rps.mean < 0.98 * p.offered_rps.mean and p.queue_slope.mean >= cut
        if p.slo_ok is False or p.queue_saturated or behind:
            assert state != "stable", (p.rate_rps, p.slo_ok, p.queue_slope.mean)
    assert [row[1] for row in curve_table(rep).rows] == states
    view = saturation_view(rep)
    words = " ".join([*view.text, *(v.text for v in view.verdicts)])
    assert "stable up to" not in words and "stayed stable" not in words


def test_a_knee_of_resampled_traffic_says_so_on_its_line() -> None:
    """The demo's sweep ran 500 requests drawn from azure-conv's lengths under its own SLO: the
    line that gives its knee says both (the issue's 37.1 req/s said neither)."""
    from servesim.cli.demo_steps import SLO_PERCENTILE, saturate_request
    from servesim.services.capacity import workload_of
    from servesim.views.saturation import workload_text

    words = workload_text(workload_of(saturate_request().trace).describe())
    assert "500 requests generated" in words and "resampled from azure-conv" in words, words
    wl, hw, slo, d = _fast_case()
    rep = find_saturation(
        wl, d, hw, slo, settings=SaturationSettings(seeds=[1000], rtol=0.1), executor="local"
    )
    from servesim.views.saturation import saturation_view

    view = saturation_view(rep)
    knee = next(v.text for v in view.verdicts if v.key == "goodput_knee")
    assert "poisson_5_rps (120 requests generated" in knee and f"SLO {SLO}" in knee, knee
    assert SLO_PERCENTILE != SLO  # the demo's looser SLO is another SLO: its line names it


# ------------------------------------------------------------------------ checked before work
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["tune", "poisson_5_rps", "--gpu", "nonsense"], "--gpu: unknown GPU 'nonsense'"),
        (["tune", "poisson_5_rps", "--model", "llama-3.1-8"], "--model: unknown model 'llama-3.1-8'"),
        (["tune", "poisson_5_rps", "--tp", "3"], "--tp: llama-3.1-8b: 32 attention heads cannot be split"),
        (["tune", "poisson_5_rps", "--space", "bogus=1"], "--space 'bogus=1': unknown knob"),
        (["tune", "poisson_5_rps", "--space", "max_num_seqs=abc"], "--space 'max_num_seqs=abc'"),
        (["saturate", "poisson_5_rps", "--gpu", "nonsense"], "--gpu: unknown GPU 'nonsense'"),
        (["saturate", "poisson_5_rps", "--model", "llama-3.1-8"], "--model: unknown model"),
        (["saturate", "poisson_5_rps", "--tp", "3"], "--tp: llama-3.1-8b"),
        (["tune", "poisson_5_rps", "--profile", "nosuch"], "--profile: unknown profile 'nosuch'"),
        (["saturate", "poisson_5_rps", "--profile", "nosuch"], "--profile: unknown profile 'nosuch'"),
        ([*LAYOUTS, "--gpu", "nonsense"], "--gpu: unknown GPU"),
        ([*LAYOUTS, "--model", "x-1"], "--model: unknown model"),
        ([*LAYOUTS, "--link", "nope"], "nope"),
    ],
)
def test_an_unknown_or_ill_formed_deployment_is_refused_before_the_first_run(
    args: list[str], words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servesim.services.capacity as capacity
    import servesim.services.layouts as layouts
    import servesim.services.tune as tune

    def no_work(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the trace was read: work started before the deployment was checked")

    for module in (capacity, layouts, tune):
        monkeypatch.setattr(module, "workload_of", no_work)
    search = args[0] == "tune" and "--layouts" not in args  # --layouts refuses the search's flags
    more = ["-n", "20", *(["--storage", "memory"] if search else [])]
    res = runner.invoke(app, [*args, *more])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert words in res.stderr, res.stderr


# ------------------------------------------------------------------------ one list of changes
@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """A study whose baseline (--max-num-seqs 2: the queue cannot keep up) must change."""
    args = [
        "tune",
        "poisson_5_rps",
        "-n",
        "120",
        *FAST,
        "--max-num-seqs",
        "2",
        "--slo",
        SLO,
        "--trials",
        "3",
        "--trial-seeds",
        "1",
        "--verify-seeds",
        "1",
        "--space",
        "max_num_seqs=2,32",
        "--space",
        "replicas=1",
        "--storage",
        "memory",
    ]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    human = runner.invoke(app, args)
    assert human.exit_code == 0, human.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc, human.stdout


def test_the_cli_the_web_card_and_the_report_name_the_same_changes(
    changed: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    from servesim.report import Document, build_report
    from servesim.report.markdown import render_markdown
    from servesim.views.recommendation import change_list, changes_text, recommendation_view

    doc, human = changed
    rec = SchedulerRecommendation.model_validate(doc["recommendation"])
    assert rec.verdict == "change" and rec.changes, rec.verdict
    items = change_list(rec)
    assert len(items) == len(rec.changes) and items[0].startswith("--max-num-seqs 2 -> ")
    said = changes_text(rec)
    assert said is not None and said.startswith(f"{len(items)} change")
    card = next(v.text for v in recommendation_view(rec).verdicts if v.key == "verdict")
    assert said in card
    assert said in " ".join(human.split())  # the CLI's verdict line (wrapped on the terminal)
    report = build_report([Document("tune", "tune.json", "sha256:0", doc)], command_line="servesim report")
    assert report.lead is not None and said in report.lead.sentence
    assert said in render_markdown(report)
