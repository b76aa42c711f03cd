"""Traffic at any arrival rate, with replicates (seeds) to bound the noise of one run.

Three kinds of workload, each scaled to a rate ``r`` and drawn for a replicate seed ``s``:

* **trace** (a real trace): time is rescaled, ``arrival x r0 / r``, where ``r0 = (n - 1) / span``
  is the trace's mean arrival rate; the requests and their order are kept, so bursts keep their
  shape. Replicate 0 is the trace itself; replicate ``s > 0`` is a *circular shift*: the trace
  starts at a request chosen by seed ``s`` and wraps around (the wrap gap is the mean gap). The
  same requests and gaps, met by the server in another phase: that is what varies between seeds
  of a real trace (its length mix and burst structure do not).
* **generator** (a ``GeneratorSpec``): the arrival process gets the rate (Poisson, Gamma and
  constant take it as their rate; on/off, ramp and diurnal have every rate scaled by the same
  factor, so their shape is kept); replicate ``s`` is the spec's seed ``+ s``. Poisson and Gamma
  draws scale exactly with the rate for one seed (common random numbers), so rates of one seed are
  compared on the same randomness.
* **requests** (a fixed request list with a named arrival process, as in the seed JSON files):
  the lengths are kept and the arrival times are redrawn for each seed at the rate.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from servesim.errors import InputError, InternalError
from servesim.traces.arrival_names import parse_arrival_name
from servesim.traces.arrivals import (
    ArrivalModel,
    BurstArrivals,
    ConstantArrivals,
    DiurnalArrivals,
    GammaArrivals,
    OnOffArrivals,
    PoissonArrivals,
    RampArrivals,
    sample_arrivals,
    stream_rng,
)
from servesim.traces.bundled import BUNDLED_TRACES
from servesim.traces.generate import GeneratorSpec, generate_trace
from servesim.traces.lengths import (
    FixedLength,
    LengthModel,
    LogNormalLength,
    ResampledLength,
    UniformLength,
    length_table,
)
from servesim.traces.load import load_trace
from servesim.traces.presets import preset_spec
from servesim.traces.schema import Trace, TraceProvenance

#: Replicate seeds of re-verification start here, away from the search seeds 0, 1, 2...
FRESH_SEED_BASE = 1000


def fresh_seeds(n: int) -> list[int]:
    """The ``n`` fresh replicate seeds (``FRESH_SEED_BASE``, + 1, ...): traffic no search saw.
    Every capacity figure (the SLO knee, the unstable rate) and every re-verification runs on
    these, so ``saturate``, ``tune``'s headroom, the demo, the web and the report measure the
    same deployment on the same traffic and give the same number."""
    if n < 1:
        raise InputError(f"at least one seed is needed, got {n}")
    return [FRESH_SEED_BASE + i for i in range(n)]


def arrival_rate(model: ArrivalModel) -> float | None:
    """The nominal mean rate of an arrival process (None for a burst: it has no rate)."""
    if isinstance(model, PoissonArrivals | GammaArrivals | ConstantArrivals):
        return float(model.rate)
    if isinstance(model, OnOffArrivals):
        return float(model.mean_rate())
    if isinstance(model, RampArrivals):
        return 0.5 * (model.rate_start + model.rate_end)
    if isinstance(model, DiurnalArrivals):
        return float(model.mean_rate)
    return None


def scale_arrival(model: ArrivalModel, rate: float) -> ArrivalModel:
    """The same arrival process at nominal rate ``rate`` (every rate scaled by one factor)."""
    nominal = arrival_rate(model)
    if nominal is None or isinstance(model, BurstArrivals):
        raise InputError(
            "burst arrivals (everything at t=0) have no rate to scale; use a rate process such as "
            "poisson_10_rps, or a trace file"
        )
    if not rate > 0:
        raise InputError(f"rate must be > 0, got {rate}")
    f = rate / nominal
    if isinstance(model, PoissonArrivals | GammaArrivals | ConstantArrivals):
        return model.model_copy(update={"rate": rate})
    if isinstance(model, OnOffArrivals):
        return model.model_copy(update={"rate_on": model.rate_on * f, "rate_off": model.rate_off * f})
    if isinstance(model, RampArrivals):
        return model.model_copy(update={"rate_start": model.rate_start * f, "rate_end": model.rate_end * f})
    if not isinstance(model, DiurnalArrivals):
        raise InternalError("invariant broken: isinstance(model, DiurnalArrivals)")
    return model.model_copy(update={"mean_rate": rate})


def trace_rate(trace: Trace) -> float | None:
    """Mean arrival rate ``(n - 1) / (last - first)`` (None when it is undefined)."""
    t = trace.df["arrival_time_s"].to_numpy(dtype=np.float64)
    if len(t) < 2 or not t[-1] > t[0]:
        return None
    return (len(t) - 1) / float(t[-1] - t[0])


def _length_bound(model: LengthModel) -> int | None:
    if isinstance(model, FixedLength):
        return model.value
    if isinstance(model, UniformLength):
        return model.max
    if isinstance(model, LogNormalLength):
        return model.max
    if not isinstance(model, ResampledLength):
        raise InternalError("invariant broken: isinstance(model, ResampledLength)")
    return _source_bound(model.source)


@functools.lru_cache(maxsize=8)
def _source_bound(source: str) -> int | None:
    prompt, output = length_table(source)
    return int((prompt + output).max()) if len(prompt) else None


class Workload:
    """Traffic that can be replayed at any rate and seed (see the module docstring)."""

    def __init__(
        self,
        kind: Literal["trace", "generator", "requests"],
        name: str,
        *,
        trace: Trace | None = None,
        spec: GeneratorSpec | None = None,
        arrival: ArrivalModel | None = None,
        seed: int = 0,
    ) -> None:
        self.kind = kind
        self.name = name
        self._trace = trace
        self._spec = spec
        self._arrival = arrival
        self._seed = seed
        if kind == "trace":
            if trace is None:
                raise InternalError("invariant broken: trace is None")
            self.base_rate = trace_rate(trace)
            self.num_requests = len(trace)
        elif kind == "generator":
            if spec is None:
                raise InternalError("invariant broken: spec is None")
            self.base_rate = arrival_rate(spec.arrival)
            self.num_requests = spec.num_requests
        else:
            if not (trace is not None and arrival is not None):
                raise InternalError("invariant broken: trace is not None and arrival is not None")
            self.base_rate = arrival_rate(arrival)
            self.num_requests = len(trace)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_trace(cls, trace: Trace, name: str | None = None) -> Workload:
        """A real trace, rescaled in time; seeds are circular shifts (seed 0: as recorded).

        A trace read from a seed JSON file (a request list with a named arrival process) becomes
        a ``requests`` workload: its arrivals are redrawn per seed."""
        gen = trace.provenance.generator or {}
        label = name or trace.provenance.source
        dist = gen.get("arrival_distribution")
        if isinstance(dist, str) and trace.provenance.format == "seed-json":
            return cls.from_requests(
                trace, parse_arrival_name(dist), seed=int(gen.get("seed", 0)), name=label
            )
        return cls("trace", label, trace=trace)

    @classmethod
    def from_spec(cls, spec: GeneratorSpec) -> Workload:
        """A generator: the rate replaces the arrival process's; seeds offset the spec's seed."""
        return cls("generator", f"generator:{spec.name}", spec=spec)

    @classmethod
    def from_requests(
        cls, trace: Trace, arrival: ArrivalModel, *, seed: int = 0, name: str = "requests"
    ) -> Workload:
        """Fixed requests (lengths, ids, prefixes) whose arrival times are drawn per seed."""
        return cls("requests", name, trace=trace, arrival=arrival, seed=seed)

    @classmethod
    def from_source(
        cls,
        source: str,
        *,
        seed: int = 0,
        num_requests: int | None = None,
        strict: bool = False,
        hash_block_size: int | None = None,
    ) -> Workload:
        """What a CLI's TRACE argument names: a file or bundled trace, else a generator preset.

        ``strict`` / ``hash_block_size`` apply to files (``load_trace``); dropped rows are listed
        in ``provenance``."""
        if Path(source).exists() or source in BUNDLED_TRACES:
            trace = load_trace(source, seed=seed, strict=strict, hash_block_size=hash_block_size)
            return cls.from_trace(trace, name=source)
        spec = preset_spec(source)
        update: dict[str, Any] = {"seed": seed}
        if num_requests is not None:
            update["num_requests"] = num_requests
        return cls.from_spec(spec.model_copy(update=update))

    @property
    def provenance(self) -> TraceProvenance | None:
        """Where the trace came from and which rows were dropped (None for a generator)."""
        return None if self._trace is None else self._trace.provenance

    # ------------------------------------------------------------------ traces
    def rate_for(self, rate: float | None) -> float | None:
        return self.base_rate if rate is None else rate

    def trace(self, rate: float | None = None, seed: int = 0) -> Trace:
        """The workload at ``rate`` (None: as given) for replicate ``seed``."""
        if rate is not None and not rate > 0:
            raise InputError(f"rate must be > 0, got {rate}")
        if seed < 0:
            raise InputError(f"seed must be >= 0, got {seed}")
        if self.kind == "generator":
            if self._spec is None:
                raise InternalError("invariant broken: self._spec is None")
            update: dict[str, Any] = {"seed": self._spec.seed + seed}
            if rate is not None:
                update["arrival"] = scale_arrival(self._spec.arrival, rate)
            return generate_trace(self._spec.model_copy(update=update))
        if self._trace is None:
            raise InternalError("invariant broken: self._trace is None")
        if self.kind == "requests":
            if self._arrival is None:
                raise InternalError("invariant broken: self._arrival is None")
            model = self._arrival if rate is None else scale_arrival(self._arrival, rate)
            times = sample_arrivals(model, len(self._trace), stream_rng(self._seed + seed, "arrivals"))
            return _with_arrivals(self._trace, np.arange(len(self._trace)), times)
        return self._real_trace(rate, seed)

    def _real_trace(self, rate: float | None, seed: int) -> Trace:
        if self._trace is None:
            raise InternalError("invariant broken: self._trace is None")
        t = self._trace.df["arrival_time_s"].to_numpy(dtype=np.float64)
        n = len(t)
        if rate is not None and self.base_rate is None:
            raise InputError(
                f"{self.name}: every request arrives at the same instant, so the trace has no rate to scale"
            )
        order = np.arange(n)
        times = t.copy()
        if seed > 0 and n >= 2:
            k = int(np.random.default_rng(np.random.SeedSequence([seed, 7])).integers(1, n))
            gaps = np.diff(t)
            wrap = float(t[-1] - t[0]) / (n - 1)
            g = np.append(gaps, wrap)
            order = (k + np.arange(n)) % n
            times = t[0] + np.concatenate([[0.0], np.cumsum(g[order[:-1]])])
        if rate is not None:
            if self.base_rate is None:
                raise InternalError("invariant broken: self.base_rate is None")
            times = times * (self.base_rate / rate)
        return _with_arrivals(self._trace, order, times)

    # ------------------------------------------------------------------ facts
    def max_request_tokens(self) -> int:
        """The longest prompt + output the workload can hold (a bound for generators)."""
        if self.kind == "generator":
            if self._spec is None:
                raise InternalError("invariant broken: self._spec is None")
            bp, bo = _length_bound(self._spec.prompt), _length_bound(self._spec.output)
            if bp is not None and bo is not None:
                return bp + bo
            t = self.trace(None, 0)
        else:
            if self._trace is None:
                raise InternalError("invariant broken: self._trace is None")
            t = self._trace
        if len(t) == 0:
            return 1
        return int((t.df["prompt_len"] + t.df["output_len"]).max())

    def default_max_model_len(self) -> int:
        """vLLM's ``--max-model-len`` for this traffic: the longest request + 1 (the engine's default)."""
        return self.max_request_tokens() + 1

    def sample(self) -> Trace:
        """Replicate 0 at the native rate (for length statistics and prefix detection)."""
        return self.trace(None, 0)

    def describe(self) -> dict[str, Any]:
        noise = {
            "trace": "seed 0 = the trace as recorded; seed s > 0 = circular shift chosen by s",
            "generator": "seed s = the generator spec's seed + s",
            "requests": "seed s redraws the arrival times (lengths fixed)",
        }[self.kind]
        out: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "num_requests": self.num_requests,
            "base_rate_rps": self.base_rate,
            "seeds": noise,
        }
        if self._trace is not None:
            out["content_sha256"] = _content_hash(self._trace)
        if self._spec is not None:
            out["generator"] = self._spec.model_dump(mode="json")
        if self._arrival is not None:
            out["arrival"] = self._arrival.model_dump(mode="json")
        return out


def _content_hash(trace: Trace) -> str:
    """A short hash of what the simulation reads from a trace (a changed file is another workload)."""
    h = hashlib.sha256()
    df = trace.df
    for col in ("arrival_time_s", "prompt_len", "output_len", "priority", "prefix_len"):
        h.update(np.ascontiguousarray(df[col].to_numpy()).tobytes())
    h.update("\x1f".join(map(str, df["req_id"])).encode())
    h.update("\x1f".join(map(str, df["prefix_group"])).encode())
    rate = df["spec_accept_rate"]
    if bool(rate.notna().any()):  # hashed only when given: older traces keep their hash
        h.update(np.ascontiguousarray(rate.to_numpy(dtype=np.float64)).tobytes())
    lora = df["lora"]
    if bool(lora.notna().any()):  # likewise the adapters: another adapter mix is another workload
        h.update("\x1f".join(map(str, lora)).encode())
    return h.hexdigest()[:16]


def _with_arrivals(trace: Trace, order: np.ndarray, times: np.ndarray) -> Trace:
    """``trace``'s rows in ``order`` with new (sorted) arrival times."""
    df = trace.df.iloc[order].reset_index(drop=True) if len(order) else trace.df.copy()
    df = df.copy()
    df["arrival_time_s"] = pd.Series(np.asarray(times, dtype=np.float64), dtype=np.float64)
    return Trace(df, trace.provenance)
