"""What the Tune tab (and the report) show of a study, as a person reads it (issue 46 item 9g):
no empty table, trials named as the verdict reads, importance by vllm serve flag."""

from __future__ import annotations

import json
from pathlib import Path

from servesim.tuning import TuneResult
from servesim.tuning.recommend import SchedulerRecommendation
from servesim.views.importance import importance_view
from servesim.views.recommendation import recommendation_view
from servesim.views.trials import trial_choices, trials_view

DOC = json.loads((Path(__file__).resolve().parents[2] / "examples" / "demo" / "tune.json").read_text())
STUDY = TuneResult.model_validate(DOC["study"])
REC = SchedulerRecommendation.model_validate(DOC["recommendation"])


def test_a_study_with_feasible_trials_shows_no_empty_table() -> None:
    assert STUDY.n_feasible > 0 and not STUDY.infeasible
    tables = trials_view(STUDY).tables
    assert all(t.rows for t in tables)
    assert "infeasible" not in [t.key for t in tables]  # "what each trial broke": nothing broke
    assert REC.capacity is None and all(t.rows for t in recommendation_view(REC).tables)
    assert "capacity" not in [t.key for t in recommendation_view(REC).tables]  # no search was needed
    no_front = STUDY.model_copy(update={"pareto_front": []})
    assert [t.key for t in trials_view(no_front).tables] == ["best_trials"]


def test_trials_are_named_as_the_verdict_reads() -> None:
    assert REC.verdict == "keep"
    labels = dict(trial_choices(STUDY, REC))
    assert list(labels) == [n for n in STUDY.ranked if n in labels]
    assert not any("(best)" in x for x in labels.values())
    kept = [n for n, x in labels.items() if "(kept: the verdict keeps these settings)" in x]
    assert kept and labels[kept[0]].startswith(f"trial {kept[0]} (kept")
    # the case: the top trial is not what the verdict keeps
    other = REC.model_copy(update={"deployment": REC.deployment.model_copy(update={"max_num_seqs": 7})})
    top = trial_choices(STUDY, other)[0][1]
    assert "(top-ranked in the search; not recommended: the verdict keeps the baseline)" in top, top
    # a change: the trial that ran the recommended settings says so
    n = STUDY.ranked[1]
    params = next(t.params for t in STUDY.trials if t.number == n)
    change = REC.model_copy(
        update={"verdict": "change", "deployment": REC.deployment.model_copy(update=params)}
    )
    assert f"trial {n} (recommended)" in dict(trial_choices(STUDY, change))[n]


def test_importance_names_the_vllm_flags() -> None:
    view = importance_view(
        {
            "max_num_seqs": 0.5,
            "max_num_batched_tokens:[2048..8192]": 0.2,
            "max_num_batched_tokens": 0.2,
            "replicas": 0.1,
        },
        "goodput_per_gpu",
    )
    rows = view.tables[0].rows
    assert [r[0] for r in rows] == ["--max-num-seqs", "--max-num-batched-tokens", "replicas"]
    assert abs(rows[1][1] - 0.4) < 1e-9
