"""Write the README's bounds table from ``servesim.bounds`` (the code's one table of limits).

    .venv/bin/python tools/bounds_table.py          # rewrite README.md between the markers
    .venv/bin/python tools/bounds_table.py --check  # exit 1 when README.md differs

tests/test_bounds_table.py runs the check, so the README cannot drift from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from servesim.bounds import bounds_table

README = Path(__file__).resolve().parents[1] / "README.md"
START, END = "<!-- bounds:start (tools/bounds_table.py) -->", "<!-- bounds:end -->"


def with_table(text: str) -> str:
    head, sep, rest = text.partition(START)
    if not sep or END not in rest:
        raise SystemExit(f"{README}: no {START} ... {END} markers")
    return head + START + "\n" + bounds_table() + rest[rest.index(END) :]


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    new = with_table(text)
    if "--check" in argv:
        if new != text:
            print(f"{README}: the bounds table differs from servesim.bounds; run tools/bounds_table.py")
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
