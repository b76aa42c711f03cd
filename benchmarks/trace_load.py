"""Trace loading speed and memory: a 1,000,000-row native CSV, and the bundled Azure conv trace.

Usage: ``python benchmarks/trace_load.py [--rows N] [--all]`` (``--all`` also times JSONL and
Parquet). Each big load runs in a fresh child process so that its peak RSS is its own; the
report gives rows/second, the child's peak RSS and how much of it the load added over the
interpreter with servesim imported. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _max_rss_mib() -> float:
    """Peak resident memory of this process, MiB.

    Linux: VmHWM of /proc/self/status, which starts afresh at exec (ru_maxrss would include the
    parent's peak at fork time). Elsewhere: ru_maxrss (KiB on Linux, bytes on macOS).
    """
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 / 1024 if sys.platform == "darwin" else rss / 1024


def _child(path: str) -> None:
    """Load one file; print JSON with the time and memory of this process."""
    from servesim.traces import load_trace

    base = _max_rss_mib()
    start = time.perf_counter()
    trace = load_trace(path)
    elapsed = time.perf_counter() - start
    print(
        json.dumps({"rows": len(trace), "seconds": elapsed, "peak_rss_mib": _max_rss_mib(), "base_mib": base})
    )


def _load_in_child(path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(path)], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, float] = json.loads(out)
    return result


def _report(label: str, size_mib: float, r: dict[str, float]) -> None:
    print(
        f"{label:28} {r['rows']:>10,.0f} rows  {size_mib:7.1f} MiB  {r['seconds']:6.2f} s  "
        f"{r['rows'] / r['seconds']:>12,.0f} rows/s  peak RSS {r['peak_rss_mib']:6.0f} MiB "
        f"(+{r['peak_rss_mib'] - r['base_mib']:.0f} over {r['base_mib']:.0f} MiB idle)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="Rows of the synthetic native trace.")
    parser.add_argument("--all", action="store_true", help="Also time JSONL and Parquet.")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return

    from servesim.traces import GeneratorSpec, generate_trace, load_trace, write_trace

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        trace = generate_trace(GeneratorSpec(num_requests=args.rows, seed=0))
        print(f"generated {args.rows:,} requests in {time.perf_counter() - start:.2f} s")
        formats = ["csv", "jsonl", "parquet"] if args.all else ["csv"]
        for fmt in formats:
            path = Path(tmp) / f"trace.{fmt}"
            start = time.perf_counter()
            write_trace(trace, path)
            print(f"wrote {fmt:8} in {time.perf_counter() - start:.2f} s")
            _report(f"native {fmt}", path.stat().st_size / 2**20, _load_in_child(path))

    from servesim.traces import bundled_trace_path

    conv = bundled_trace_path("azure-conv")
    best = min(_timed(lambda: load_trace("azure-conv")) for _ in range(5))
    rows = len(load_trace("azure-conv"))
    print(
        f"{'bundled azure-conv':28} {rows:>10,} rows  {conv.stat().st_size / 2**20:7.1f} MiB  {best:6.3f} s  "
        f"{rows / best:>12,.0f} rows/s  (best of 5, in process)"
    )


def _timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
