"""$ per GPU-hour per catalog GPU: the shipped list prices, overridable.

``servesim/data/perf/gpu_prices.yaml`` holds one on-demand list price per catalog GPU, each with
its source (the provider and product whose pricing page gave it) and the month it was taken.
They are list prices, to be overridden: ``PriceTable.with_overrides`` lays the user's figures
(``--gpu-price h100=2.5,l40s=0.9`` or a ``--gpu-prices FILE``) over them, the source of each
overridden price then reading ``given``. The one source of truth for a GPU's default price:
``tune``'s plan and the GPU-type search both draw from ``load_prices``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import InputError
from servesim.perf.catalog import Catalog, load_catalog
from servesim.perf.shipped import shipped_yaml

#: The source of a price the user gave (flag or file) rather than the shipped table's.
GIVEN = "given"


class GpuPrice(BaseModel):
    """One GPU's on-demand $ per GPU-hour, with where and when it was taken."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(description="Catalog GPU name.")
    usd_per_gpu_hour: float = Field(gt=0, allow_inf_nan=False)
    source: str = Field(min_length=1, description="Provider and product, or 'given' (a user override).")
    as_of: str | None = Field(None, description="The month it was taken (YYYY-MM); None for a given price.")

    def describe(self) -> str:
        if self.source == GIVEN:
            return f"${self.usd_per_gpu_hour:g}/GPU-hour (given)"
        return f"${self.usd_per_gpu_hour:g}/GPU-hour (list price, {self.source}, {self.as_of})"


class PriceTable:
    """Prices by catalog GPU name (aliases resolve through the catalog)."""

    def __init__(self, prices: dict[str, GpuPrice], catalog: Catalog | None = None) -> None:
        self.prices = dict(prices)
        self.catalog = catalog or load_catalog()

    def name(self, gpu: str) -> str:
        """The catalog name of ``gpu`` (``UnknownGPUError`` when the catalog has none)."""
        return self.catalog.gpu(gpu).name

    def get(self, gpu: str) -> GpuPrice | None:
        """``gpu``'s price (None: a catalog GPU without one, e.g. from a user catalog file)."""
        return self.prices.get(self.name(gpu))

    def price(self, gpu: str, flag: str = "--gpu-price") -> GpuPrice:
        """``gpu``'s price; ``InputError`` naming ``flag`` when there is none."""
        p = self.get(gpu)
        if p is None:
            raise InputError(f"{flag}: no price for GPU {gpu!r}: give one, e.g. {flag} {gpu}=2.5")
        return p

    def with_overrides(self, overrides: dict[str, float], flag: str = "--gpu-price") -> PriceTable:
        """This table with the user's prices (``InputError`` naming ``flag`` for an unknown GPU
        or a price that is not a positive number)."""
        out = dict(self.prices)
        for gpu, usd in overrides.items():
            try:
                name = self.name(gpu)
            except InputError:
                known = ", ".join(sorted(self.catalog.gpus))
                raise InputError(f"{flag}: unknown GPU {gpu!r} (known: {known})") from None
            out[name] = GpuPrice(gpu=name, usd_per_gpu_hour=_positive(usd, gpu, flag), source=GIVEN)
        return PriceTable(out, self.catalog)

    def rows(self) -> list[GpuPrice]:
        return [self.prices[k] for k in sorted(self.prices)]


def _positive(value: Any, gpu: str, flag: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{flag}: {gpu}={value!r} is not a number of $ per GPU-hour") from None
    if isinstance(value, bool) or not math.isfinite(x) or x <= 0:
        raise InputError(f"{flag}: {gpu}={value!r}: a price must be a positive number of $ per GPU-hour")
    return x


def parse_price_overrides(text: str | None, flag: str = "--gpu-price") -> dict[str, float]:
    """``h100=2.5,l40s=0.9`` as ``{gpu: price}`` (``InputError`` naming ``flag``)."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        gpu, sep, usd = item.partition("=")
        if not sep or not gpu.strip():
            raise InputError(f"{flag}: {item.strip()!r}: use GPU=PRICE pairs, e.g. {flag} h100=2.5,l40s=0.9")
        out[gpu.strip()] = _positive(usd.strip(), gpu.strip(), flag)
    return out


def read_price_file(path: str | Path, flag: str = "--gpu-prices") -> dict[str, float]:
    """A prices file as ``{gpu: price}``: ``gpu: price`` lines, or the shipped file's shape
    (``prices: {gpu: {usd_per_gpu_hour: ...}}``)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise InputError(f"{flag} {path}: cannot read the prices: {e}") from None
    if isinstance(data, dict) and isinstance(data.get("prices"), dict):
        data = data["prices"]
    if not isinstance(data, dict) or not data:
        raise InputError(f"{flag} {path}: expected a mapping of GPU: $ per GPU-hour, e.g. 'h100: 2.5'")
    out: dict[str, float] = {}
    for gpu, v in data.items():
        usd = v.get("usd_per_gpu_hour") if isinstance(v, dict) else v
        out[str(gpu)] = _positive(usd, str(gpu), flag)
    return out


@lru_cache(maxsize=1)
def _shipped() -> dict[str, GpuPrice]:
    data = shipped_yaml("gpu_prices.yaml")
    as_of = str(data.get("as_of", ""))
    out = {}
    for gpu, row in data["prices"].items():
        out[gpu] = GpuPrice(
            gpu=gpu, as_of=str(row.get("as_of", as_of)), **{k: v for k, v in row.items() if k != "as_of"}
        )
    return out


def load_prices(
    overrides: dict[str, float] | None = None,
    *,
    file: str | Path | None = None,
    catalog: Catalog | None = None,
) -> PriceTable:
    """The shipped list prices, then a prices ``file``'s, then ``overrides`` (the flag's) on top."""
    table = PriceTable(_shipped(), catalog)
    if file is not None:
        table = table.with_overrides(read_price_file(file), "--gpu-prices")
    return table.with_overrides(overrides or {})


__all__ = [
    "GIVEN",
    "GpuPrice",
    "PriceTable",
    "load_prices",
    "parse_price_overrides",
    "read_price_file",
]
