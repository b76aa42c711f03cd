"""Invariants that guard results are explicit checks raising ``servesim.errors.InternalError``:
``python -O`` strips ``assert`` statements, and with them the check (issue 29.6)."""

from __future__ import annotations

import ast
from pathlib import Path

import servesim

SRC = Path(servesim.__file__).parent


def test_no_assert_statement_in_the_package() -> None:
    found = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Assert)
    ]
    assert found == [], f"assert statements (stripped by python -O): {found}"
