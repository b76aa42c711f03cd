"""``servesim report`` from a user's shell: which result is which, clear errors naming the file,
byte-identical Markdown, and the diff of two configurations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"  # (not from conftest: xdist mixes them)


def _simulate(tmp_path: Path, name: str, *flags: str) -> Path:
    out = tmp_path / name
    args = ["simulate", "poisson_20_rps", "-n", "300", "--num-gpu-blocks", "2000", "--slo", "ttft_p99_ms=200"]
    res = runner.invoke(app, [*args, *flags, "--no-requests", "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def test_each_result_is_recognised_by_its_shape(example_docs: list[Path], tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["report", *map(str, example_docs), "--out", str(tmp_path), "--format", "md", "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [i["kind"] for i in out["inputs"]] == [
        "simulate",
        "saturate",
        "tune",
        "cluster",
        "recover",
        "reschedule",
        "advise",
    ]
    md = (tmp_path / "report.md").read_text()
    for heading in (
        "saturation sweep",
        "tuning study and recommendation",
        "recovery decisions",
        "rescheduling of interrupted requests",
        "advisor",
        "## Definitions",
        "## Provenance",
    ):
        assert heading in md
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct" in md
    assert "answered by the rules advisor" in md
    assert "Calibration of profile" in md  # the calibration caveat of the roofline step times


def test_markdown_is_byte_identical_and_holds_no_machine_path(
    example_docs: list[Path], tmp_path: Path
) -> None:
    for d in ("a", "b"):
        res = runner.invoke(app, ["report", *map(str, example_docs), "--out", str(tmp_path / d), "-f", "md"])
        assert res.exit_code == 0, res.output
    a, b = (tmp_path / "a" / "report.md").read_bytes(), (tmp_path / "b" / "report.md").read_bytes()
    assert a == b
    assert str(tmp_path).encode() not in a and str(example_docs[0].parent).encode() not in a


def test_two_configurations_are_diffed(tmp_path: Path) -> None:
    a = _simulate(tmp_path, "a.json", "--max-num-seqs", "256")
    b = _simulate(tmp_path, "b.json", "--max-num-seqs", "8")
    res = runner.invoke(app, ["report", str(a), str(b), "--out", str(tmp_path / "diff"), "-f", "md,html"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "diff" / "report.md").read_text()
    assert "## 1. what changed (simulate)" in md
    assert "| max_num_seqs | 256 | 8 |" in md
    ra, rb = (json.loads(p.read_text())["summary"] for p in (a, b))
    assert ra["ttft_ms"]["p99"] != rb["ttft_ms"]["p99"]
    assert "TTFT p99 ms" in md.split("figures that moved")[1].split("##")[0]
    assert "## 2. A: " in md and "## 3. B: " in md
    assert (tmp_path / "diff" / "report.html").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a JSON document (line 1"),
        ('{"hello": 1}', "not a servesim result (found hello)"),
        ("[1, 2]", "not a servesim result (found list)"),
    ],
)
def test_a_file_that_is_no_result_gets_an_error_naming_it(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    res = runner.invoke(app, ["report", str(bad), "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert f"error: {bad}: {message}" in res.stderr
    assert "Traceback" not in res.output


def test_missing_file_and_unknown_format_are_one_line_errors(
    tmp_path: Path, example_docs: list[Path]
) -> None:
    res = runner.invoke(app, ["report", str(tmp_path / "nope.json")])
    assert res.exit_code == 2 and "nope.json: cannot read it" in res.stderr
    res = runner.invoke(app, ["report", str(example_docs[0]), "--format", "docx"])
    assert res.exit_code == 2 and "--format 'docx': use html, md or pdf" in res.stderr


def test_simulate_json_carries_the_views_the_report_draws(tmp_path: Path) -> None:
    doc = json.loads(_simulate(tmp_path, "s.json").read_text())
    keys = [s["key"] for s in doc["sections"]]
    assert keys == ["workload", "simulation"]
    sim = doc["sections"][1]
    assert {s["key"] for s in sim["series"]} >= {"kv_usage", "preemptions", "num_running"}
    res = runner.invoke(app, ["simulate", "poisson_20_rps", "-n", "50", "--json", "--no-views"])
    assert "sections" not in json.loads(res.stdout)


def test_the_diff_overlays_both_runs_as_the_web_compare_does(tmp_path: Path) -> None:
    """``servesim report A B`` draws the web's overlays (views.compare.overlay_view): each latency's
    histogram and CDF with both runs named in the legend and the SLO marked, and the time series."""
    a = _simulate(tmp_path, "a.json", "--max-num-seqs", "256")
    b = _simulate(tmp_path, "b.json", "--max-num-seqs", "8")
    res = runner.invoke(app, ["report", str(a), str(b), "--out", str(tmp_path / "diff"), "-f", "md,html"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "diff" / "report.md").read_text()
    assert "2 runs overlaid: A: a.json · generator:poisson_20_rps; B: b.json · generator:poisson_20_rps" in md
    for title in (
        "TTFT: CDF, run by run",
        "TTFT: share of requests per bin, run by run",
        "waiting queue, run by run",
    ):
        assert title in md
    html = (tmp_path / "diff" / "report.html").read_text()
    specs = json.loads(
        html.split('<script type="application/json" id="chart-data">')[1]
        .split("</script>")[0]
        .replace("<\\/", "</")
    )
    cdf = next(s for s in specs.values() if s["layout"]["title"]["text"] == "TTFT: CDF, run by run")
    names = ["A: a.json · generator:poisson_20_rps", "B: b.json · generator:poisson_20_rps"]
    assert [t["name"] for t in cdf["data"]] == names
    assert cdf["layout"]["showlegend"] and cdf["layout"]["xaxis"]["title"]["text"] == "TTFT (ms)"
    assert [s["x0"] for s in cdf["layout"]["shapes"]] == [200.0]  # the SLO, a vertical line


def test_a_diff_of_two_sweeps_compares_their_saturation_points(tmp_path: Path) -> None:
    src = json.loads((DEMO / "saturate.json").read_text())
    b = {**src, "saturation_rps": src["saturation_rps"] * 2}
    (tmp_path / "a.json").write_text(json.dumps(src))
    (tmp_path / "b.json").write_text(json.dumps(b))
    res = runner.invoke(
        app,
        [
            "report",
            str(tmp_path / "a.json"),
            str(tmp_path / "b.json"),
            "--out",
            str(tmp_path / "d"),
            "-f",
            "md",
        ],
    )
    assert res.exit_code == 0, res.output
    md = (tmp_path / "d" / "report.md").read_text()
    assert "saturation points" in md and "B saturates at 2.00x the rate of A" in md
    assert "TTFT p99 against offered load, sweep by sweep" in md


def test_a_diff_of_two_studies_compares_best_configs_and_fronts(tmp_path: Path) -> None:
    src = json.loads((DEMO / "tune.json").read_text())
    best = src["study"]["best"]
    other = {
        **src,
        "study": {**src["study"], "best": {**best, "params": {**best["params"], "max_num_seqs": 7}}},
    }
    (tmp_path / "a.json").write_text(json.dumps(src))
    (tmp_path / "b.json").write_text(json.dumps(other))
    out = tmp_path / "d"
    res = runner.invoke(
        app, ["report", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(out), "-f", "md"]
    )
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text()
    assert "best configuration of each study" in md
    row = next(line for line in md.splitlines() if line.startswith("| max_num_seqs |"))
    assert row.replace(" ", "").endswith("|7|differs|"), row


def _conversations(tmp_path: Path) -> Path:
    """Turns that repeat more than a 600-block GPU cache keeps between them (a CPU tier's case)."""
    rows = [
        {"req_id": f"c{c}t{t}", "arrival_time_s": t * 6.0 + c * 0.05, "prompt_len": 1600 + 500 * t,
         "output_len": 40, "prefix_group": f"conv{c}", "prefix_len": 1500 + 500 * t}
        for t in range(3) for c in range(16)
    ]  # fmt: skip
    trace = tmp_path / "mt.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return trace


def test_the_report_shows_the_cpu_tier_of_a_run_and_of_a_cluster(tmp_path: Path) -> None:
    """Issue 31.4: a simulate result with --kv-offloading-size reports its CPU tier (GPU and CPU
    hit rates, tokens loaded, stored, recomputed) and a cluster result each replica's tier, with
    the figures of the result document; without a tier the report has no such table."""
    trace = _conversations(tmp_path)
    sim = tmp_path / "sim.json"
    args = ["simulate", str(trace), "--num-gpu-blocks", "600", "--no-requests"]
    res = runner.invoke(app, [*args, "--kv-offloading-size", "16", "--out", str(sim)])
    assert res.exit_code == 0, res.output
    off = json.loads(sim.read_text())["summary"]["offload"]
    assert off["loaded_tokens"] > 0
    res = runner.invoke(app, ["report", str(sim), "--out", str(tmp_path / "r1"), "-f", "md"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "r1" / "report.md").read_text()
    assert (
        "CPU offload tier" in md and f"{off['loaded_tokens']:,}" in md and f"{off['stored_tokens']:,}" in md
    )
    assert f"{off['cpu_hit_rate']:.1%}" in md and "GPU prefix-hit rate" in md and "tokens recomputed" in md
    plain = tmp_path / "plain.json"
    assert runner.invoke(app, [*args, "--out", str(plain)]).exit_code == 0
    assert (
        runner.invoke(app, ["report", str(plain), "--out", str(tmp_path / "r0"), "-f", "md"]).exit_code == 0
    )
    assert "CPU offload" not in (tmp_path / "r0" / "report.md").read_text()

    cfg = tmp_path / "tier.yaml"
    cfg.write_text("num_gpu_blocks: 600\nkv_offloading_size: 16\n")
    clu = tmp_path / "cluster.json"
    res = runner.invoke(
        app,
        [
            "cluster",
            str(trace),
            "--replicas",
            "2",
            "-c",
            str(cfg),
            "--recovery",
            "migrate",
            "--fail",
            "n1@9",
            "--out",
            str(clu),
        ],
    )
    assert res.exit_code == 0, res.output
    tiers = json.loads(clu.read_text())["offload"]["migrate"]
    res = runner.invoke(app, ["report", str(clu), "--out", str(tmp_path / "r2"), "-f", "md"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "r2" / "report.md").read_text()
    assert "CPU offload tiers" in md
    for name in ("fleet", "n0", "n1"):
        fig = tiers["fleet"] if name == "fleet" else tiers["replicas"][name]
        row = next(ln for ln in md.splitlines() if ln.startswith(f"| migrate | {name} |"))
        assert f"{fig['loaded_tokens']:,}" in row and f"{100 * fig['cpu_hit_rate']:.1f}" in row, row


def test_a_speculating_run_reports_accepted_tokens_per_step(tmp_path: Path) -> None:
    """Issue 33: ``servesim report`` of a speculating simulate document has the web's tiles (the
    shared views): accepted tokens per step as the summary says, the acceptance rate, the series."""
    doc = _simulate(
        tmp_path, "spec.json", "--speculative-config", '{"method":"eagle3","num_speculative_tokens":3}'
    )
    sp = json.loads(doc.read_text())["summary"]["speculative"]
    res = runner.invoke(app, ["report", str(doc), "--out", str(tmp_path / "r"), "-f", "md"])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "r" / "report.md").read_text()
    head = next(ln for ln in md.splitlines() if "accepted tokens per step (k = 3)" in ln and "TTFT" in ln)
    row = md.splitlines()[md.splitlines().index(head) + 2]  # the tiles' values under their header
    assert f"{sp['mean_acceptance_length']:.2f}" in row and f"{sp['acceptance_rate']:.1%}" in row
    assert f"accepted tokens per verifying step (run {sp['mean_acceptance_length']:.2f}, k = 3)" in md


def test_a_previous_report_is_never_replaced_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``servesim report DOC`` without --out writes into the current folder; run again there, it
    stops naming the report it would replace and how to go on (issue 46: it overwrote it)."""
    monkeypatch.chdir(tmp_path)
    doc = str(DEMO / "simulate.json")
    first = runner.invoke(app, ["report", doc, "--format", "md"])
    assert first.exit_code == 0, first.output
    written = (tmp_path / "report.md").read_text(encoding="utf-8")
    (tmp_path / "report.md").write_text("my edited report", encoding="utf-8")
    again = runner.invoke(app, ["report", doc, "--format", "md"])
    assert again.exit_code == 2
    said = " ".join(again.stderr.split())
    assert f"report.md already in {tmp_path.resolve()}" in said and "--out" in said and "--force" in said
    assert (tmp_path / "report.md").read_text(encoding="utf-8") == "my edited report"
    elsewhere = runner.invoke(app, ["report", doc, "--format", "md", "--out", "second"])
    assert elsewhere.exit_code == 0 and (tmp_path / "second" / "report.md").exists()
    forced = runner.invoke(app, ["report", doc, "--format", "md", "--force"])
    assert forced.exit_code == 0 and (tmp_path / "report.md").read_text(encoding="utf-8") == written
    helped = " ".join(runner.invoke(app, ["report", "--help"]).stdout.split())
    assert "never replaced silently" in helped and "--force" in helped
