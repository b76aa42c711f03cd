"""Running one layout of the search (``layouts``): ``LayoutRunner`` resolves its pools as
``servesim cluster`` does, each with the deployment's own keys (``DEPLOYMENT_KEYS``), runs it on
the trace and scores it (goodput per GPU, the p99s), and words its ``vllm serve`` lines. Kept
apart from the search so the search reads as the space, the front and the choice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from servesim.errors import InputError
from servesim.traces.schema import Trace
from servesim.tuning.layout_models import Layout, LayoutPoint

#: The vLLM keys a layout search keeps as the deployment gives them: properties of the checkpoint
#: (its weight format) and of the deployment (the KV dtype), not knobs a layout tunes. Every pool
#: and every DP rank runs with them, so the memory fit that decides which TP fits is theirs.
DEPLOYMENT_KEYS = ("quantization", "kv_cache_dtype")


class LayoutRunner:
    """Runs a layout on the trace: the pools resolved as ``servesim cluster`` resolves them
    (vllm serve's defaults on the GPU, KV sized for the trace), each with the deployment's own
    keys (``engine``: ``DEPLOYMENT_KEYS``)."""

    def __init__(
        self,
        trace: Trace,
        *,
        model: str,
        gpu: str | None,
        step_time_ms: float | None = None,
        linear_step_time: bool = False,
        link: str = "rdma-400g",
        short_prompt_tokens: int = 0,
        ttft_ms: float | None = None,
        tpot_ms: float | None = None,
        engine: Mapping[str, Any] | None = None,
    ) -> None:
        other = sorted(set(engine or {}) - set(DEPLOYMENT_KEYS))
        if other:
            raise InputError(
                f"a layout runs every pool at vllm serve's defaults: {', '.join(other)} cannot be "
                f"fixed (only {', '.join(DEPLOYMENT_KEYS)}, the checkpoint's)"
            )
        self.engine = dict(engine or {})
        self.trace = trace
        self.model = model
        self.gpu = gpu
        self.step_time_ms = step_time_ms
        self.linear = linear_step_time
        self.link = link
        self.short = short_prompt_tokens
        self.ttft_ms = ttft_ms
        self.tpot_ms = tpot_ms

    def with_trace(self, trace: Trace) -> LayoutRunner:
        """The same layouts' runner on other traffic (a fresh seed's)."""
        other = LayoutRunner.__new__(LayoutRunner)
        other.__dict__.update(self.__dict__)
        other.trace = trace
        return other

    @property
    def timed(self) -> bool:
        return self.step_time_ms is not None or self.linear

    def _replicas(self, tag: str, n: int, tp: int, keys: dict[str, Any]) -> list[Any]:
        from servesim.spec import DeploymentSpec, resolve_replicas

        base = DeploymentSpec(
            model=None if self.timed else self.model,
            gpu=self.gpu,
            tp=None if self.timed else tp,
            step_time_ms=self.step_time_ms,
            linear_step_time=self.linear,
        )
        keys = {**self.engine, **keys}
        return [
            rep
            for rep, _ in resolve_replicas(base, [(f"{tag}{i}", dict(keys)) for i in range(n)], self.trace)
        ]

    def _data_parallel(self, lay: Layout) -> pd.DataFrame:
        """A ``dpep`` layout's requests: its ranks resolved and run as ``servesim simulate
        --data-parallel-size`` runs them (``servesim.spec.data_parallel``)."""
        from servesim.perf.catalog import resolve_model
        from servesim.spec import resolve
        from servesim.spec.data_parallel import run_data_parallel

        if self.timed:
            raise InputError("--layouts dpep needs a model on a GPU (the ranks' lockstep is the roofline's)")
        if not resolve_model(self.model).is_moe:
            raise InputError(
                f"--layouts dpep: {self.model} is a dense model (no experts to split over the ranks); "
                "use agg / disagg"
            )
        resolved = resolve(self._dp_spec(lay), max_model_len=self.trace.default_max_model_len())
        result, _ = run_data_parallel(self.trace, resolved, None, pooled_itl=False)
        return result.requests

    def _dp_spec(self, lay: Layout) -> Any:
        from servesim.spec import DeploymentSpec

        return DeploymentSpec(
            model=self.model,
            gpu=self.gpu,
            tp=lay.tp,
            data_parallel_size=lay.dp,
            enable_expert_parallel=True,
            engine=dict(self.engine),
        )

    def commands(self, lay: Layout) -> list[str]:
        """The layout's ``vllm serve`` line of each pool (every replica of a pool runs the same
        one), carrying the deployment's keys (``--quantization`` / ``--kv-cache-dtype``) so the
        server runs the checkpoint that was simulated; none with a fixed step time (no model)."""
        from servesim.spec import DeploymentSpec
        from servesim.tuning.deployment import Deployment

        if self.timed:
            return []
        max_len = self.trace.default_max_model_len()

        def line(what: str, tp: int, keys: Mapping[str, Any], dp: int = 1) -> str:
            spec = DeploymentSpec(
                model=self.model,
                gpu=self.gpu,
                tp=tp,
                data_parallel_size=dp,
                enable_expert_parallel=dp > 1,
                engine={**self.engine, **keys},
            )
            return (
                f"{what}: {Deployment.from_spec(spec, max_len).vllm_serve_command(self.model, strict=False)}"
            )

        if lay.kind == "agg":
            return [line(f"each of {lay.replicas} replica(s)", lay.tp, {})]
        if lay.kind == "dpep":
            return [line(f"one server of {lay.dp} DP ranks", lay.tp, {}, lay.dp)]
        return [
            line(f"each of {lay.prefill_replicas} prefill replica(s)", lay.prefill_tp, lay.prefill_config),
            line(f"each of {lay.decode_replicas} decode replica(s)", lay.decode_tp, lay.decode_config),
        ]

    def _spec(self, lay: Layout) -> Any:
        from servesim.cluster.pd import DisaggSpec, PoolSpec

        return DisaggSpec(
            prefill=PoolSpec(
                replicas=lay.prefill_replicas, tp=lay.prefill_tp, config={**self.engine, **lay.prefill_config}
            ),
            decode=PoolSpec(
                replicas=lay.decode_replicas, tp=lay.decode_tp, config={**self.engine, **lay.decode_config}
            ),
            link=self.link,
            short_prompt_tokens=self.short,
            model=self.model,
        )

    def link_gbps(self, lay: Layout) -> float:
        return float(self._spec(lay).context().bandwidth_gbps)

    def latencies(self, lay: Layout, bandwidth_gbps: float | None = None) -> tuple[pd.DataFrame, float]:
        """Each request's outcome and TTFT/TPOT/E2E in ms (TPOT NaN: one output token), in trace
        order, as ``engine.results.good_mask`` reads them, the same in seconds (``*_s``: the
        p99s are taken of those), and the run's span in seconds."""
        if lay.kind in ("agg", "dpep"):
            if lay.kind == "agg":
                from servesim.cluster import simulate_cluster

                reps = self._replicas("n", lay.replicas, lay.tp, {})
                df = simulate_cluster(self.trace, reps, pooled_itl=False, replica_summaries=False).requests
            else:
                df = self._data_parallel(lay)
            span = float(df["finish_s"].max() - df["arrival_s"].min()) if len(df) else 0.0
            out = df[["outcome", "ttft_ms", "tpot_ms", "e2e_ms"]].reset_index(drop=True)
            for m in ("ttft", "tpot", "e2e"):
                out[f"{m}_s"] = out[f"{m}_ms"].to_numpy(dtype=np.float64) / 1000.0
            return out, span
        from servesim.cluster.pd import PDCluster
        from servesim.engine.results import OUTCOME_FINISHED

        spec = self._spec(lay)
        ctx = spec.context()
        if bandwidth_gbps is not None:
            ctx = ctx.with_bandwidth(bandwidth_gbps)
        p = self._replicas("p", lay.prefill_replicas, lay.prefill_tp, lay.prefill_config)
        d = self._replicas("d", lay.decode_replicas, lay.decode_tp, lay.decode_config)
        run = PDCluster(self.trace, p, d, ctx, short_prompt_tokens=self.short).run()
        reqs = [run.decode_req[i] for i in sorted(run.decode_req)]  # every one finished (no failures)
        ttft = np.array([r.first_token - r.arrival for r in reqs], dtype=np.float64)
        tpot = np.array(
            [
                (r.finish_time - r.first_token) / (r.num_output - 1) if r.num_output > 1 else math.nan
                for r in reqs
            ],
            dtype=np.float64,
        )
        e2e = np.array([r.finish_time - r.arrival for r in reqs], dtype=np.float64)
        frame = pd.DataFrame(
            {
                "outcome": [OUTCOME_FINISHED] * len(reqs),
                "ttft_ms": ttft * 1000.0,
                "tpot_ms": tpot * 1000.0,
                "e2e_ms": e2e * 1000.0,
                "ttft_s": ttft,
                "tpot_s": tpot,
                "e2e_s": e2e,
            }
        )
        span = max(r.finish_time for r in reqs) - min(r.arrival for r in reqs) if reqs else 0.0
        return frame, span

    def point(self, lay: Layout, bandwidth_gbps: float | None = None) -> LayoutPoint:
        """The layout scored: good requests by the engine's own test (``good_mask``: finished,
        within the TTFT/TPOT thresholds and the trace's per-request SLAs) per second of the run
        (``per_second``), over its GPUs; and the p99s."""
        from servesim.engine.results import SLO, good_mask, per_second

        frame, span = self.latencies(lay, bandwidth_gbps)
        sla = self.trace.df
        slo = (
            SLO(ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms)
            if self.ttft_ms is not None or self.tpot_ms is not None
            else None
        )
        good = good_mask(
            frame,
            slo,
            sla["sla_ttft_ms"].to_numpy(dtype=np.float64),
            sla["sla_e2e_ms"].to_numpy(dtype=np.float64),
        )
        n_good = int(good.sum())
        rate = per_second(n_good, span)
        ttft = frame["ttft_s"].to_numpy(dtype=np.float64)
        ttft = ttft[~np.isnan(ttft)]
        tpot = frame["tpot_s"].to_numpy(dtype=np.float64)
        e2e = frame["e2e_s"].to_numpy(dtype=np.float64)
        e2e = e2e[~np.isnan(e2e)]
        tp = tpot[~np.isnan(tpot)]
        t99 = float(np.percentile(ttft, 99) * 1000.0) if len(ttft) else 0.0
        o99 = float(np.percentile(tp, 99) * 1000.0) if len(tp) else None
        meets = (self.ttft_ms is None or t99 <= self.ttft_ms) and (
            self.tpot_ms is None or o99 is None or o99 <= self.tpot_ms
        )
        return LayoutPoint(
            label=lay.label,
            layout=lay,
            gpus=lay.gpus,
            good_requests=n_good,
            num_requests=len(frame),
            goodput_rps=rate,
            goodput_per_gpu=rate / lay.gpus,
            ttft_p99_ms=t99,
            tpot_p99_ms=o99,
            e2e_p99_ms=float(np.percentile(e2e, 99) * 1000.0) if len(e2e) else 0.0,
            meets_p99=meets,
        )


__all__ = ["DEPLOYMENT_KEYS", "LayoutRunner"]
