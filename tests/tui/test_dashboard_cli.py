"""`servesim dashboard` from a shell: --headless prints what `simulate` prints for the same inputs,
--ui simple prints progress lines, bad flags are one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
FLAGS = ["bursty", "-n", "150", "--max-num-seqs", "16", "--num-gpu-blocks", "600", "--slo", "ttft_p99_ms=800"]


def test_headless_prints_the_summary_simulate_prints() -> None:
    dash = runner.invoke(app, ["dashboard", *FLAGS, "--headless"])
    sim = runner.invoke(app, ["simulate", *FLAGS])
    assert dash.exit_code == 0 and sim.exit_code == 0, dash.output + sim.output
    assert dash.stdout == sim.stdout
    assert "TTFT" in dash.stdout and "goodput" in dash.stdout


def test_headless_json_is_simulates_report() -> None:
    dash = json.loads(runner.invoke(app, ["dashboard", *FLAGS, "--headless", "--json"]).stdout)
    sim = json.loads(runner.invoke(app, ["simulate", *FLAGS, "--json"]).stdout)
    assert dash == sim


def test_headless_with_a_cpu_tier_is_simulates_report() -> None:
    """Issue 31.4: --kv-offloading-size runs vLLM's CPU tier in the dashboard too (it stopped with
    'needs a connector'): --headless --json is simulate's document, the tier's figures included."""
    flags = [*FLAGS, "--kv-offloading-size", "2"]
    res = runner.invoke(app, ["dashboard", *flags, "--headless", "--json"])
    assert res.exit_code == 0, res.output
    dash, sim = json.loads(res.stdout), json.loads(runner.invoke(app, ["simulate", *flags, "--json"]).stdout)
    assert dash == sim and dash["summary"]["offload"]["stored_tokens"] > 0


def test_headless_cluster_with_a_failure_is_the_cluster_commands_row() -> None:
    args = ["bursty", "-n", "150", "--fail", "n1@4", "--json"]
    dash = json.loads(runner.invoke(app, ["dashboard", *args, "--replicas", "2", "--headless"]).stdout)
    clus = json.loads(
        runner.invoke(app, ["cluster", *args, "--replicas", "2", "--recovery", "planner"]).stdout
    )
    assert dash == clus
    assert dash["strategies"][0]["interrupted"] > 0


def test_simple_ui_prints_progress_lines_then_the_summary() -> None:
    res = runner.invoke(app, ["dashboard", *FLAGS, "--ui", "simple", "--speed", "1000x"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("t ") and "done 150/150" in lines[0] and "running" in lines[0]
    assert any("TTFT" in line for line in lines[1:])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speed", "fast"], "--speed 'fast'"),
        (["--ui", "fancy"], "--ui 'fancy'"),
        (["--replicas", "2", "--fail", "n7@1"], "the replicas are n0, n1"),  # servesim cluster's words
        (["--fail", "n0"], "NODE@TIME"),
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--json"], "--json needs --headless"),
    ],
)
def test_bad_flags_are_one_line_errors(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["dashboard", "bursty", "-n", "20", *args])
    assert res.exit_code == 2
    assert message in res.stderr and "Traceback" not in res.output


PD = [
    "poisson_20_rps",
    "-n",
    "120",
    "--step-time-ms",
    "10",
    "--prefill-replicas",
    "1",
    "--decode-replicas",
    "2",
]


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["--fail", "d1@1.5+1", "--link", "tcp-25g", "--short-prompt-tokens", "200"],
        ["--slo", "ttft_p99_ms=150,tpot_p99_ms=12"],
    ],
)
def test_headless_pd_json_is_the_cluster_commands_document(extra: list[str]) -> None:
    """A disaggregated run: --headless --json is what `servesim cluster --prefill-replicas ...
    --json` prints for the same flags, per-request legs included."""
    dash = runner.invoke(app, ["dashboard", *PD, *extra, "--headless", "--json"])
    clus = runner.invoke(app, ["cluster", *PD, *extra, "--json"])
    assert dash.exit_code == 0 and clus.exit_code == 0, dash.output + clus.output
    doc = json.loads(dash.stdout)
    assert doc == json.loads(clus.stdout)
    assert doc["summary"]["num_requests"] == 120 and doc["summary"]["legs"]["transfer"]["mean_ms"] > 0
    assert doc["run"]["disaggregated"]["decode"]["replicas"] == 2
    if "--fail" in extra:
        assert [f["node"] for f in doc["failures"]] == ["d1"] and doc["summary"]["num_local"] > 0
    if "--slo" in extra:  # judged by the same SLO, recorded in the run
        assert doc["run"]["slo"]["ttft_p99_ms"] == 150 and 0 < doc["summary"]["num_good"] <= 120


def test_headless_pd_out_and_human_output_are_the_cluster_commands(tmp_path: Path) -> None:
    out = tmp_path / "pd.json"
    dash = runner.invoke(app, ["dashboard", *PD, "--headless", "--out", str(out)])
    clus = runner.invoke(app, ["cluster", *PD])
    assert dash.exit_code == 0 and clus.exit_code == 0, dash.output + clus.output
    assert dash.stdout == clus.stdout + f"result written to {out}\n"
    assert "per leg over 120 disaggregated requests" in dash.stdout and "1P2D, link rdma-400g" in dash.stdout
    assert json.loads(out.read_text()) == json.loads(runner.invoke(app, ["cluster", *PD, "--json"]).stdout)


def test_simple_ui_of_a_pd_run_prints_its_transfers() -> None:
    res = runner.invoke(app, ["dashboard", *PD, "--ui", "simple", "--speed", "20x"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("t ") and "KV-wait" in lines[0] and "transfers" in lines[0]
    assert any(line.startswith("per leg over 120 disaggregated requests") for line in lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefill-replicas", "1"], "--prefill-replicas and --decode-replicas go together"),
        (["--decode-replicas", "2"], "--prefill-replicas and --decode-replicas go together"),
        (
            ["--prefill-replicas", "1", "--decode-replicas", "2", "--fail", "d5@1"],
            "no replica 'd5': the decode pool has 2 (0..1)",
        ),
        (["--prefill-replicas", "1", "--decode-replicas", "2", "--fail", "n0@1"], "unknown replica 'n0'"),
        (["--prefill-replicas", "1", "--decode-replicas", "1", "--link", "pigeon"], "unknown link 'pigeon'"),
        (
            ["--prefill-replicas", "1", "--decode-replicas", "1", "--replicas", "3"],
            "--replicas is for an aggregated cluster",
        ),
        (
            ["--prefill-replicas", "1", "--decode-replicas", "1", "--router", "random"],
            "--router is for an aggregated cluster",
        ),
        (["--prefill-replicas", "0", "--decode-replicas", "1"], "--prefill-replicas"),
        (["--link", "tcp-25g"], "--link and --short-prompt-tokens are for a disaggregated cluster"),
        (["--prefill-replicas", "1", "--decode-replicas", "1", "--json"], "--json needs --headless"),
        (
            [
                "--prefill-replicas",
                "1",
                "--decode-replicas",
                "1",
                "--model",
                "llama-3.1-8b",
                "--step-time-ms",
                "5",
            ],
            "--model/--gpu choose roofline step times",
        ),
    ],
)
def test_bad_pd_flags_are_one_line_errors(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["dashboard", "poisson_20_rps", "-n", "20", *args])
    assert res.exit_code == 2, res.output
    assert message in res.stderr and "Traceback" not in res.output


def test_engine_flags_of_a_pd_dashboard_are_both_pools_config(tmp_path: Path) -> None:
    """--config keys go to both pools, as for `servesim cluster`; the dashboard's engine flags
    over them too: --max-num-seqs 8 runs what a --config file with max_num_seqs 8 runs."""
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("max_num_seqs: 8\n")
    clus = json.loads(runner.invoke(app, ["cluster", *PD, "--config", str(cfg), "--json"]).stdout)
    by_file = runner.invoke(app, ["dashboard", *PD, "--config", str(cfg), "--headless", "--json"])
    by_flag = runner.invoke(app, ["dashboard", *PD, "--max-num-seqs", "8", "--headless", "--json"])
    assert by_file.exit_code == 0 and by_flag.exit_code == 0, by_file.output + by_flag.output
    assert json.loads(by_file.stdout) == clus == json.loads(by_flag.stdout)
    assert clus["run"]["disaggregated"]["prefill"]["engine"] == {"max_num_seqs": 8}
    assert clus["run"]["disaggregated"]["decode"]["engine"] == {"max_num_seqs": 8}


def _first_dashboard_line(path: Path) -> list[str]:
    line = next(
        x for x in path.read_text(encoding="utf-8").splitlines() if x.startswith("servesim dashboard ")
    )
    return line.split("  #")[0].split()[2:]


def test_the_documented_dashboard_run_queues_and_preempts() -> None:
    """Issue 46: the README's dashboard example never queued or preempted. Its line (and the first
    of docs/dashboard.md, the same run), run headless, has a waiting queue and preemptions."""
    root = Path(__file__).resolve().parents[2]
    readme, doc = (
        _first_dashboard_line(root / "README.md"),
        _first_dashboard_line(root / "docs" / "dashboard.md"),
    )
    assert readme == doc
    args = [a for i, a in enumerate(readme) if a != "--speed" and readme[i - 1] != "--speed"]
    res = runner.invoke(app, ["dashboard", *args, "--headless", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)["summary"]
    assert s["max_waiting"] >= 20 and s["num_preemptions"] >= 20 and s["num_preempted_requests"] >= 20
    human = runner.invoke(app, ["dashboard", *args, "--headless"]).stdout
    assert f"(max {s['max_waiting']})" in human
    assert re.search(rf"preemptions\s*│\s*{s['num_preemptions']} \(", human), human
