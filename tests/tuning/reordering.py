"""An executor whose jobs finish in a chosen order (reversed, shuffled) in another process.

One spawned worker takes the jobs in the order given, so they finish exactly in that order
(recorded as they come back, and checked by the tests); its BLAS runs one thread, as a Ray
worker's does (``OMP_NUM_THREADS=1``), where this process may run several. Results come back in
job order, as ``servesim.tuning.executors.Executor`` promises; what the tests check is that
nothing a study writes depends on which order, process or BLAS configuration ran its jobs.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Literal
from unittest import mock

from servesim.tuning.executors import _Base, _init_worker, _run_in_worker
from servesim.tuning.jobs import EvalContext, Job

Order = Literal["reverse", "shuffled"]


class ReorderingExecutor(_Base):
    kind = "process"

    def __init__(self, ctx: EvalContext, order: Order, seed: int = 0) -> None:
        self.ctx = ctx
        self.order = order
        self._rng = random.Random(seed)
        self.finished: list[list[int]] = []  # per map call: job indices in the order they finished
        with mock.patch.dict(os.environ, {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}):
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(ctx,),
            )
            self._pool.submit(int).result()  # start the worker now, under that environment

    def _permutation(self, n: int) -> list[int]:
        idx = list(range(n))
        if self.order == "reverse":
            return idx[::-1]
        while n > 1 and idx == sorted(idx):
            self._rng.shuffle(idx)
        return idx

    def map(self, jobs: Sequence[Job]) -> list[Any]:
        perm = self._permutation(len(jobs))
        done: list[int] = []
        lock = threading.Lock()
        all_done = threading.Event()
        futures: dict[int, Future[Any]] = {}

        def finished(i: int) -> Any:
            def record(_: Future[Any]) -> None:
                with lock:
                    done.append(i)
                    if len(done) == len(jobs):
                        all_done.set()

            return record

        for i in perm:
            futures[i] = self._pool.submit(_run_in_worker, jobs[i])
            futures[i].add_done_callback(finished(i))
        results = [futures[i].result() for i in range(len(jobs))]
        all_done.wait()  # callbacks run just after a result is set
        self.finished.append(done)
        return results

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
