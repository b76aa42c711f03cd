"""The oracle tools (``tools/oracle/``, issue 49 item 4): the case makers never overwrite the
committed cases unless told to, and ``replay_cases.py`` replays a case of every kind (plain,
offload, P/D, speculative) through vLLM's own scheduler and through servesim.

The makers and the replay tool are scripts, run here in a subprocess as documented in
``tools/oracle/README.md``: the makers by this python (they stop before importing vLLM), the
vLLM replay by the oracle virtualenv's python.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oracle_venv import oracle_python
from servesim.engine import _native

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools" / "oracle"
ENGINE_TESTS = ROOT / "tests" / "engine"
MAKERS = {
    "make_cases.py": "oracle_cases",
    "make_offload_cases.py": "oracle_offload_cases",
    "make_pd_cases.py": "oracle_pd_cases",
    "make_spec_cases.py": "oracle_spec_cases",
    "make_lora_cases.py": "oracle_lora_cases",
    "make_hybrid_cases.py": "oracle_hybrid_cases",
    "make_pp_cases.py": "oracle_pp_cases",
}
#: Further committed folders a maker writes (refused as its first one is).
ALSO_COMMITTED = {"make_hybrid_cases.py": "oracle_hybrid_usage_cases"}
#: One committed case of each kind.
ONE_OF_EACH = [
    ENGINE_TESTS / "oracle_cases" / "basic_00.json.gz",
    ENGINE_TESTS / "oracle_offload_cases" / "offload_reuse_00.json.gz",
    ENGINE_TESTS / "oracle_pd_cases" / "pd_decode_00.json.gz",
    ENGINE_TESTS / "oracle_spec_cases" / "spec_basic_00.json.gz",
    ENGINE_TESTS / "oracle_hybrid_cases" / "swa_prefix_00.json.gz",  # replays as a plain case
    ENGINE_TESTS / "oracle_pp_cases" / "pp_pressure_00.json.gz",
]


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


@pytest.mark.parametrize(("maker", "name"), [*sorted(MAKERS.items()), *sorted(ALSO_COMMITTED.items())])
def test_a_maker_refuses_to_overwrite_the_committed_cases(maker: str, name: str) -> None:
    folder = ENGINE_TESTS / name
    before = _snapshot(folder)
    for out in (folder, ENGINE_TESTS / ".." / "engine" / name):  # also spelled otherwise
        run = subprocess.run(
            [sys.executable, str(TOOLS / maker), "--out", str(out), "--per-family", "1"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert run.returncode != 0
        assert "refusing to write into" in run.stderr and "--force" in run.stderr, run.stderr
    assert _snapshot(folder) == before


@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_a_maker_needs_an_out_folder(maker: str) -> None:
    run = subprocess.run(
        [sys.executable, str(TOOLS / maker)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert run.returncode == 2 and "--out" in run.stderr, run.stderr


def _replay(python: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), str(TOOLS / "replay_cases.py"), *args, *map(str, ONE_OF_EACH)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def _assert_all_identical(run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode == 0, run.stdout + run.stderr
    verdicts = [line for line in run.stdout.splitlines() if " steps): " in line]
    kinds = ["(plain,", "(offload,", "(pd,", "(spec,", "(plain,", "(pp,"]
    assert [line.split()[1] for line in verdicts] == kinds, run.stdout
    assert all(line.endswith(": identical") for line in verdicts), run.stdout


def test_replay_cases_replays_every_kind_through_servesim() -> None:
    _assert_all_identical(_replay(sys.executable, "--against", "servesim"))


@pytest.mark.slow
@pytest.mark.skipif(
    not oracle_python().exists(),
    reason=f"no vLLM 0.33 oracle virtualenv at {oracle_python()} (set VLLM_ORACLE_PYTHON to its "
    "python, or make it as tools/oracle/README.md says): vLLM's scheduler cannot replay the cases",
)
@pytest.mark.skipif(
    os.environ.get(_native.ENV_PURE, "").strip() not in ("", "0"),
    reason="vLLM's own scheduler, not servesim's core: the main pass runs it",
)
def test_replay_cases_reproduces_a_case_of_every_kind_with_vllm() -> None:
    _assert_all_identical(_replay(oracle_python(), "--against", "vllm"))


def test_the_tools_refuse_another_copy_of_the_harness(tmp_path: Path) -> None:
    """A ``vllm_oracle`` imported from elsewhere first (the shared copy knows none of the offload,
    P/D or speculative keys) is an error naming both files, not cases skipped as unknown keys."""
    (tmp_path / "vllm_oracle.py").write_text("")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import vllm_oracle; "
        f"sys.path.insert(0, {str(TOOLS)!r}); import make_cases; make_cases.load_oracle()"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode != 0
    assert str(tmp_path / "vllm_oracle.py") in run.stderr, run.stderr
    assert "use this folder's copy" in run.stderr, run.stderr
