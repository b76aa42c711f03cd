#!/usr/bin/env python3
"""vLLM 0.33's own data-parallel decisions: the MoE layers' parallel sizes and the DP load balancer.

Run with the oracle's Python (``~/.cache/vllm-oracle-venv/bin/python``; tools/oracle/README.md).
Reads a JSON list on stdin and writes one JSON line per item:

* ``{"kind": "moe", "tp": 2, "dp": 4, "ep": true, "num_experts": 128}``: for every GPU (DP rank
  ``d``, TP rank ``j``) what ``FusedMoEParallelConfig.make``
  (vllm/model_executor/layers/fused_moe/config.py) returns — ``tp_size``, ``ep_size``,
  ``use_ep`` — and the experts that GPU holds (``determine_expert_map``,
  fused_moe/expert_map_manager.py). ``make`` asks the distributed state for its ranks; the two
  getters it calls are given the GPU's ranks here (nothing else of torch.distributed is used).
* ``{"kind": "lb", "picks": [{"counts": [[waiting, running, kv_usage], ...], "inflight": [...]},
  ...]}``: the engine ``DPLBAsyncMPClient.get_core_engine_for_request``
  (vllm/v1/engine/core_client.py) picks for one request after another, one client, with each
  pick's snapshot and in-flight counts as given (its own rotation of the scan start carried
  from pick to pick).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from types import SimpleNamespace
from typing import Any


def moe(item: dict[str, Any]) -> dict[str, Any]:
    from vllm.model_executor.layers.fused_moe import config as moe_config
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    tp, dp, ep = item["tp"], item["dp"], item["ep"]
    out = []
    for d in range(dp):
        for j in range(tp):
            moe_config.get_dp_group = lambda d=d: SimpleNamespace(rank_in_group=d)
            moe_config.get_tensor_model_parallel_rank = lambda j=j: j
            parallel = SimpleNamespace(
                enable_expert_parallel=ep, all2all_backend="allgather_reducescatter", enable_eplb=False
            )
            cfg = moe_config.FusedMoEParallelConfig.make(tp, 1, dp, 1, parallel)
            local, _, _ = determine_expert_map(cfg.ep_size, cfg.ep_rank, item["num_experts"])
            out.append(
                {
                    "dp_rank": d,
                    "tp_rank": j,
                    "tp_size": cfg.tp_size,
                    "ep_size": cfg.ep_size,
                    "use_ep": cfg.use_ep,
                    "local_experts": local,
                }
            )
    return {"gpus": out}


def lb(item: dict[str, Any]) -> dict[str, Any]:
    from vllm.v1.engine.core_client import DPLBAsyncMPClient

    n = len(item["picks"][0]["counts"])
    engines = [f"e{i}".encode() for i in range(n)]
    client = SimpleNamespace(
        streaming_reqs=set(),
        reqs_in_flight={},
        engine_inflight=Counter(),
        core_engines=engines,
        client_count=1,
        eng_start_index=0,  # (len(core_engines) * client_index) // client_count, client 0
        lb_engines=[],
    )
    picks = []
    for k, pick in enumerate(item["picks"]):
        client.lb_engines = [list(c) for c in pick["counts"]]
        client.engine_inflight = Counter(dict(zip(engines, pick["inflight"], strict=True)))
        req = SimpleNamespace(
            request_id=f"r{k}", resumable=False, data_parallel_rank=None, pooling_params=None
        )
        chosen = DPLBAsyncMPClient.get_core_engine_for_request(client, req)
        picks.append(engines.index(chosen))
    return {"picks": picks}


def main() -> None:
    for item in json.load(sys.stdin):
        result = moe(item) if item["kind"] == "moe" else lb(item)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
