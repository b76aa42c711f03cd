"""The small grammar of arrival-distribution names, shared by seed JSON files and presets.

::

    burst | burst_<anything>        every request at t=0            (burst_empty, burst_1000)
    poisson_<rate>_rps              Poisson, vLLM-rescaled           (poisson_100_rps)
    constant_<rate>_rps             request i at i/rate              (constant_2.5_rps)
    gamma_<rate>_rps_cv<cv>         Gamma gaps with CV cv            (gamma_10_rps_cv2)
    gamma_<rate>_rps_k<k>           Gamma gaps with shape k          (gamma_10_rps_k0.25)

``<rate>``, ``<cv>``, ``<k>`` are positive decimals; ``p`` may stand for the decimal point
(``poisson_0p5_rps``). Names are case-insensitive. CV c means burstiness k = 1/c².
"""

from __future__ import annotations

import re

from servesim.errors import InputError, shown
from servesim.traces.arrivals import (
    ArrivalModel,
    BurstArrivals,
    ConstantArrivals,
    GammaArrivals,
    PoissonArrivals,
)

_NUM = r"(\d+(?:[.p]\d+)?)"
_RATE = re.compile(rf"^(poisson|constant)_{_NUM}_rps$")
_GAMMA = re.compile(rf"^gamma_{_NUM}_rps_(cv|k){_NUM}$")

GRAMMAR_HELP = (
    "burst | burst_<anything> | poisson_<rate>_rps | constant_<rate>_rps | "
    "gamma_<rate>_rps_cv<cv> | gamma_<rate>_rps_k<k>"
)


def _number(text: str) -> float:
    return float(text.replace("p", "."))


def parse_arrival_name(name: str) -> ArrivalModel:
    """The arrival model a name stands for; ``ValueError`` (with the grammar) if none."""
    key = name.strip().lower()
    if key == "burst" or key.startswith("burst_"):
        return BurstArrivals()
    m = _RATE.match(key)
    if m:
        rate = _number(m.group(2))
        if rate > 0:
            return PoissonArrivals(rate=rate) if m.group(1) == "poisson" else ConstantArrivals(rate=rate)
    m = _GAMMA.match(key)
    if m:
        rate, value = _number(m.group(1)), _number(m.group(3))
        if rate > 0 and value > 0:
            k = 1.0 / value**2 if m.group(2) == "cv" else value
            return GammaArrivals(rate=rate, burstiness=k)
    raise InputError(f"unknown arrival distribution {shown(name)}; expected one of: {GRAMMAR_HELP}")


def is_arrival_name(name: str) -> bool:
    try:
        parse_arrival_name(name)
    except ValueError:
        return False
    return True
