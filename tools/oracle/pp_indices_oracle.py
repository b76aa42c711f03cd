#!/usr/bin/env python3
"""vLLM 0.33's own pipeline-parallel layer split, for servesim's ``perf.pipeline.pp_partition``.

Reads a JSON list on stdin, items ``{"num_layers": L, "pp": P, "partition": "a,b,..." | null}``,
and prints one JSON line per item: ``{"indices": [[start, end], ...]}``, vLLM's
``vllm.distributed.utils.get_pp_indices(L, rank, P)`` for each rank, with
``VLLM_PP_LAYER_PARTITION`` set to ``partition`` (unset when null), or ``{"error": message}``
where vLLM raises. Run with the oracle's virtualenv python (tests/perf/test_pipeline.py does).
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    items = json.load(sys.stdin)
    from vllm.distributed.utils import get_pp_indices

    for item in items:
        if item.get("partition") is None:
            os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
        else:
            os.environ["VLLM_PP_LAYER_PARTITION"] = item["partition"]
        try:
            got = [list(get_pp_indices(item["num_layers"], r, item["pp"])) for r in range(item["pp"])]
            print(json.dumps({"indices": got}))
        except ValueError as e:
            print(json.dumps({"error": str(e)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
