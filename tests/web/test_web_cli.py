"""``servesim serve``: refuses what it must before anything listens."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from servesim.cli.main import app

runner = CliRunner()


def test_non_loopback_without_a_token_refuses_and_says_why(tmp_path: Path) -> None:
    r = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--data-dir", str(tmp_path)])
    assert r.exit_code == 2
    assert "refusing to listen on 0.0.0.0" in r.output and "--token" in r.output


def test_token_file_problems_are_one_line_errors(tmp_path: Path) -> None:
    empty = tmp_path / "tok"
    empty.write_text("\n")
    r = runner.invoke(app, ["serve", "--token-file", str(empty), "--data-dir", str(tmp_path)])
    assert r.exit_code == 2 and "token file is empty" in r.output
    r = runner.invoke(app, ["serve", "--token", "x" * 20, "--token-file", str(empty)])
    assert r.exit_code == 2 and "not both" in r.output
    r = runner.invoke(app, ["serve", "--token-file", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "missing" in r.output
    short = tmp_path / "short"
    short.write_text("abc\n")
    r = runner.invoke(app, ["serve", "--host", "0.0.0.0", "--token-file", str(short)])
    assert r.exit_code == 2 and "too short" in r.output and "abc" not in r.output


def test_help_lists_serve() -> None:
    r = runner.invoke(app, ["--help"])
    assert "serve" in r.output
