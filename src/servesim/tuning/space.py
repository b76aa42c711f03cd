"""The search space of ``tune``: one range per knob, each overridable.

A knob is a list of ``choices`` or a numeric range ``low..high`` (optional ``step``, ``log``).
Defaults (an 8B-class model on 80 GB GPUs; override for yours)::

    max_num_seqs                  16, 32, 64, 128, 256, 512
    max_num_batched_tokens        512, 1024, 2048, 4096, 8192, 16384
    enable_chunked_prefill        true, false
    long_prefill_token_threshold  0, 256, 512, 1024, 2048     (only with chunked prefill on)
    enable_prefix_caching         true, false
    block_size                    16, 32
    gpu_memory_utilization        0.80..0.95 step 0.05
    tensor_parallel_size          1, 2, 4
    replicas                      1..4
    queue_timeout_s               none, 10, 60

A knob the hardware context does not model (TP and memory share with ``FixedHardware``) is fixed
at the context's value. On the command line: ``--space max_num_seqs=64,128,256``,
``--space replicas=1..8``, ``--space gpu_memory_utilization=0.85..0.95:0.01`` (step),
``--space max_num_batched_tokens=512..16384:log``, ``--space tensor_parallel_size=1`` (fixed),
``--space queue_timeout_s=none,30``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import optuna
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servesim.tuning.hardware import Hardware

Value = int | float | bool | None

#: The knobs, in sampling order, with the type of their values.
KNOBS: dict[str, str] = {
    "max_num_seqs": "int",
    "max_num_batched_tokens": "int",
    "enable_chunked_prefill": "bool",
    "long_prefill_token_threshold": "int",
    "enable_prefix_caching": "bool",
    "block_size": "int",
    "gpu_memory_utilization": "float",
    "tensor_parallel_size": "int",
    "replicas": "int",
    "queue_timeout_s": "optional_float",
}


class Knob(BaseModel):
    """Either ``choices`` or ``low``..``high`` (with optional ``step`` / ``log``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    choices: list[Value] | None = None
    low: float | None = None
    high: float | None = None
    step: float | None = Field(None, gt=0)
    log: bool = False

    @model_validator(mode="after")
    def _shape(self) -> Knob:
        ranged = self.low is not None or self.high is not None
        if (self.choices is None) == (not ranged):
            raise ValueError("a knob is either choices or a low..high range")
        if self.choices is not None and not self.choices:
            raise ValueError("choices must not be empty")
        if ranged:
            if self.low is None or self.high is None or self.low > self.high:
                raise ValueError(f"bad range {self.low}..{self.high}")
            if self.log and (self.step is not None or self.low <= 0):
                raise ValueError("a log range needs low > 0 and no step")
        return self

    @property
    def is_fixed(self) -> bool:
        if self.choices is not None:
            return len(self.choices) == 1
        return self.low == self.high

    @property
    def first(self) -> Value:
        return self.choices[0] if self.choices is not None else self.low

    def describe(self) -> str:
        if self.choices is not None:
            return ", ".join("none" if c is None else str(c).lower() for c in self.choices)
        text = f"{self.low:g}..{self.high:g}"
        if self.step is not None:
            text += f" step {self.step:g}"
        return text + (" (log)" if self.log else "")


def _c(*values: Value) -> Knob:
    return Knob(choices=list(values))


class SearchSpace(BaseModel):
    """One knob per searched setting (see the module docstring for the defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: Knob = Field(default_factory=lambda: _c(16, 32, 64, 128, 256, 512))
    max_num_batched_tokens: Knob = Field(default_factory=lambda: _c(512, 1024, 2048, 4096, 8192, 16384))
    enable_chunked_prefill: Knob = Field(default_factory=lambda: _c(True, False))
    long_prefill_token_threshold: Knob = Field(default_factory=lambda: _c(0, 256, 512, 1024, 2048))
    enable_prefix_caching: Knob = Field(default_factory=lambda: _c(True, False))
    block_size: Knob = Field(default_factory=lambda: _c(16, 32))
    gpu_memory_utilization: Knob = Field(default_factory=lambda: Knob(low=0.8, high=0.95, step=0.05))
    tensor_parallel_size: Knob = Field(default_factory=lambda: _c(1, 2, 4))
    replicas: Knob = Field(default_factory=lambda: Knob(low=1, high=4))
    queue_timeout_s: Knob = Field(default_factory=lambda: _c(None, 10.0, 60.0))

    @model_validator(mode="after")
    def _types(self) -> SearchSpace:
        for name, kind in KNOBS.items():
            knob: Knob = getattr(self, name)
            if knob.choices is not None:
                for v in knob.choices:
                    _check_type(name, kind, v)
            elif kind == "bool":
                raise ValueError(f"{name} takes choices, not a range")
        return self

    def with_overrides(self, overrides: dict[str, Knob]) -> SearchSpace:
        unknown = set(overrides) - set(KNOBS)
        if unknown:
            raise ValueError(f"unknown knob(s) {sorted(unknown)}; known: {', '.join(KNOBS)}")
        return SearchSpace.model_validate(
            {**self.model_dump(), **{k: v.model_dump() for k, v in overrides.items()}}
        )

    def effective(self, hardware: Hardware) -> SearchSpace:
        """This space with the knobs the hardware cannot vary fixed at the hardware's values."""
        fixed: dict[str, Knob] = {}
        if "tensor_parallel_size" not in hardware.varies:
            fixed["tensor_parallel_size"] = _c(hardware.default_tensor_parallel_size)
        if "gpu_memory_utilization" not in hardware.varies:
            fixed["gpu_memory_utilization"] = _c(hardware.default_gpu_memory_utilization)
        return self.with_overrides(fixed) if fixed else self

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample one deployment's knobs (define-by-run: the threshold only with chunking on)."""
        params: dict[str, Any] = {}
        for name, kind in KNOBS.items():
            knob: Knob = getattr(self, name)
            if name == "long_prefill_token_threshold" and not params["enable_chunked_prefill"]:
                params[name] = 0
                continue
            params[name] = _sample(trial, name, kind, knob)
        return params

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()

    def describe(self) -> dict[str, str]:
        return {name: getattr(self, name).describe() for name in KNOBS}


def _check_type(name: str, kind: str, v: Value) -> None:
    ok = {
        "int": isinstance(v, int) and not isinstance(v, bool),
        "bool": isinstance(v, bool),
        "float": isinstance(v, int | float) and not isinstance(v, bool),
        "optional_float": v is None or (isinstance(v, int | float) and not isinstance(v, bool)),
    }[kind]
    if not ok:
        raise ValueError(f"{name}: {v!r} is not a valid {kind.replace('_', ' ')} value")


def _sample(trial: optuna.Trial, name: str, kind: str, knob: Knob) -> Any:
    if knob.is_fixed:
        value = knob.first
        return int(value) if kind == "int" and value is not None else value
    if knob.choices is not None:
        return trial.suggest_categorical(name, knob.choices)
    assert knob.low is not None and knob.high is not None
    if kind == "int":
        step = int(knob.step) if knob.step is not None else 1
        return trial.suggest_int(name, int(knob.low), int(knob.high), step=step, log=knob.log)
    value = trial.suggest_float(name, knob.low, knob.high, step=knob.step, log=knob.log)
    return round(value, 6)  # 0.8500000000000001 -> 0.85 (the stored parameter keeps Optuna's float)


def _parse_value(name: str, kind: str, text: str) -> Value:
    t = text.strip().lower()
    if kind == "bool":
        if t in ("true", "on", "yes", "1"):
            return True
        if t in ("false", "off", "no", "0"):
            return False
        raise ValueError(f"{name}: {text!r} is not true/false")
    if kind == "optional_float" and t in ("none", "null", "off"):
        return None
    try:
        return int(t) if kind == "int" else float(t)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a valid {kind.replace('_', ' ')}") from None


def parse_knob(text: str) -> tuple[str, Knob]:
    """``name=a,b,c`` (choices), ``name=lo..hi[:step|:log]`` (range) or ``name=v`` (fixed)."""
    name, sep, spec = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not spec.strip():
        raise ValueError(f"--space {text!r}: expected name=choices or name=low..high")
    if name not in KNOBS:
        raise ValueError(f"--space {text!r}: unknown knob {name!r}; known: {', '.join(KNOBS)}")
    kind = KNOBS[name]
    if ".." in spec:
        if kind == "bool":
            raise ValueError(f"--space {text!r}: {name} takes a list of choices, not a range")
        rng, _, extra = spec.partition(":")
        lo, _, hi = rng.partition("..")
        numeric = "float" if kind == "optional_float" else kind
        low, high = _parse_value(name, numeric, lo), _parse_value(name, numeric, hi)
        assert isinstance(low, int | float) and isinstance(high, int | float)
        if extra.strip().lower() == "log":
            return name, Knob(low=low, high=high, log=True)
        step = float(_parse_value(name, "float", extra)) if extra.strip() else None  # type: ignore[arg-type]
        return name, Knob(low=low, high=high, step=step)
    return name, Knob(choices=[_parse_value(name, kind, v) for v in spec.split(",")])


def space_from_mapping(data: Any) -> SearchSpace:
    """A space from a YAML/JSON mapping: ``knob: [choices]``, ``knob: value`` (fixed) or
    ``knob: {low: .., high: .., step: .., log: ..}``; unnamed knobs keep their defaults."""
    if not isinstance(data, dict):
        raise ValueError(f"a search space is a mapping of knob names, got {type(data).__name__}")
    overrides: dict[str, Knob] = {}
    for name, spec in data.items():
        key = str(name).replace("-", "_")
        if isinstance(spec, dict):
            overrides[key] = Knob.model_validate(spec)
        elif isinstance(spec, list):
            overrides[key] = Knob(choices=spec)
        else:
            overrides[key] = Knob(choices=[spec])
    return SearchSpace().with_overrides(overrides)


def parse_space(items: list[str], base: SearchSpace | None = None) -> SearchSpace:
    """The default (or ``base``) space with ``--space`` overrides applied."""
    overrides = dict(parse_knob(t) for t in items)
    return (base or SearchSpace()).with_overrides(overrides)
