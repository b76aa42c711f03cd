"""Where a replica's LoRA adapters are, and what bringing one to the GPU adds to a step.

vLLM 0.33's worker keeps two LRU caches of adapters (``vllm/lora/worker_manager.py``
``LRUCacheWorkerLoRAManager``, ``vllm/lora/model_manager.py`` ``LRUCacheLoRAModelManager``): the
adapters registered in host memory (``max_cpu_loras``; vLLM's default: ``max_loras``) and those
active in the GPU's ``max_loras`` slots. Before each forward pass the model runner hands it the
batch's adapters (``set_active_loras``); for each one, ``add_adapter``:

* not registered: read from disk (``_load_adapter``), the host cache's oldest adapter removed
  first when it is full (``remove_oldest_adapter``: an adapter removed from the host cache is
  deactivated on the GPU too: ``AdapterLRUCache._on_remove``), then registered; else touched;
* ``activate_adapter``: not active: the oldest active adapter is deactivated when the slots are
  full, and this one's weights are copied into the free slot; then touched.

The step waits for those reads and copies, so it lasts ``read_s`` longer per read and
``to_gpu_s`` longer per copy (``perf.lora.adapter_load_times``). vLLM takes the batch's adapters
in the order of a Python set of ``LoRARequest`` (hashed by name: per-process random); servesim in
adapter order (the trace's first-seen order). The engine asks at every step it schedules (a
decode stretch keeps its batch, so its steps need nothing), with the adapters of the running
requests: vLLM's scheduler keeps them within ``max_loras``, so they always fit the slots.

Pure Python on both cores: called once per scheduled step of a LoRA run timed by a GPU model.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any


class AdapterCache:
    """The host and GPU adapter caches of one replica, with what their loads have cost."""

    __slots__ = (
        "gpu",
        "gpu_loads",
        "gpu_slots",
        "host",
        "host_slots",
        "load_s",
        "read_s",
        "reads",
        "to_gpu_s",
    )

    def __init__(self, gpu_slots: int, host_slots: int, to_gpu_s: float, read_s: float) -> None:
        self.gpu: OrderedDict[int, None] = OrderedDict()  # active adapters, oldest first
        self.host: OrderedDict[int, None] = OrderedDict()  # registered adapters, oldest first
        self.gpu_slots = gpu_slots
        self.host_slots = host_slots
        self.to_gpu_s = to_gpu_s
        self.read_s = read_s
        self.gpu_loads = 0  # copies into a GPU slot
        self.reads = 0  # reads from disk
        self.load_s = 0.0  # step time they added

    def step(self, adapters: Iterable[int]) -> float:
        """The batch's adapters (0: the base model) made active; returns the seconds it adds."""
        gpu, host = self.gpu, self.host
        added = 0.0
        for a in sorted(set(adapters)):
            if a <= 0:
                continue
            if a in host:
                host.move_to_end(a)
            else:
                if len(host) >= self.host_slots:
                    oldest, _ = host.popitem(last=False)
                    gpu.pop(oldest, None)  # removed from the host cache: deactivated too
                host[a] = None
                self.reads += 1
                added += self.read_s
            if a in gpu:
                gpu.move_to_end(a)
            else:
                if len(gpu) >= self.gpu_slots:
                    gpu.popitem(last=False)
                gpu[a] = None
                self.gpu_loads += 1
                added += self.to_gpu_s
        self.load_s += added
        return added

    def summary(self) -> dict[str, Any]:
        """The run's figures: copies into GPU slots, reads from disk, step time they added."""
        return {"gpu_loads": self.gpu_loads, "disk_reads": self.reads, "load_s": self.load_s}


__all__ = ["AdapterCache"]
