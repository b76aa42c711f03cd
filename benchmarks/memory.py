"""Peak memory of ``servesim simulate`` on a large trace, with and without per-request output
(issue 16: 1,000,000 requests with per-request output in <= 1.5 GiB peak RSS; issue 48: with
``--json`` in <= 1.3 GiB).

Each case runs the CLI in a subprocess and reads its peak RSS from ``resource.getrusage``
(``RUSAGE_CHILDREN``'s ``ru_maxrss``: the largest child's, so each case runs in a fresh helper
process of its own, whose only child is that command).

Run: ``.venv/bin/python benchmarks/memory.py [--requests 1000000] [--preset default]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVESIM = shutil.which("servesim", path=str(Path(sys.executable).parent)) or "servesim"
GIB = 1 << 30


def _trace(path: Path, n: int, preset: str) -> Path:
    import servesim

    trace = servesim.generate_trace(servesim.preset_spec(preset).model_copy(update={"num_requests": n}))
    servesim.write_trace(trace, path)
    return path


def _peak(args: list[str]) -> tuple[float, float, float]:
    """(peak RSS in bytes, wall seconds, CPU seconds) of one command, measured in a fresh helper
    process (CPU: user + system, the steadier figure on a shared host)."""
    probe = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(u.ru_maxrss, time.perf_counter() - t, u.ru_utime + u.ru_stime)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, check=True)
    kib, wall, cpu = out.stdout.split()
    return int(kib) * 1024, float(wall), float(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--preset", default="default", help="Generator preset of the trace.")
    a = ap.parse_args()
    print(f"host: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        os.environ["SERVESIM_DATA_DIR"] = str(d / "data")
        t0 = time.perf_counter()
        trace = _trace(d / "trace.csv", a.requests, a.preset)
        print(f"trace: {a.requests:,} requests of preset {a.preset!r} ({time.perf_counter() - t0:.1f} s)")
        base = [SERVESIM, "simulate", str(trace)]
        cases = [
            ("--json --no-requests (no per-request output)", [*base, "--json", "--no-requests"]),
            ("--requests-out requests.parquet", [*base, "--requests-out", str(d / "r.parquet")]),
            ("--requests-out requests.jsonl", [*base, "--requests-out", str(d / "r.jsonl")]),
            ("--json (records in the document)", [*base, "--json"]),
        ]
        for label, args in cases:
            peak, wall, cpu = _peak(args)
            cap = 1.3 if label.startswith("--json (") else 1.5
            verdict = "meets" if peak <= cap * GIB else "MISSES"
            print(
                f"{label:<48} peak RSS {peak / GIB:5.2f} GiB ({verdict} <= {cap} GiB), "
                f"wall {wall:6.1f} s, CPU {cpu:6.1f} s"
            )
        for name in ("r.parquet", "r.jsonl"):
            print(f"  {name}: {(d / name).stat().st_size / 1e6:,.1f} MB")  # written, whole


if __name__ == "__main__":
    main()
