"""A trace's columns as the engine reads them: plain arrays, converted once, up front.

Kept apart from the engine loop: a cluster converts a trace once and hands the same arrays to
every replica, and builds the requests it routes from them (``make_request``).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from servesim.engine.kv_cache_manager import shared_id_prefixes
from servesim.engine.request import Request
from servesim.traces.schema import Trace


class TraceArrays:
    """The columns of a trace the engine reads, as plain arrays (one conversion, up front).

    ``hash_ids`` are cut to the prefix that some other request shares (``shared_id_prefixes``):
    the rest describes content no other request can hit. ``trim_hash_ids=False`` keeps them whole
    (the same results, slower: the tests check that the cut changes nothing)."""

    def __init__(self, trace: Trace, trim_hash_ids: bool = True) -> None:
        df = trace.df
        self.n = len(df)
        self.req_id: list[str] = [str(x) for x in df["req_id"].tolist()]
        self.arrival: list[float] = df["arrival_time_s"].astype(np.float64).tolist()
        self.prompt_len: list[int] = df["prompt_len"].astype(np.int64).tolist()
        self.output_len: list[int] = df["output_len"].astype(np.int64).tolist()
        # The longest prompt plus output (1 for no request): what a replica's context limit
        # defaults to, found once for every replica of a fleet rather than once by each.
        self.max_context: int = max(map(operator.add, self.prompt_len, self.output_len), default=1)
        self.priority: list[int] = df["priority"].astype(np.int64).tolist()
        self.prefix_len: list[int] = df["prefix_len"].astype(np.int64).tolist()
        self.lora, self.lora_names = adapter_ids(df["lora"].tolist())
        # vLLM hashes a block with its request's adapter (kv_cache_utils._gen_lora_extra_hash_keys):
        # equal tokens under different adapters are different KV, so the prefix keys are per adapter.
        groups: dict[tuple[str, int], int] = {}
        self.group: list[int] = []
        for g, plen, a in zip(df["prefix_group"].tolist(), self.prefix_len, self.lora, strict=True):
            if g is None or plen <= 0 or (isinstance(g, float) and np.isnan(g)):
                self.group.append(-1)
            else:
                self.group.append(groups.setdefault((str(g), a), len(groups)))
        self.hash_ids: list[Any] = df["hash_ids"].tolist()
        if self.lora_names:
            self.hash_ids = adapter_hash_ids(self.hash_ids, self.lora)
        self.hash_block_size = trace.hash_block_size
        self.num_shared_ids: list[int] | None = None
        # Per-request draft acceptance rates (NaN: the method's model); None when no row has one.
        self.spec_accept_rate: list[float] | None = None
        rate = df["spec_accept_rate"]
        if bool(rate.notna().any()):
            self.spec_accept_rate = rate.astype(np.float64).tolist()
        if trim_hash_ids and self.hash_block_size:
            self.num_shared_ids = shared_id_prefixes(self.hash_ids, self.prompt_len, self.hash_block_size)

    def make_request(self, i: int) -> Request:
        ids = self.hash_ids[i]
        if ids is not None and self.num_shared_ids is not None:
            k = self.num_shared_ids[i]
            ids = ids[:k] if k else None
        return Request(
            i,
            self.req_id[i],
            self.arrival[i],
            self.prompt_len[i],
            self.output_len[i],
            self.priority[i],
            self.group[i],
            self.prefix_len[i],
            None if ids is None else list(ids),
            self.hash_block_size or 0,
            self.lora[i],
        )


def adapter_ids(names: list[Any]) -> tuple[list[int], list[str]]:
    """vLLM's ``lora_int_id`` per request (1, 2, ... in order of first use; 0: the base model) and
    the adapters' names in that order."""
    ids: dict[str, int] = {}
    out: list[int] = []
    for name in names:
        if name is None or (isinstance(name, float) and np.isnan(name)):
            out.append(0)
        else:
            out.append(ids.setdefault(str(name), len(ids) + 1))
    return out, list(ids)


def adapter_hash_ids(hash_ids: list[Any], lora: list[int]) -> list[Any]:
    """``hash_ids`` with every adapter's ids moved to a range of their own (above every id of the
    trace): equal ids under one adapter stay equal, under two they never meet."""
    top = max((max(ids) for ids in hash_ids if ids), default=0) + 1
    fresh: dict[tuple[int, int], int] = {}
    out: list[Any] = []
    for ids, a in zip(hash_ids, lora, strict=True):
        if a == 0 or not ids:
            out.append(ids)
        else:
            out.append([fresh.setdefault((a, h), top + len(fresh)) for h in ids])
    return out


__all__ = ["TraceArrays", "adapter_hash_ids", "adapter_ids"]
