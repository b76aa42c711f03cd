"""``servesim.heap.unmap_large_blocks``: after it, a freed block of a few MB leaves the process's
resident memory at once, even after a larger block raised glibc's dynamic threshold (which would
otherwise serve the block from the heap and keep its pages). Run in a fresh process: the
setting is for the rest of a process's life."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import numpy as np
from servesim.heap import unmap_large_blocks

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

if not unmap_large_blocks():
    print("unsupported")
    raise SystemExit
big = np.ones(2 << 20)  # 16 MB: freeing a mapped block raises glibc's dynamic threshold
del big
a = np.ones(1 << 20)  # 8 MB, every page touched
before = rss()
del a
print(before - rss())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_freed_column_leaves_the_resident_set() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    if out.strip() == "unsupported":
        pytest.skip("this C library has no M_MMAP_THRESHOLD")
    assert int(out) >= 7 << 20  # the 8 MB array's pages went back to the system
