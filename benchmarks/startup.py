"""Start-up and end-to-end CLI speed, as a user meets it (issue 16's targets).

Prints, for each case, the wall time of every run (best and median of ``--repeat``) and the
CPU time the process used (user + system), which the host's load inflates less than the wall:

* ``servesim --help``                                   target <= 0.3 s wall
* ``servesim simulate T1K`` (1,000 requests, its table) target <= 1.0 s wall
* ``servesim simulate T100K --json > out.json``         target >= 20,000 requests per wall second
  (start-up, loading the trace, simulating and writing the JSON with per-request records)

Run: ``.venv/bin/python benchmarks/startup.py [--repeat 3]``. On a shared machine say how loaded
it was (``uptime`` is printed next to the figures).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVESIM = shutil.which("servesim", path=str(Path(sys.executable).parent)) or "servesim"


def _trace(path: Path, n: int) -> Path:
    import servesim

    trace = servesim.generate_trace(servesim.preset_spec("default").model_copy(update={"num_requests": n}))
    servesim.write_trace(trace, path)
    return path


def _run(args: list[str], stdout: Path | None) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(stdout or os.devnull, "wb") as out:
        subprocess.run(args, stdout=out, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _case(label: str, args: list[str], repeat: int, stdout: Path | None = None) -> list[float]:
    runs = [_run(args, stdout) for _ in range(repeat)]
    walls = [w for w, _ in runs]
    cpus = [c for _, c in runs]
    print(
        f"{label:<44} wall best {min(walls):6.2f} s, median {statistics.median(walls):6.2f} s; "
        f"CPU median {statistics.median(cpus):6.2f} s  (runs: {', '.join(f'{w:.2f}' for w in walls)})"
    )
    return walls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big", type=int, default=100_000, help="Requests of the --json case.")
    a = ap.parse_args()
    load = os.getloadavg()
    print(f"host: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        env_note = os.environ.get("SERVESIM_DATA_DIR")
        os.environ["SERVESIM_DATA_DIR"] = str(d / "data")
        t1k, tbig = _trace(d / "t1k.csv", 1000), _trace(d / "tbig.csv", a.big)
        _case("servesim --help (target <= 0.3 s)", [SERVESIM, "--help"], a.repeat)
        _case("servesim simulate 1k requests (<= 1.0 s)", [SERVESIM, "simulate", str(t1k)], a.repeat)
        walls = _case(
            f"servesim simulate {a.big:,} requests --json",
            [SERVESIM, "simulate", str(tbig), "--json"],
            a.repeat,
            stdout=d / "out.json",
        )
        size = (d / "out.json").stat().st_size
        print(
            f"  -> {a.big / min(walls):,.0f} requests per wall second at best, "
            f"{a.big / statistics.median(walls):,.0f} median (target >= 20,000); JSON {size / 1e6:,.1f} MB"
        )
        if env_note is None:
            os.environ.pop("SERVESIM_DATA_DIR")
    load = os.getloadavg()
    print(f"load average after: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")


if __name__ == "__main__":
    main()
