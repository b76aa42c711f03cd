"""Named generator presets, plus every name of the arrival grammar (``poisson_<rate>_rps``...).

``preset_spec("default")`` is 1,000 requests, Poisson at 10 req/s (vLLM-rescaled), log-normal
prompts with mean 1,200 tokens (sigma 0.6, at most 8,192) and outputs with mean 150 tokens
(sigma 0.8, at most 2,048). A name of the arrival grammar (``arrival_names``) is the default
spec with that arrival process: ``poisson_100_rps``, ``gamma_10_rps_cv3``, ``burst_1000``...
"""

from __future__ import annotations

from collections.abc import Callable

from servesim.errors import InputError, shown
from servesim.traces.arrival_names import GRAMMAR_HELP, parse_arrival_name
from servesim.traces.arrivals import (
    BurstArrivals,
    DiurnalArrivals,
    GammaArrivals,
    OnOffArrivals,
    PoissonArrivals,
    RampArrivals,
)
from servesim.traces.generate import GeneratorSpec
from servesim.traces.lengths import FixedLength, LogNormalLength, ResampledLength
from servesim.traces.prefixes import PrefixSpec


def _from_name(name: str) -> GeneratorSpec:
    return GeneratorSpec(name=name, arrival=parse_arrival_name(name))


#: name -> (one-line description, spec factory)
PRESETS: dict[str, tuple[str, Callable[[], GeneratorSpec]]] = {
    "default": (
        "1,000 requests, Poisson 10 req/s, prompt mean 1,200 / output mean 150 (log-normal)",
        lambda: GeneratorSpec(name="default"),
    ),
    "poisson_100_rps": ("the default lengths, Poisson at 100 req/s", lambda: _from_name("poisson_100_rps")),
    "burst_empty": (
        "an empty trace",
        lambda: GeneratorSpec(name="burst_empty", num_requests=0, arrival=BurstArrivals()),
    ),
    "burst": ("1,000 requests all at t=0 (vLLM --request-rate inf)", lambda: _from_name("burst")),
    "bursty": (
        "Gamma arrivals at 10 req/s with CV 2 (vLLM --burstiness 0.25)",
        lambda: GeneratorSpec(name="bursty", arrival=GammaArrivals(rate=10, burstiness=0.25)),
    ),
    "onoff": (
        "on/off bursts: 20 req/s for ~20 s, 0.5 req/s for ~40 s (like the Azure code trace)",
        lambda: GeneratorSpec(
            name="onoff", arrival=OnOffArrivals(rate_on=20, rate_off=0.5, mean_on_s=20, mean_off_s=40)
        ),
    ),
    "ramp": (
        "3,000 requests, rate rising linearly from 1 to 40 req/s over 120 s",
        lambda: GeneratorSpec(
            name="ramp", num_requests=3000, arrival=RampArrivals(rate_start=1, rate_end=40, duration_s=120)
        ),
    ),
    "diurnal": (
        "5,000 requests, sinusoidal rate 10 req/s ± 80 % with a 10-minute period",
        lambda: GeneratorSpec(
            name="diurnal",
            num_requests=5000,
            arrival=DiurnalArrivals(mean_rate=10, amplitude=0.8, period_s=600),
        ),
    ),
    "prefix_heavy": (
        "prompts mean 2,000 tokens; 90 % share one of 8 1,024-token prefixes (Zipf 1.1)",
        lambda: GeneratorSpec(
            name="prefix_heavy",
            prompt=LogNormalLength(mean=2000, sigma=0.5, max=8192),
            prefix=PrefixSpec(num_groups=8, prefix_len=FixedLength(value=1024), zipf_s=1.1, fraction=0.9),
        ),
    ),
    "azure_conv_like": (
        "lengths resampled (pairs) from the bundled Azure conv trace, Poisson 5.53 req/s",
        lambda: GeneratorSpec(
            name="azure_conv_like",
            arrival=PoissonArrivals(rate=5.53),
            prompt=ResampledLength(source="azure-conv"),
            output=ResampledLength(source="azure-conv"),
        ),
    ),
    "azure_code_like": (
        "lengths resampled (pairs) from the bundled Azure code trace, on/off arrivals",
        lambda: GeneratorSpec(
            name="azure_code_like",
            arrival=OnOffArrivals(rate_on=10, rate_off=0.3, mean_on_s=20, mean_off_s=50),
            prompt=ResampledLength(source="azure-code"),
            output=ResampledLength(source="azure-code"),
        ),
    ),
}


def preset_spec(name: str) -> GeneratorSpec:
    """The spec of a named preset or of an arrival-grammar name; ``ValueError`` lists them."""
    if name in PRESETS:
        return PRESETS[name][1]()
    try:
        return _from_name(name)
    except ValueError:
        raise InputError(
            f"unknown preset {shown(name)}; known: {', '.join(PRESETS)}; or an arrival name ({GRAMMAR_HELP})"
        ) from None
