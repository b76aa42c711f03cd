"""The one rule for outputs (servesim.io): every path a command will write is checked before any
work, the files appear together at the end (or none does), and they get the user's umask.

One test per command that writes; each names the case the old code got wrong (it ran the whole
job, left a complete step log or the manifests behind, then failed on the other path).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()
FAST = ["--step-time-ms", "5", "--num-gpu-blocks", "400"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _invoke(args: list[str]) -> tuple[int, str]:
    res = runner.invoke(app, args)
    assert "Traceback" not in res.output
    if res.exception is not None:
        assert isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.output


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SERVESIM_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "afile").write_text("not a folder\n")
    return tmp_path


def _new_files(folder: Path, before: set[str]) -> set[str]:
    return {f for f in _files(folder) - before if not f.startswith("data")}


def test_simulate_checks_out_before_running_and_leaves_no_step_log(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servesim.engine

    ran: list[int] = []
    real = servesim.engine.simulate  # what every run calls (servesim.services.run)
    monkeypatch.setattr(servesim.engine, "simulate", lambda *a, **k: ran.append(1) or real(*a, **k))
    before = _files(folder)
    code, out = _invoke(
        ["simulate", "default", "-n", "30", *FAST, "--step-log", "s.jsonl", "--out", "afile/run.json"]
    )
    assert code == 2
    assert "--out" in out and "afile is a file, not a folder" in out
    assert ran == []  # refused before any simulation
    assert _new_files(folder, before) == set()


def test_simulate_a_failed_out_write_takes_the_step_log_with_it(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servesim.engine.records as records

    def broken(*_a: object, **_k: object) -> None:
        raise OSError(28, "No space left on device", "req.jsonl")

    monkeypatch.setattr(records, "write_jsonl", broken)
    before = _files(folder)
    code, out = _invoke(
        ["simulate", "default", "-n", "30", *FAST, "--step-log", "s.jsonl", "--requests-out", "req.jsonl"]
    )
    assert code == 2 and "No space left" in out
    assert _new_files(folder, before) == set()


def test_simulate_step_log_and_out_land_together_with_the_umask(folder: Path) -> None:
    old = os.umask(0o022)
    try:
        code, _ = _invoke(
            ["simulate", "default", "-n", "30", *FAST, "--step-log", "s.jsonl", "--out", "new/run.json"]
        )
    finally:
        os.umask(old)
    assert code == 0
    for name in ("s.jsonl", "new/run.json"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644, name
    assert not [p for p in _files(folder) if Path(p).name.startswith(".")]


def test_two_flags_naming_one_file_are_refused(folder: Path) -> None:
    code, out = _invoke(["simulate", "default", "-n", "5", *FAST, "--step-log", "x.json", "--out", "x.json"])
    assert code == 2 and "name the same file" in out
    assert not (folder / "x.json").exists()


def test_simulate_with_no_requests_writes_the_empty_run(folder: Path) -> None:
    code, out = _invoke(["simulate", "default", "-n", "0", *FAST, "--out", "run0.json"])
    assert code == 0
    assert "no requests" in out
    doc = json.loads((folder / "run0.json").read_text())
    assert doc["summary"]["num_requests"] == 0


def test_recover_rejects_the_matrix_name_before_any_manifest(folder: Path) -> None:
    events = EXAMPLES / "failure.json"
    before = _files(folder)
    code, out = _invoke(["recover", str(events), "--outbox", "ob", "--matrix", "m.txt"])
    assert code == 2 and "--matrix" in out and ".csv or .json" in out
    assert _new_files(folder, before) == set()


def test_recover_outbox_that_is_a_file_is_refused(folder: Path) -> None:
    events = EXAMPLES / "failure.json"
    code, out = _invoke(["recover", str(events), "--outbox", "afile", "--matrix", "m.csv"])
    assert code == 2 and "--outbox 'afile': is a file, not a folder" in out
    assert not (folder / "m.csv").exists()


def test_report_pdf_with_a_browser_that_cannot_start_leaves_nothing(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _ = _invoke(["simulate", "default", "-n", "20", *FAST, "--out", "run.json"])
    assert code == 0
    monkeypatch.setenv("SERVESIM_CHROMIUM", "/bin/false")
    code, out = _invoke(["report", "run.json", "-o", "rep", "-f", "html,pdf"])
    assert code == 2
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "printing the PDF" in lines[0], out
    assert not (folder / "rep").exists()


def test_report_out_that_is_a_file_is_refused(folder: Path) -> None:
    code, _ = _invoke(["simulate", "default", "-n", "20", *FAST, "--out", "run.json"])
    code, out = _invoke(["report", "run.json", "-o", "afile"])
    assert code == 2 and "--out 'afile': is a file, not a folder" in out


def test_saturate_checks_out_first(folder: Path) -> None:
    code, out = _invoke(["saturate", "default", "-n", "20", *FAST, "--out", "afile/s.json"])
    assert code == 2 and "afile is a file" in out


def test_tune_checks_out_dir_first(folder: Path) -> None:
    code, out = _invoke(["tune", "default", "-n", "20", "--out-dir", "afile"])
    assert code == 2 and "--out-dir 'afile': is a file, not a folder" in out


def test_advise_checks_action_log_and_outbox_first(folder: Path) -> None:
    code, out = _invoke(["advise", "default", "--action-log", "afile/log.jsonl"])
    assert code == 2 and "--action-log" in out and "afile is a file" in out
    code, out = _invoke(["advise", "default", "--apply", "--outbox", "afile"])
    assert code == 2 and "--outbox 'afile': is a file" in out


def test_generate_and_convert_check_their_outputs(folder: Path) -> None:
    code, out = _invoke(["generate", "default", "-n", "5", "--out", "afile/t.csv"])
    assert code == 2 and "--out" in out and "afile is a file" in out
    code, out = _invoke(["generate", "default", "-n", "5", "--out", "t.csv"])
    assert code == 0
    code, out = _invoke(["trace", "convert", "t.csv", "afile/t.jsonl"])
    assert code == 2 and "DST" in out and "afile is a file" in out
    code, out = _invoke(["generate-failures", "--out", "afile/f.json"])
    assert code == 2 and "afile is a file" in out


def test_an_output_named_as_a_folder_is_refused(folder: Path) -> None:
    (folder / "d").mkdir()
    code, out = _invoke(["simulate", "default", "-n", "5", *FAST, "--out", "d"])
    assert code == 2 and "--out 'd': is a folder, not a file" in out
    code, out = _invoke(["simulate", "default", "-n", "5", *FAST, "--out", "x" * 300 + ".json"])
    assert code == 2 and "longer than 255 bytes" in out


def test_calibrate_and_sim2real_check_their_outputs(folder: Path) -> None:
    code, out = _invoke(["calibrate", "afile", "--out", "afile/p.json"])
    assert code == 2 and "afile is a file" in out
    code, out = _invoke(["sim2real", ".", "--out", "afile/pred.json"])
    assert code == 2 and "afile is a file" in out
