"""`servesim saturate`, `tune` and `scenario` from a shell: --json purity, one-line errors."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from servesim.cli.common import json_bytes
from servesim.cli.main import app
from servesim.tuning import SaturationReport, SchedulerRecommendation, TuneResult

runner = CliRunner()
FAST = ["--linear-step-time", "--num-gpu-blocks", "3000", "--executor", "local"]


def _ok(args: list[str]) -> dict[str, object]:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert res.stderr == ""
    data = json.loads(res.stdout)  # the whole of stdout is the JSON document
    assert isinstance(data, dict)
    return data


def test_saturate_json_is_the_report_alone() -> None:
    args = ["saturate", "poisson_5_rps", "-n", "120", *FAST, "--seeds", "1", "--rtol", "0.1"]
    data = _ok([*args, "--slo", "ttft_p99_ms=400,tpot_p99_ms=40", "--max-num-seqs", "32", "--json"])
    rep = SaturationReport.model_validate(data)
    assert rep.saturation_rps is not None and rep.goodput_knee_rps is not None
    assert rep.target_rate_rps == 5.0 and rep.deployment.max_num_seqs == 32
    assert [p.rate_rps for p in rep.points] == sorted(p.rate_rps for p in rep.points)
    again = runner.invoke(
        app, [*args, "--slo", "ttft_p99_ms=400,tpot_p99_ms=40", "--max-num-seqs", "32", "--json"]
    )
    assert again.stdout == json_bytes(data).decode() + "\n"  # byte-identical


def test_tune_json_study_and_recommendation(tmp_path: Path) -> None:
    out = tmp_path / "outbox"
    data = _ok(
        [
            "tune",
            "poisson_5_rps",
            "-n",
            "120",
            *FAST,
            "--slo",
            "ttft_p99_ms=600,tpot_p99_ms=60",
            "--trials",
            "4",
            "--trial-seeds",
            "1",
            "--verify-seeds",
            "2",
            "--space",
            "replicas=1",
            "--space",
            "enable_chunked_prefill=true",
            "--space",
            "max_num_seqs=16,32",
            "--storage",
            "memory",
            "--out-dir",
            str(out),
            "--json",
        ]
    )
    study = TuneResult.model_validate(data["study"])
    rec = SchedulerRecommendation.model_validate(data["recommendation"])
    assert study.n_trials == 4 and study.storage is None and study.best is not None
    assert rec.requires_human_review and rec.meets_slo and rec.verification_seeds == [1000, 1001]
    assert study.choice is not None and rec.source["trials"][0] == study.choice.chosen == study.shortlist()[0]
    files = sorted(p.name for p in out.iterdir())
    # issue 46: the Kubernetes manifest beside the command, its args the command's
    assert files == ["recommendation.json", "vllm-config.yaml", "vllm-k8s.yaml", "vllm-serve-command.txt"]
    manifest = list(yaml.safe_load_all((out / "vllm-k8s.yaml").read_text()))
    assert [m["kind"] for m in manifest] == ["Deployment", "Service"]
    container = manifest[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] + container["args"] == shlex.split(rec.vllm_serve_command)
    assert SchedulerRecommendation.model_validate_json((out / "recommendation.json").read_text()) == rec
    assert (
        yaml.safe_load((out / "vllm-config.yaml").read_text())["max-num-seqs"] == rec.deployment.max_num_seqs
    )
    assert rec.vllm_serve_command in (out / "vllm-serve-command.txt").read_text()


def test_scenario_json(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            {
                "arrival_distribution": "poisson_100_rps",
                "batch_config": {"max_num_seqs": 4, "max_num_batched_tokens": 1024},
                "requests": [],
            }
        )
    )
    data = _ok(["scenario", str(path), "--json"])
    assert data["scheduler_recommendation"] == "No traffic detected; queue parameters unaffected"
    assert data["simulated_batch_count"] == 0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["saturate", "poisson_5_rps", "--slo", "ttft_ms=500"], "names no percentile"),
        (["saturate", "no-such-trace-or-preset"], "no-such-trace-or-preset"),
        (["saturate", "poisson_5_rps", "--step-time-ms", "10"], "needs --num-gpu-blocks"),
        (
            [
                "saturate",
                "poisson_5_rps",
                *FAST,
                "--no-enable-chunked-prefill",
                "--max-num-batched-tokens",
                "512",
            ],
            "chunked prefill off",
        ),
        (["saturate", "burst", *FAST], "no arrival rate"),
        (["tune", "poisson_5_rps", *FAST, "--space", "bogus=1", "--storage", "memory"], "unknown knob"),
        (
            ["tune", "poisson_5_rps", *FAST, "--space", "replicas=a..b", "--storage", "memory"],
            "not a valid int",
        ),
        (["tune", "poisson_5_rps", *FAST, "--address", "auto", "--storage", "memory"], "only applies"),
        (["scenario", "missing.json"], "missing.json"),
    ],
)
def test_errors_are_one_line_with_exit_code_2(args: list[str], words: str) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
    assert words in res.stderr


def test_scenario_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = runner.invoke(app, ["scenario", str(bad)])
    assert res.exit_code == 2 and "not JSON" in res.stderr
    bad.write_text(json.dumps({"simulated_qps": 5}))
    res = runner.invoke(app, ["scenario", str(bad)])
    assert res.exit_code == 2 and "mean_input_tokens" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_tune_searches_the_offload_size_on_a_kv_pressured_multi_turn_workload(tmp_path: Path) -> None:
    """Issue 31.4: with kv_offloading_size in the space, a conversation workload whose turns
    repeat more than 600 GPU blocks can hold is recommended a CPU tier on its one GPU: the trials
    ran with and without it, the recommendation and its vllm serve command carry it, the plan
    counts its host memory."""
    trace = tmp_path / "mt.jsonl"
    rows = [
        {
            "req_id": f"c{c}t{t}",
            "arrival_time_s": t * 6.0 + c * 0.05,
            "prompt_len": 1600 + 500 * t,
            "output_len": 40,
            "prefix_group": f"conv{c}",
            "prefix_len": 1500 + 500 * t,
        }
        for t in range(4)
        for c in range(24)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fixed = [
        "replicas=1",
        "max_num_seqs=64",
        "max_num_batched_tokens=2048",
        "long_prefill_token_threshold=0",
        "enable_prefix_caching=true",
        "enable_chunked_prefill=true",
        "block_size=16",
        "queue_timeout_s=none",
        "kv_offloading_size=none,16",
    ]
    data = _ok(
        [
            "tune",
            str(trace),
            "--num-gpu-blocks",
            "600",
            "--executor",
            "local",
            "--slo",
            "ttft_p99_ms=2600",
            "--max-gpus",
            "1",
            "--trials",
            "2",
            "--trial-seeds",
            "1",
            "--verify-seeds",
            "1",
            "--storage",
            "memory",
            *[a for f in fixed for a in ("--space", f)],
            "--json",
        ]
    )
    study = TuneResult.model_validate(data["study"])
    rec = SchedulerRecommendation.model_validate(data["recommendation"])
    assert {t.params["kv_offloading_size"] for t in study.trials} == {None, 16.0}
    assert rec.meets_slo and rec.deployment.kv_offloading_size == 16.0 and rec.gpus == 1
    assert "--kv-offloading-size 16 --kv-offloading-backend native" in rec.vllm_serve_command
    assert rec.deploy is not None and rec.deploy.host_memory_gib == 16.0
    assert "kv_offloading_size" in (study.choice.chosen_changes if study.choice else [])


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    ("item", "words"),
    [
        (
            "max_num_seqs=-3",
            "--space 'max_num_seqs=-3': max_num_seqs=-3: input should be greater than or equal to 1",
        ),
        (
            "kv_offloading_size=-3",
            "--space 'kv_offloading_size=-3': kv_offloading_size=-3: input should be greater than 0",
        ),
        (
            "gpu_memory_utilization=0.5..1.5",
            "gpu_memory_utilization=1.5: input should be less than or equal to 1",
        ),
        ("queue_timeout_s=none,0,30", "queue_timeout_s=0: input should be greater than 0"),
    ],
)
def test_a_space_value_outside_its_fields_bounds_is_refused_before_any_trial(
    item: str, words: str, as_json: bool
) -> None:
    """Issue 30.5: every value is checked against the deployment field's own bounds when the space
    is read (these used to run, each trial pruned with an 'invalid_value' naming no field)."""
    args = ["tune", "poisson_5_rps", *FAST, "--space", item, "--storage", "memory", "--trials", "2"]
    res = runner.invoke(app, [*args, "--json"] if as_json else args)
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
    assert words in res.stderr


def test_the_default_study_is_a_journal_in_the_data_folder_and_the_same_command_resumes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --storage: the study is kept in servesim-tune.journal in the data folder (the command
    says where), and running the same command again adds its trials to the same study."""
    monkeypatch.setenv("SERVESIM_DATA_DIR", str(tmp_path / "data"))
    args = ["tune", "poisson_5_rps", "-n", "120", *FAST, "--trials", "2", "--trial-seeds", "1"]
    args += ["--space", "max_num_seqs=16,32", "--no-recommend", "--json"]
    journal = tmp_path / "data" / "servesim-tune.journal"
    counts = []
    for _ in range(2):
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        assert res.stderr.strip().endswith(f"stored in {journal}")
        counts.append(json.loads(res.stdout)["study"]["n_trials"])
    assert counts == [2, 4] and journal.is_file()


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.mkdir(), "is a folder"),
        (
            lambda p: p.write_bytes(b"SQLite format 3\x00" + bytes(84)),
            "is a SQLite database; give it as an RDB URL: sqlite:///",
        ),
        (lambda p: p.write_text("not a journal\n"), "is not an Optuna study journal"),
    ],
)
def test_a_storage_that_is_not_a_study_journal_is_one_line_naming_it(
    tmp_path: Path, make: Callable[[Path], object], words: str
) -> None:
    where = tmp_path / "study.db"
    make(where)
    before = sorted(tmp_path.rglob("*"))
    res = runner.invoke(
        app, ["tune", "poisson_5_rps", "-n", "60", *FAST, "--trials", "1", "--storage", str(where)]
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: --storage: {where}") and len(res.stderr.strip().splitlines()) == 1
    assert words in res.stderr
    assert sorted(tmp_path.rglob("*")) == before  # nothing appended to it, nothing beside it
