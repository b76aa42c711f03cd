"""The one SLO of every command, tab and file, and its one parser.

Percentile SLOs of a whole run (capacity planning) vs the engine's per-request SLO (goodput).

Two kinds of objective, used together and never confused:

* ``PercentileSLO`` caps a *run's* tail: ``ttft_p99_ms=500`` holds when the 99th percentile of
  TTFT over the run's finished requests is at most 500 ms (``numpy.percentile``, linear, as vLLM's
  benchmark reports it). This is what ``saturate`` and ``tune`` search against.
* The engine's ``SLO`` is *per request*: a request is "good" when its own TTFT/TPOT/E2E meet the
  thresholds, and goodput counts good requests per second. ``PercentileSLO.request_slo()`` turns
  the caps into that per-request form (the same thresholds), and ``min_good_fraction`` optionally
  requires a share of *all* requests (rejected ones count as not good) to be good.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from servesim.engine.results import SLO
from servesim.errors import InputError, describe, shown

_METRICS = ("ttft", "tpot", "e2e")
_GOOD_KEYS = ("good", "goodput", "min_good_fraction", "good_fraction")


class SLOError(InputError):
    """An SLO that does not parse. Its message names the input ``SLO``; an interface names its
    own input instead (``worded_for``: the CLI's ``--slo``, the web's ``slo``), so the same bad SLO
    reads the same everywhere."""

    def worded_for(self, name: str) -> str:
        """The message with the input called ``name`` (``--slo``, ``slo``)."""
        return str(self).replace("SLO ", f"{name} ", 1)


def _number(key: str, text: str) -> float:
    """A finite number (``inf``, ``nan``, ``1e999`` and JSON ``true`` are no latency cap)."""
    try:
        value = float(text.strip())
    except ValueError:
        raise SLOError(f"SLO {shown(key)}: {shown(text.strip())} is not a number") from None
    if not math.isfinite(value):
        raise SLOError(f"SLO {shown(key)}: {shown(text.strip())} is not a finite number")
    return value


def parse_slo(text: str | None) -> PercentileSLO | None:
    """``--slo`` of every command (and the web's and the files' ``slo``): None when not given.
    The same text means the same objective everywhere: caps on the run's p99 that are also each
    request's goodput threshold, and optionally ``good=FRACTION`` of all requests good."""
    if text is None or not text.strip():
        return None
    return PercentileSLO.parse(text)


class PercentileSLO(BaseModel):
    """Caps on a run's p99 latencies (ms), plus an optional share of requests that must be good."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_p99_ms: float | None = Field(None, gt=0, allow_inf_nan=False, description="Cap on TTFT p99, ms.")
    tpot_p99_ms: float | None = Field(None, gt=0, allow_inf_nan=False, description="Cap on TPOT p99, ms.")
    e2e_p99_ms: float | None = Field(None, gt=0, allow_inf_nan=False, description="Cap on E2E p99, ms.")
    min_good_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Share of all requests that must be good per request (each of its TTFT/TPOT/E2E "
        "within the caps above, and finished); None = no such requirement.",
    )

    @model_validator(mode="after")
    def _something(self) -> PercentileSLO:
        if self.min_good_fraction is not None and not self.caps():
            raise InputError("min_good_fraction needs at least one latency cap to define a good request")
        return self

    @classmethod
    def parse(cls, text: str) -> PercentileSLO:
        """Parse ``ttft_p99_ms=500,tpot_p99_ms=50[,e2e_p99_ms=20000][,good=0.95]`` (ms): the one SLO
        syntax of every command, tab and file (``parse_slo`` below words its errors for a flag)."""
        terms = []
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, val = part.partition("=")
            if not sep:
                raise SLOError(f"SLO term {shown(part)} must look like name=value, e.g. ttft_p99_ms=500")
            terms.append((key, val))
        if not terms:
            raise SLOError(f"empty SLO {shown(text)}: give e.g. ttft_p99_ms=500,tpot_p99_ms=50")
        return cls._from_terms(terms, text)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> PercentileSLO | None:
        """An SLO given as an object (the web's and the files' ``slo``: ``{"ttft_p99_ms": 500}``):
        the same keys, rules and wording as ``parse``; a key set to null is not given, and an
        object that gives none is no SLO (as an empty ``--slo`` is)."""
        terms = [(str(k), str(v)) for k, v in mapping.items() if v is not None]
        if not terms:
            return None
        return cls._from_terms(terms, ",".join(f"{k}={v}" for k, v in terms))

    @classmethod
    def _from_terms(cls, terms: Iterable[tuple[str, str]], text: str) -> PercentileSLO:
        values: dict[str, float] = {}
        for raw, val in terms:
            key = raw.strip().lower()
            if key in _GOOD_KEYS:
                name = "min_good_fraction"
            else:
                metric, _, pct = key.removesuffix("_ms").partition("_")
                if metric not in _METRICS or pct not in ("p99", ""):
                    raise SLOError(
                        f"unknown SLO {shown(key)}: use ttft_p99_ms, tpot_p99_ms, e2e_p99_ms (milliseconds) "
                        "and optionally good=FRACTION"
                    )
                if pct == "":
                    raise SLOError(
                        f"SLO {shown(key)} names no percentile: write {metric}_p99_ms (the cap on the run's "
                        "p99, also each request's goodput threshold)"
                    )
                name = f"{metric}_p99_ms"
            if name in values:
                raise SLOError(f"SLO {shown(key)} is given twice")
            values[name] = _number(key, val)
        try:
            return cls.model_validate(values)
        except (ValidationError, InputError) as e:
            raise SLOError(f"SLO {shown(text)}: {describe(e)}") from None

    def per_request(self) -> SLO | None:
        """The engine's per-request SLO of a single run (``simulate``, the advisor's batching case):
        ``request_slo``, refusing ``good=FRACTION``, which saturate and tune judge across a sweep or
        a study (a single run reports the good fraction it measured)."""
        if self.min_good_fraction is not None:
            raise SLOError(
                "SLO good=FRACTION is judged by saturate and tune; a single run reports the good "
                "fraction it measured: leave good= out here"
            )
        return self.request_slo()

    def caps(self) -> dict[str, float]:
        """``{"ttft": cap_ms, ...}`` for the metrics that have a cap."""
        out: dict[str, float] = {}
        for m in _METRICS:
            cap = getattr(self, f"{m}_p99_ms")
            if cap is not None:
                out[m] = float(cap)
        return out

    def request_slo(self) -> SLO | None:
        """The engine's per-request SLO with the same thresholds (None when nothing is capped)."""
        caps = self.caps()
        if not caps:
            return None
        return SLO(ttft_ms=caps.get("ttft"), tpot_ms=caps.get("tpot"), e2e_ms=caps.get("e2e"))

    def violations(self, p99_ms: dict[str, float], good_fraction: float) -> list[str]:
        """Why a run misses the SLO (empty when it holds): one readable line per broken term."""
        out: list[str] = []
        for metric, cap in self.caps().items():
            got = p99_ms[metric]
            if not got <= cap:
                out.append(f"{metric.upper()} p99 {got:,.1f} ms > {cap:,.1f} ms")
        if self.min_good_fraction is not None and good_fraction < self.min_good_fraction:
            out.append(f"good fraction {good_fraction:.3f} < {self.min_good_fraction:.3f}")
        return out

    def describe(self) -> str:
        parts = [f"{m}_p99_ms={c:g}" for m, c in self.caps().items()]
        if self.min_good_fraction is not None:
            parts.append(f"good={self.min_good_fraction:g}")
        return ",".join(parts)
