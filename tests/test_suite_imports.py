"""The suite collects the same in any order: tests import shared helpers from modules with
names of their own, never from a ``conftest``.

Why: every folder's conftest.py is a module named ``conftest``; ``from conftest import MODEL``
got whichever one pytest had loaded last, so ``pytest tests/emulate/test_ray_serve.py
tests/report/test_examples.py`` failed and the reverse order passed (issue 47). Helpers live in
``<area>_helpers.py`` (or another name no other file under tests/ has) next to their tests;
pytest puts a test's folder on ``sys.path`` and tests/conftest.py puts tests/ and tests/engine
there, so a plain ``from web_helpers import ...`` finds them. ``from tests.<dir> import ...``
is refused too: it depends on the working folder being on ``sys.path``, and imports a conftest
a second time under another name.
"""

from __future__ import annotations

import ast
import sys
from importlib.machinery import PathFinder
from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: Data, not code on the path: the sim2real fixtures' own scoring script.
NOT_MODULES = ("fixtures",)


def _modules() -> list[Path]:
    return [p for p in sorted(TESTS.rglob("*.py")) if p.relative_to(TESTS).parts[0] not in NOT_MODULES]


def _imported(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def test_no_test_imports_from_a_conftest_or_the_tests_folder() -> None:
    bad = [
        f"{path.relative_to(TESTS)}:{line}: {module}"
        for path in _modules()
        for line, module in _imported(path)
        if module.split(".")[0] in ("conftest", "tests")
    ]
    assert bad == [], "import the helper module (e.g. web_helpers), never a conftest:\n" + "\n".join(bad)


def test_every_module_under_tests_has_a_name_of_its_own() -> None:
    """Two helpers named alike would shadow each other as their folders' order on sys.path
    says; a helper named like an installed or standard module would shadow it (or be shadowed)."""
    names: dict[str, list[str]] = {}
    for path in _modules():
        if path.name != "conftest.py":
            names.setdefault(path.stem, []).append(str(path.relative_to(TESTS)))
    twice = {name: where for name, where in names.items() if len(where) > 1}
    assert twice == {}, f"modules under tests/ named alike: {twice}"
    outside = [p for p in sys.path if p and not Path(p).resolve().is_relative_to(TESTS)]
    clash = sorted(
        name
        for name in names
        if not name.startswith("test_")
        and (name in sys.stdlib_module_names or PathFinder.find_spec(name, outside) is not None)
    )
    assert clash == [], f"helpers under tests/ named like a module outside it: {clash}"


def test_a_helper_is_imported_from_a_folder_always_on_the_path() -> None:
    """Its own folder (pytest puts it on the path before the test's module), tests/ or
    tests/engine (tests/conftest.py puts them there): a helper of another folder would be found
    only once some test of that folder had been collected."""
    where = {p.stem: p.parent for p in _modules() if p.name != "conftest.py"}
    bad = [
        f"{path.relative_to(TESTS)}:{line}: {module} (in {where[top].relative_to(TESTS)}/)"
        for path in _modules()
        for line, module in _imported(path)
        if (top := module.split(".")[0]) in where and where[top] not in (path.parent, TESTS, TESTS / "engine")
    ]
    assert bad == [], "helpers imported from another test folder:\n" + "\n".join(bad)
