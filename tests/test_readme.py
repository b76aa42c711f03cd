"""The README's commands run as typed, on a fresh checkout, and write only what they were asked to.

Every line of the README's ``bash`` blocks is run (continuation lines joined), each block in a
temporary folder of its own holding a copy of ``examples/`` (a block starts with ``make sync &&
source .venv/bin/activate``, as a fresh shell would), with ``servesim`` on PATH as that line puts
it there; ``make`` lines are checked to name real targets (``make test`` would run this suite).
The few lines that take minutes as typed run with fewer trials or seeds (tests/doc_sizes.py).
Each ``python`` block runs as a script. Afterwards the folder holds exactly the files the
commands named (``--out``, ``--step-log``, ``> file``): outboxes and studies went to the data
folder, and nothing else was left in the working directory.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from doc_sizes import as_run

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Generous bound per command on a loaded 2-core machine (tune/saturate take minutes there).
TIMEOUT_S = 900


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def block_commands(block: str) -> list[str]:
    """A ``bash`` block's command lines, continuations joined and comments cut."""
    out: list[str] = []
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
        cmd = line.split(" # ")[0].split("  #")[0].strip()
        if cmd and not cmd.startswith("#"):
            out.append(cmd)
    return out


def commands() -> list[str]:
    return [cmd for block in blocks("bash") for cmd in block_commands(block)]


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-z][\w-]*):", text, flags=re.M))


def _asked_for(cmd: str) -> set[str]:
    """Files a command line names as its output."""
    words = shlex.split(cmd)
    outputs = (">", "--out", "-o", "--step-log", "--requests-out")
    named = {words[i + 1] for i, w in enumerate(words[:-1]) if w in outputs}
    if words[:2] == ["servesim", "report"] and "--out" not in words and "-o" not in words:
        fmts = words[words.index("--format") + 1].split(",") if "--format" in words else ["html", "md"]
        named |= {f"report.{f}" for f in fmts}  # a report is written where you are: what it is for
    return {n for n in named if not n.startswith("examples/")}


def _env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "VIRTUAL_ENV")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["SERVESIM_DATA_DIR"] = str(data)
    env["COLUMNS"] = "80"
    return env


def test_the_readme_lists_commands_and_a_setup_line() -> None:
    cmds = commands()
    assert any(c.startswith("make sync") and "source .venv/bin/activate" in c for c in cmds)
    assert all(not c.startswith("uv run") for c in cmds)  # uv lives in .tools/bin, not on PATH
    assert sum(c.startswith("servesim ") for c in cmds) >= 10
    for c in cmds:
        for path in re.findall(r"examples/[\w./-]+", c):
            assert (ROOT / path).exists(), f"{c!r} reads {path}, which is not shipped"


@pytest.mark.slow
@pytest.mark.parametrize("block", range(len(blocks("bash"))))
def test_every_readme_command_runs_as_typed(block: int, tmp_path: Path) -> None:
    work, data = tmp_path / "clone", tmp_path / "data"
    work.mkdir()
    shutil.copytree(ROOT / "examples", work / "examples")
    env = _env(data)
    before = {p.relative_to(work) for p in work.rglob("*")}
    asked: set[Path] = set()
    for cmd in block_commands(blocks("bash")[block]):
        if cmd.startswith(("servesim serve", "servesim dashboard", "servesim emulate")):
            continue  # servers and a live terminal UI run until stopped (tests/web, tests/tui, tests/emulate)
        if cmd.startswith("make "):
            targets = [w for w in shlex.split(cmd.split("&&")[0])[1:] if not w.startswith("-")]
            assert set(targets) <= _make_targets(), cmd
            continue
        res = subprocess.run(
            ["bash", "-c", as_run(cmd)], cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
        assert res.returncode == 0, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        assert "Traceback" not in res.stderr, cmd
        asked |= {Path(n) for n in _asked_for(cmd)}
    new = {p.relative_to(work) for p in work.rglob("*")} - before
    folders = [a for a in asked if (work / a).is_dir()]  # what a command wrote inside its --out
    new = {p for p in new if not any(a in p.parents for a in folders)}
    assert new == asked, f"written unasked: {sorted(map(str, new - asked))}"


@pytest.mark.slow
def test_the_readme_python_runs(tmp_path: Path) -> None:
    for i, code in enumerate(blocks("python")):
        script = tmp_path / f"block{i}.py"
        script.write_text(code, encoding="utf-8")
        res = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=_env(tmp_path / "data"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        assert res.returncode == 0, res.stderr[-2000:]
