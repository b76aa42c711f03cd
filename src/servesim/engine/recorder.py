"""What a replica records while it runs: per-step rows and per-request columns in compact arrays.

The results (``simulate.build_result``, the cluster's) read them in place with numpy; a rolling
recorder (an online fleet that runs for days) keeps only the latest steps and requests.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from struct import Struct

import numpy as np

from servesim.engine.request import OUTCOME_UNFINISHED, Request

# The recorder's per-request columns (floats first, then counts, the outcome last).
REQUEST_COLUMNS = (
    "first_scheduled",
    "first_token",
    "finish",
    "num_output",
    "preemptions",
    "recomputed",
    "reused",
    "prefix_hit",
    "outcome",
)


class Recorder:
    """Per-step time series and per-request records in compact arrays (numpy reads them in place)."""

    STEP_FIELDS = (
        "start_s",
        "duration_s",
        "num_tokens",
        "num_decodes",
        "num_prefill_tokens",
        "num_running",
        "num_waiting",
        "kv_blocks_used",
        "num_preempted",
        "num_admitted",
        "num_finished",
    )

    # One step row: its start (float64) then nine counts (int32), 44 bytes; the results read the
    # rows in place as a numpy structured array (``STEP_DTYPE``), so 9 million steps take 400 MB
    # once instead of 800 MB twice. bytearray.extend(pack(...)) is twice as fast as array.extend(tuple).
    # The durations are kept apart, contiguous (``durations``): the summary sums them, and numpy
    # sums a strided view in another order than a contiguous array (the last bits of busy_s would
    # move), so in the row they had to be copied out (72 MB for 9 million steps) at the peak.
    STEP_FORMAT = "<d9i"
    STEP_DTYPE = np.dtype([(STEP_FIELDS[0], "<f8")] + [(name, "<i4") for name in STEP_FIELDS[2:]])
    _step_struct = Struct(STEP_FORMAT)
    pack_step = _step_struct.pack
    unpack_step = _step_struct.unpack_from
    step_size = _step_struct.size

    def __init__(self, n_requests: int) -> None:
        # One packed row of STEP_FIELDS but duration_s per step (``STEP_FORMAT``), and each
        # step's duration_s; numpy reads both without a copy.
        self.steps = bytearray()
        self.durations = array("d")
        self.step_end = array("d")
        # Pooled inter-token latencies: a run of c consecutive outputs starting at step s
        # contributes the durations of steps s+1 .. s+c-1; every other gap (after a preemption
        # or a step without a token) is kept as an explicit value.
        self.itl_run_first = array("q")
        self.itl_run_last = array("q")
        self.itl_gaps = array("d")
        # Per request (index = trace position), one column per REQUEST_FIELDS entry.
        self.first_scheduled = array("d", [math.nan]) * n_requests
        self.first_token = array("d", [math.nan]) * n_requests
        self.finish = array("d", [math.nan]) * n_requests
        self.num_output = array("q", [0]) * n_requests
        self.preemptions = array("q", [0]) * n_requests
        self.recomputed = array("q", [0]) * n_requests
        self.reused = array("q", [0]) * n_requests
        self.prefix_hit = array("q", [0]) * n_requests
        self.outcome = array("q", [OUTCOME_UNFINISHED]) * n_requests
        self.token_steps: dict[int, list[int]] | None = None
        # Speculative decoding only (None when off): per step, the request-verifications, the
        # drafts they accepted and the requests that had drafts scheduled (padding rows too: each
        # samples a token), three int64 entries a step (vLLM's per-iteration spec-decode counts).
        self.spec_steps: array[int] | None = None
        # LoRA only (None when off): (step, requests left waiting for their adapter: max_loras)
        # for each step that left any, two int64 entries a step (sparse: most steps skip none).
        self.lora_skips: array[int] | None = None
        # Hybrid KV cache groups only (None otherwise): per step, the blocks each of the
        # ``num_kv_groups`` groups held when it was scheduled (``kv_blocks_used`` split by group),
        # ``num_kv_groups`` int32 entries a step.
        self.kv_group_steps: array[int] | None = None
        self.num_kv_groups = 0
        # Preemption events: (time, step, request index, tokens computed when preempted).
        self.preemption_events: list[tuple[float, int, int, int]] = []
        self.starvation_events: list[tuple[float, int, int, int]] = []  # same shape
        self.prefix_queries = 0
        self.prefix_hits = 0
        # A rolling recorder (an online fleet that runs for days: ``ClusterSimulator.roll_records``)
        # keeps the latest steps and requests only: step k is row k - step_base, request i is
        # column i - request_base; it pools no inter-token gaps (the online layer measures its own).
        self.rolling = False
        self.step_base = 0
        self.request_base = 0
        self.request_top = 0  # 1 + the highest request index closed here
        self.events_dropped = 0  # preemption events no longer kept (rolling)

    def step_row(self, k: int) -> tuple[float, ...]:
        """Step ``k``'s values in ``STEP_FIELDS`` order."""
        row = self.unpack_step(self.steps, (k - self.step_base) * self.step_size)
        return (row[0], self.durations[k - self.step_base], *row[1:])

    def num_preemption_events(self) -> int:
        """Preemptions recorded here, including those a rolling recorder no longer keeps."""
        return self.events_dropped + len(self.preemption_events)

    def trim_due(self, keep_steps: int, keep_requests: int) -> bool:
        return (
            len(self.step_end) > 2 * keep_steps
            or self.request_top - self.request_base > 2 * keep_requests
            or len(self.preemption_events) > 2 * keep_requests
            or len(self.starvation_events) > 2 * keep_requests
        )

    def trim(self, keep_steps: int, keep_requests: int, oldest_arrival: float = math.inf) -> None:
        """Rolling: forget all but the latest ``keep_steps`` steps and ``keep_requests`` request
        columns (and preemption/starvation events) once twice as many are held: amortised O(1)
        per step and per request, memory bounded whatever the run's length. The step in flight
        at ``oldest_arrival`` (of the requests still here) and every later one are kept."""
        self.rolling = True
        n = len(self.step_end)
        if n > 2 * keep_steps:
            drop = min(n - keep_steps, bisect_right(self.step_end, oldest_arrival))
            del self.step_end[:drop]
            del self.steps[: drop * self.step_size]
            del self.durations[:drop]
            if self.spec_steps is not None:
                del self.spec_steps[: 3 * drop]
            if self.kv_group_steps is not None:
                del self.kv_group_steps[: self.num_kv_groups * drop]
            self.step_base += drop
            skips = self.lora_skips
            if skips is not None:
                first = 0
                while first < len(skips) and skips[first] < self.step_base:
                    first += 2
                del skips[:first]
        used = self.request_top - self.request_base
        if used > 2 * keep_requests:
            drop = used - keep_requests
            for col in REQUEST_COLUMNS:
                del getattr(self, col)[:drop]
            self.request_base += drop
        if len(self.preemption_events) > 2 * keep_requests:
            drop = len(self.preemption_events) - keep_requests
            del self.preemption_events[:drop]
            self.events_dropped += drop
        if len(self.starvation_events) > 2 * keep_requests:
            del self.starvation_events[: len(self.starvation_events) - keep_requests]

    def step_table(self) -> np.ndarray:
        """The steps as a structured array over the recorded bytes (no copy; fields as
        STEP_FIELDS but duration_s, which is ``step_durations``)."""
        return np.frombuffer(self.steps, dtype=self.STEP_DTYPE)

    def step_durations(self) -> np.ndarray:
        """The steps' durations in seconds, over the recorded array (no copy, contiguous)."""
        return np.frombuffer(self.durations, dtype=np.float64)

    def close_request(self, r: Request) -> None:
        if r.idx >= self.request_top:
            self.request_top = r.idx + 1
        i = r.idx - self.request_base
        if i < 0:  # rolling, and older than the requests kept: the online layer has its outcome
            return
        if i >= len(self.outcome):
            self.grow(i + 1)
        if r.first_scheduled >= 0:
            self.first_scheduled[i] = r.first_scheduled
        if r.first_token >= 0:
            self.first_token[i] = r.first_token
        if r.finish_time >= 0:
            self.finish[i] = r.finish_time
        self.num_output[i] = r.num_output
        self.outcome[i] = r.outcome
        if r.num_preemptions:  # these columns start at 0: most requests leave them there
            self.preemptions[i] = r.num_preemptions
        if r.recomputed_tokens:  # (a request moved off a lost replica has no preemption)
            self.recomputed[i] = r.recomputed_tokens
        if r.reused_tokens:
            self.reused[i] = r.reused_tokens
        if r.prefix_hit_tokens:
            self.prefix_hit[i] = r.prefix_hit_tokens
        if r.segments:
            self.flush_tokens(r)

    def grow(self, n: int) -> None:
        """Make room for request index ``n - 1``: online runs (``ClusterSimulator.submit``) add
        requests beyond the trace the recorder was sized for. Doubles, so appends stay cheap."""
        extra = max(n, 2 * len(self.outcome), 64) - len(self.outcome)
        for col in REQUEST_COLUMNS[:3]:
            getattr(self, col).extend(array("d", [math.nan]) * extra)
        for col in REQUEST_COLUMNS[3:8]:
            getattr(self, col).extend(array("q", [0]) * extra)
        self.outcome.extend(array("q", [OUTCOME_UNFINISHED]) * extra)

    def flush_tokens(self, r: Request) -> None:
        """Add a request's inter-token gaps on this replica to the pooled ITL figures."""
        seg = r.segments
        if not seg or self.rolling:
            return
        if r.moved_token_time >= 0:  # the gap across a move from a lost replica
            self.itl_gaps.append(self.step_end[seg[0]] - r.moved_token_time)
            r.moved_token_time = -1.0
        if len(seg) == 2:  # the usual case: one run of outputs
            c = seg[1]
            if c > 1:
                self.itl_run_first.append(seg[0] + 1)
                self.itl_run_last.append(seg[0] + c - 1)
        else:
            end = self.step_end
            prev = -1
            for j in range(0, len(seg), 2):
                s, c = seg[j], seg[j + 1]
                if prev >= 0:
                    self.itl_gaps.append(end[s] - end[prev])
                if c > 1:
                    self.itl_run_first.append(s + 1)
                    self.itl_run_last.append(s + c - 1)
                prev = s + c - 1
        if self.token_steps is not None:
            self.token_steps[r.idx] = list(seg)


__all__ = ["REQUEST_COLUMNS", "Recorder"]
