"""The doc lines that take minutes at the size a reader types them, and the size the suite runs
them at (tests/test_readme.py, tests/test_docs_run.py).

Why: on this project's 2-core machine the README's ``servesim tune azure-conv`` (19,366 requests,
40 trials of 2 seeds, 3 fresh seeds) took about 6 minutes and docs/cluster.md's ``tune --layouts
agg,disagg --gpus 3`` over 3 (past its 300 s bound on a busy machine: issue 47), most of the
suite's time. Each line below still runs as typed, with these flags added (click keeps a flag's
last value): the same command on the same input through the same code (the search, the
recommendation and its verification, the layouts), with fewer trials or seeds, or without the
one step another line runs on a smaller input.
test_doc_sizes.py checks that every line here is still one the docs show, so none goes stale.
"""

from __future__ import annotations

import re

_SLO = "--slo ttft_p99_ms=500,tpot_p99_ms=50"  # the README's
#: A doc line (as the tests read it: continuations joined, the comment cut) -> flags added.
SMALLER: dict[str, str] = {
    # README, "Try it": the sweep and the study the report reads (2 seeds; 12 trials of 2 seeds,
    # 3 fresh seeds)
    f"servesim saturate my-trace.csv {_SLO} --seeds 2 --out sweep.json": "--seeds 1",
    f"servesim tune my-trace.csv {_SLO} --trials 12 --storage memory  --json > study.json": (
        "--trials 4 --trial-seeds 1 --verify-seeds 1"
    ),
    # README, "Commands": the bundled 19,366-request trace at the defaults (3 seeds; 40 trials).
    # tune's recommendation (its screening saturation sweep and verification) took 63 of the
    # line's 78 s at 2 trials on the busy 2-core machine (issue 47): the search runs on the
    # whole trace here, the recommendation on "Try it"'s 1,000-request trace above.
    f"servesim saturate azure-conv {_SLO}": "--seeds 1 --rtol 0.1",
    f"servesim tune azure-conv {_SLO}": "--trials 2 --trial-seeds 1 --no-recommend",
    # docs/cluster.md: the five layouts of 3 GPUs take a second; the break-even bisection's first
    # probe, a link of 0.1 Gbit/s, took 216 of the line's 220 s (the starved decode replica scans
    # its waiting queue every step). docs/tuning.md's --layouts lines bisect, on a small trace.
    "servesim tune examples/trace.jsonl --layouts agg,disagg --gpus 3 --slo ttft_p99_ms=100,tpot_p99_ms=8": (
        "--no-break-even"
    ),
    # docs/tuning.md: the searches as typed, on one seed per trial and one fresh seed for the
    # recommendation (9.6 -> 6.6, 7.9 -> 6.6 and 11.7 -> 8.8 CPU-s on the 2-core machine); the
    # outbox, the Pareto front and the rejection count are written as they are at full size.
    "servesim tune examples/trace.jsonl --slo ttft_p99_ms=1000,tpot_p99_ms=60 --trials 8 --out-dir outbox/": (
        "--trial-seeds 1 --verify-seeds 1"
    ),
    "servesim tune examples/trace.jsonl --slo ttft_p99_ms=1000 --objective pareto --max-gpus 8 --trials 8": (
        "--trial-seeds 1 --verify-seeds 1"
    ),
    "servesim tune onoff -n 2000 --target-rate 12 --slo ttft_p99_ms=2000 --max-gpus 1"
    " --max-rejection-rate 0.2 --space max_num_queued_reqs=none,16,32,64,128"
    " --space max_num_queued_tokens=none,4096,8192,16384,32768"
    " --trials 10 --trial-seeds 1": "--verify-seeds 1",
}


def as_run(cmd: str) -> str:
    """``cmd`` as the suite runs it: the flags of ``SMALLER`` added before any redirection."""
    extra = SMALLER.get(cmd)
    if extra is None:
        return cmd
    cut = re.search(r" [>|] ", cmd)
    at = cut.start() if cut else len(cmd)
    return f"{cmd[:at]} {extra}{cmd[at:]}"
