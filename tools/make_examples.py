"""Regenerate ``examples/demo/`` (``make examples``): the demo's outputs, committed.

Runs ``servesim demo`` through the library with the rules advisor (no key, no network: the
same bytes on every machine) into ``examples/demo``, and keeps the demo's own action log beside
it with every path made relative to that folder. ``tests/report/test_examples.py`` checks that the
committed JSON and Markdown still equal what the code produces.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "examples" / "demo"


def trimmed_log(log: Path, out: Path) -> str:
    """The demo's action-log lines with paths relative to ``out`` (no machine path committed)."""
    import orjson

    from servesim.actionlog import ActionRecord

    prefix = str(out.resolve()) + os.sep
    lines = []
    for raw in log.read_bytes().splitlines():
        rec = ActionRecord.model_validate(orjson.loads(raw))
        params = {k: (v.replace(prefix, "") if isinstance(v, str) else v) for k, v in rec.parameters.items()}
        rec = rec.model_copy(
            update={"outputs": [o.replace(prefix, "") for o in rec.outputs], "parameters": params}
        )
        lines.append(orjson.dumps(rec.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS).decode())
    return "\n".join(lines) + "\n"


def main() -> int:
    from servesim.cli.demo_steps import run_demo

    with tempfile.TemporaryDirectory() as data:
        os.environ["SERVESIM_DATA_DIR"] = data
        if OUT.exists():
            shutil.rmtree(OUT)
        run = run_demo(OUT, advisor="rules", formats=["html", "md"], on_step=lambda s: print(f"- {s}"))
        (OUT / "actions.jsonl").write_text(trimmed_log(Path(data) / "actions.jsonl", OUT), encoding="utf-8")
    for line in run.lines:
        print(line)
    print(f"wrote {len(run.files) + 1} files under {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
