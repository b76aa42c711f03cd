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
    pipeline_parallel_size        1                           (vLLM's pipeline stages; not searched)
    replicas                      1..4
    queue_timeout_s               none, 10, 60
    kv_offloading_size            none                        (GiB of host memory; not searched)
    num_speculative_tokens        0                           (speculative decoding's k; 0 = off)
    max_num_queued_reqs           none                        (vLLM 0.33's 503 limits; not searched)
    max_num_queued_tokens         none

A knob the hardware context does not model (TP and memory share with ``FixedHardware``) is fixed
at the context's value. On the command line: ``--space max_num_seqs=64,128,256``,
``--space replicas=1..8``, ``--space gpu_memory_utilization=0.85..0.95:0.01`` (step),
``--space max_num_batched_tokens=512..16384:log``, ``--space tensor_parallel_size=1`` (fixed),
``--space queue_timeout_s=none,30``, ``--space kv_offloading_size=none,16,64`` (vLLM's CPU KV tier,
``--kv-offloading-size`` GiB summed over the TP ranks; none = no tier). The offload size is off
by default, so a default space is the space it was before the knob existed (same trials, same
fingerprint); with it, a trial's host memory is bounded by ``perf.offload.host_memory_gib``
and priced in the plan at ``perf.offload.HOST_MEMORY_USD_PER_GIB_HOUR``.
``--space num_speculative_tokens=0,1,2,3,4`` searches speculative decoding's k (0 = off) with the
method and acceptance of ``--speculative-config`` (or of ``--config``); off by default, with the
same fingerprint as before the knob.
``--space max_num_queued_reqs=none,64,256`` and ``--space max_num_queued_tokens=none,8192..65536:log``
search vLLM 0.33's admission limits (its API server answers 503 past them): a trial may reject
requests only within ``--max-rejection-rate`` (a rejected request is never good), so the search
trades rejections for TTFT inside the user's budget and nowhere else. Off by default, with the
fingerprint and trial parameters of a space without them.
``--space pipeline_parallel_size=1,2,4`` searches vLLM's pipeline stages (``perf.pipeline``): a
replica is TP x PP GPUs (the GPU budget counts both), and a trial with stages schedules
asynchronously, as vLLM runs them. Off by default (1), with the fingerprint and trial parameters
of a space without the knob; a deployment's own ``--pipeline-parallel-size`` is a point of the
search, as its TP is.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from typing import Any

import optuna
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from servesim.errors import InputError, InternalError, describe, shown, user_errors
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
    "pipeline_parallel_size": "int",
    "replicas": "int",
    "queue_timeout_s": "optional_float",
    "kv_offloading_size": "optional_float",
    "num_speculative_tokens": "int",
    "max_num_queued_reqs": "optional_int",
    "max_num_queued_tokens": "optional_int",
}
#: Knobs a study keeps at the deployment's value when the space leaves them off (the 503 limits
#: a user set are a policy, not a starting point): searched only when ``--space`` names them.
KEPT_WHEN_NOT_SEARCHED = ("max_num_queued_reqs", "max_num_queued_tokens")
#: How an error names a kind ("optional" ones also take none: the setting off).
_KIND_WORDS = {"optional_int": "whole number or none", "optional_float": "number or none"}
#: The integer kinds (an optional one also takes ``none``: the setting off).
_INTS = ("int", "optional_int")


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
        numbers = [self.low, self.high, self.step, *(self.choices or ())]
        for v in numbers:
            if isinstance(v, float) and not math.isfinite(v):
                raise InputError(f"{v!r} is not a finite number")
        ranged = self.low is not None or self.high is not None
        if (self.choices is None) == (not ranged):
            raise InputError("a knob is either choices or a low..high range")
        if self.choices is not None and not self.choices:
            raise InputError("choices must not be empty")
        if ranged:
            if self.low is None or self.high is None or self.low > self.high:
                raise InputError(f"bad range {self.low}..{self.high}")
            if self.log and (self.step is not None or self.low <= 0):
                raise InputError("a log range needs low > 0 and no step")
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


#: Knobs whose 'off' value is left out of a deployment's parameters (so that a study that does not
#: search them records the parameters it did before they existed), with that value; a space that
#: leaves them off keeps the fingerprint and description it had before them, likewise.
OFF_WHEN_ABSENT: dict[str, Value] = {
    "num_speculative_tokens": 0,
    "pipeline_parallel_size": 1,
    "max_num_queued_reqs": None,
    "max_num_queued_tokens": None,
}


def knob_value(values: dict[str, Any], name: str) -> Any:
    """``values[name]``, or the knob's 'off' value when it is left out (``OFF_WHEN_ABSENT``)."""
    return values.get(name, OFF_WHEN_ABSENT.get(name))


def present_knobs(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without the knobs at their 'off' value (``OFF_WHEN_ABSENT``)."""
    return {k: v for k, v in values.items() if k not in OFF_WHEN_ABSENT or v != OFF_WHEN_ABSENT[k]}


def _whole(v: float | None) -> str:
    return "1" if v is None else f"{max(1, math.floor(v)):d}"


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
    pipeline_parallel_size: Knob = Field(default_factory=lambda: _c(1))
    replicas: Knob = Field(default_factory=lambda: Knob(low=1, high=4))
    queue_timeout_s: Knob = Field(default_factory=lambda: _c(None, 10.0, 60.0))
    kv_offloading_size: Knob = Field(default_factory=lambda: _c(None))
    num_speculative_tokens: Knob = Field(default_factory=lambda: _c(0))
    max_num_queued_reqs: Knob = Field(default_factory=lambda: _c(None))
    max_num_queued_tokens: Knob = Field(default_factory=lambda: _c(None))

    @model_validator(mode="after")
    def _types(self) -> SearchSpace:
        for name, kind in KNOBS.items():
            knob: Knob = getattr(self, name)
            if knob.choices is not None:
                for v in knob.choices:
                    _check_type(name, kind, v)
            elif kind == "bool":
                raise InputError(f"{name} takes choices, not a range")
            elif kind in _INTS:
                ends = {"low": knob.low, "high": knob.high, "step": knob.step}
                for what, v in ends.items():
                    if v is not None and not float(v).is_integer():
                        raise InputError(
                            f"{name} takes whole numbers: its range's {what} {v:g} is not one "
                            f"(e.g. {name}={_whole(knob.low)}..{_whole(knob.high)}:1)"
                        )
        problems = [p for name in KNOBS for p in knob_problems(name, getattr(self, name))]
        if problems:
            raise InputError("; ".join(problems))
        return self

    def with_overrides(self, overrides: dict[str, Knob]) -> SearchSpace:
        unknown = set(overrides) - set(KNOBS)
        if unknown:
            raise InputError(f"unknown knob(s) {sorted(unknown)}; known: {', '.join(KNOBS)}")
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

    def suggest(
        self, trial: optuna.Trial, *, max_model_len: int | None = None, max_gpus: int | None = None
    ) -> dict[str, Any]:
        """Sample one deployment's knobs, never an impossible combination.

        Define-by-run, in dependency order: chunked prefill first, then a token budget of at least
        ``max_model_len`` when it is off, ``max_num_seqs`` no larger than the budget, the
        long-prefill threshold only with chunking on, and replicas within ``max_gpus / TP``. A knob
        whose choices a constraint narrows is sampled under its own name (``name:choices``): Optuna
        does not allow one name two value sets."""
        return self._draw(_OptunaPick(trial), max_model_len, max_gpus)

    def encode(
        self, values: dict[str, Any], *, max_model_len: int | None = None, max_gpus: int | None = None
    ) -> dict[str, Any]:
        """Optuna's parameter names and values for a deployment's knobs (``study.enqueue_trial``):
        the names ``suggest`` would sample them under. ``ValueError`` when the values are outside
        the space or break a constraint."""
        pick = _FixedPick(values)
        self._draw(pick, max_model_len, max_gpus)
        return pick.named

    def _draw(self, pick: _Pick, max_model_len: int | None, max_gpus: int | None) -> dict[str, Any]:
        sp = self.constrained(max_model_len, max_gpus)
        p: dict[str, Any] = {}

        def draw(name: str, knob: Knob, narrowed: Knob | None = None) -> None:
            k = knob if narrowed is None else narrowed
            p[name] = pick(_param_name(name, k, k is not knob), KNOBS[name], k)

        draw("enable_chunked_prefill", sp.enable_chunked_prefill)
        mbt = sp.max_num_batched_tokens
        if not p["enable_chunked_prefill"] and max_model_len is not None:
            draw("max_num_batched_tokens", mbt, _narrow(mbt, low=max_model_len))
        else:
            draw("max_num_batched_tokens", mbt)
        draw("max_num_seqs", sp.max_num_seqs, _narrow(sp.max_num_seqs, high=p["max_num_batched_tokens"]))
        if p["enable_chunked_prefill"]:
            draw("long_prefill_token_threshold", sp.long_prefill_token_threshold)
        else:
            p["long_prefill_token_threshold"] = 0
        for name in ("enable_prefix_caching", "block_size", "gpu_memory_utilization", "tensor_parallel_size"):
            draw(name, getattr(sp, name))
        stages = sp.pipeline_parallel_size
        if max_gpus is not None:  # the stages that leave the TP drawn at least the fewest replicas
            cap = max_gpus // (int(p["tensor_parallel_size"]) * max(1, int(_low(sp.replicas))))
            draw("pipeline_parallel_size", stages, _narrow(stages, high=cap))
        else:
            draw("pipeline_parallel_size", stages)
        per_replica = int(p["tensor_parallel_size"]) * int(p["pipeline_parallel_size"])
        if max_gpus is not None:
            draw("replicas", sp.replicas, _narrow(sp.replicas, high=max_gpus // per_replica))
        else:
            draw("replicas", sp.replicas)
        draw("queue_timeout_s", sp.queue_timeout_s)
        draw("kv_offloading_size", sp.kv_offloading_size)
        draw("num_speculative_tokens", sp.num_speculative_tokens)
        draw("max_num_queued_reqs", sp.max_num_queued_reqs)
        draw("max_num_queued_tokens", sp.max_num_queued_tokens)
        # k = 0 (off) is left out of the parameters, so that a study without speculation records
        # the parameters it did before the knob existed (a missing k is the deployment's 0).
        return present_knobs({name: p[name] for name in KNOBS})

    def grid(self, max_model_len: int | None = None, max_gpus: int | None = None) -> list[dict[str, Any]]:
        """Every valid deployment of a discrete space, in a fixed order (``ValueError`` when a
        range is continuous). Enumerated by replaying ``suggest``'s draws, so it holds exactly
        the combinations ``suggest`` can return."""
        out: list[dict[str, Any]] = []
        path: list[int] = []
        while True:
            pick = _EnumPick(path)
            out.append(self._draw(pick, max_model_len, max_gpus))
            sizes = pick.sizes
            i = len(sizes) - 1
            while i >= 0 and pick.path[i] + 1 >= sizes[i]:
                i -= 1
            if i < 0:
                return out
            path = [*pick.path[:i], pick.path[i] + 1]

    def constrained(self, max_model_len: int | None = None, max_gpus: int | None = None) -> SearchSpace:
        """This space without the values no valid combination can use: chunked prefill off when no
        budget reaches ``max_model_len``, budgets below the smallest ``max_num_seqs``, TP degrees
        whose smallest replica count exceeds ``max_gpus``. ``ValueError`` when nothing is left."""
        upd: dict[str, Knob] = {}
        seqs_low = _low(self.max_num_seqs)
        mbt = _narrow(self.max_num_batched_tokens, low=seqs_low)
        upd["max_num_batched_tokens"] = mbt
        if max_model_len is not None and _high(mbt) < max_model_len:
            upd["enable_chunked_prefill"] = _narrow_bool(self.enable_chunked_prefill, True)
        if max_gpus is not None:
            stages = max(1, int(_low(self.pipeline_parallel_size)))
            upd["tensor_parallel_size"] = _narrow(
                self.tensor_parallel_size, high=max_gpus // (max(1, int(_low(self.replicas))) * stages)
            )
        return self.with_overrides(upd)

    def size(self, max_model_len: int | None = None, max_gpus: int | None = None) -> int | None:
        """How many distinct valid deployments the space holds (None: a continuous range)."""
        try:
            sp = self.constrained(max_model_len, max_gpus)
        except ValueError:
            return 0
        vals = {n: _values(getattr(sp, n), KNOBS[n]) for n in KNOBS}
        if any(v is None for v in vals.values()):
            return None
        v: dict[str, list[Value]] = {n: x or [] for n, x in vals.items()}
        flags = 0
        for chunked in v["enable_chunked_prefill"]:
            for mbt in v["max_num_batched_tokens"]:
                if not chunked and max_model_len is not None and _num(mbt) < max_model_len:
                    continue
                seqs = [x for x in v["max_num_seqs"] if _num(x) <= _num(mbt)]
                flags += len(seqs) * (len(v["long_prefill_token_threshold"]) if chunked else 1)
        gpus = sum(
            1
            for tp in v["tensor_parallel_size"]
            for pp in v["pipeline_parallel_size"]
            for r in v["replicas"]
            if max_gpus is None or _num(r) * _num(tp) * _num(pp) <= max_gpus
        )
        total = flags * gpus
        for n in (
            "enable_prefix_caching",
            "block_size",
            "gpu_memory_utilization",
            "queue_timeout_s",
            "kv_offloading_size",
            "num_speculative_tokens",
            "max_num_queued_reqs",
            "max_num_queued_tokens",
        ):
            total *= len(v[n])
        return total

    def including(self, values: dict[str, Any]) -> SearchSpace:
        """This space widened to hold ``values`` (a deployment's knobs): the user's current
        configuration is always a point of the search (a 503 limit the space leaves off is fixed
        at the deployment's value: ``KEPT_WHEN_NOT_SEARCHED``)."""
        upd: dict[str, Knob] = {}
        for name in KNOBS:
            if name not in values and name not in OFF_WHEN_ABSENT:
                continue
            v = knob_value(values, name)
            knob: Knob = getattr(self, name)
            if name in KEPT_WHEN_NOT_SEARCHED and knob == _c(None) and v is not None:
                upd[name] = _c(v)  # the deployment's own limit, in every trial
                continue
            if knob.choices is not None:
                if v not in knob.choices:
                    upd[name] = Knob(choices=[*knob.choices, v])
            elif v is not None:
                if not (knob.low is not None and knob.high is not None):
                    raise InternalError("invariant broken: knob.low is not None and knob.high is not None")
                low, high = min(knob.low, float(v)), max(knob.high, float(v))
                on_grid = (
                    knob.step is None
                    or abs((float(v) - knob.low) / knob.step - round((float(v) - knob.low) / knob.step))
                    < 1e-8
                )
                if (low, high) != (knob.low, knob.high) or not on_grid:
                    if on_grid:
                        upd[name] = knob.model_copy(update={"low": low, "high": high})
                    else:  # off the step grid: the range becomes its grid points plus the value
                        pts = sorted({*(_values(knob) or []), v})
                        upd[name] = Knob(choices=pts)
        return self.with_overrides(upd) if upd else self

    def knobs_off(self) -> list[str]:
        """The knobs added after the first studies (``OFF_WHEN_ABSENT``) that this space leaves
        at their 'off' value: left out of its fingerprint, its description and a study's name, so
        a study that does not search them is the study it was before they existed."""
        return [name for name, off in OFF_WHEN_ABSENT.items() if getattr(self, name) == _c(off)]

    def fingerprint(self) -> str:
        data = self.model_dump(mode="json")
        if self.kv_offloading_size == _c(None):  # off: the fingerprint of the space before the knob
            del data["kv_offloading_size"]
        for name in self.knobs_off():  # likewise
            del data[name]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def describe(self) -> dict[str, str]:
        out = {name: getattr(self, name).describe() for name in KNOBS}
        for name in self.knobs_off():  # off: described as before the knob existed
            del out[name]
        return out


@functools.cache
def _field_model(name: str) -> type[BaseModel]:
    """A one-field model holding ``Deployment``'s own field ``name`` (its type, bounds and
    validators): the bounds a knob's values are checked against, never restated here."""
    from servesim.tuning.deployment import Deployment

    info = Deployment.model_fields[name]
    model: type[BaseModel] = create_model(f"_{name}", **{name: (info.annotation, info)})  # type: ignore[call-overload]
    return model


def knob_problems(name: str, knob: Knob) -> list[str]:
    """Each value of ``knob`` (every choice; a range's two ends) that the deployment field
    ``name`` refuses, as ``name=value: reason`` (empty when all are allowed): checked when the
    space is built, so no trial is pruned for a value the space should never have held."""
    values = knob.choices if knob.choices is not None else [knob.low, knob.high]
    model = _field_model(name)
    out = []
    for v in dict.fromkeys(values):
        try:
            model.model_validate({name: v})
        except ValidationError as exc:
            reason = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
            shown_v = "none" if v is None else f"{v:g}" if isinstance(v, float) else str(v).lower()
            out.append(f"{name}={shown_v}: {reason[:1].lower()}{reason[1:]}")
    return out


def _check_type(name: str, kind: str, v: Value) -> None:
    ok = {
        "int": isinstance(v, int) and not isinstance(v, bool),
        "bool": isinstance(v, bool),
        "float": isinstance(v, int | float) and not isinstance(v, bool),
        "optional_float": v is None or (isinstance(v, int | float) and not isinstance(v, bool)),
        "optional_int": v is None or (isinstance(v, int) and not isinstance(v, bool)),
    }[kind]
    if not ok:
        raise InputError(f"{name}: {shown(v)} is not a valid {_KIND_WORDS.get(kind, kind)} value")


class _Pick:
    """Draws one knob's value (from Optuna, or from given values)."""

    def __call__(self, name: str, kind: str, knob: Knob) -> Any:
        raise NotImplementedError


def _param_name(name: str, knob: Knob, narrowed: bool) -> str:
    return f"{name}:{knob.describe()}" if narrowed else name


class _OptunaPick(_Pick):
    def __init__(self, trial: optuna.Trial) -> None:
        self.trial = trial

    def __call__(self, name: str, kind: str, knob: Knob) -> Any:
        return _sample(self.trial, name, kind, knob)


class _FixedPick(_Pick):
    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.named: dict[str, Any] = {}

    def __call__(self, name: str, kind: str, knob: Knob) -> Any:
        base = name.split(":")[0]
        v = self.values[base] if base not in OFF_WHEN_ABSENT else knob_value(self.values, base)
        if knob.choices is not None:
            if v not in knob.choices:
                raise InputError(f"{base}={shown(v)} is not among the allowed values {knob.describe()}")
        elif v is None or not (knob.low is not None and knob.high is not None and knob.low <= v <= knob.high):
            raise InputError(f"{base}={shown(v)} is outside {knob.describe()}")
        if not knob.is_fixed:
            self.named[name] = v
        return v


class _EnumPick(_Pick):
    """Takes the ``path[i]``-th value at the ``i``-th non-fixed draw (0 past the path's end)."""

    def __init__(self, path: list[int]) -> None:
        self.path = list(path)
        self.sizes: list[int] = []

    def __call__(self, name: str, kind: str, knob: Knob) -> Any:
        if knob.is_fixed:
            v = knob.first
            return int(v) if kind in _INTS and v is not None else v
        values = _values(knob, kind)
        if values is None:
            raise InputError(f"{name.split(':')[0]} is a continuous range: the space has no grid")
        i = len(self.sizes)
        if i >= len(self.path):
            self.path.append(0)
        self.sizes.append(len(values))
        v = values[self.path[i]]
        return int(v) if kind in _INTS and v is not None else v


def _values(knob: Knob, kind: str = "float") -> list[Value] | None:
    """Every value of a knob (None: a continuous range); an int range steps by 1 by default."""
    if knob.choices is not None:
        return list(knob.choices)
    if not (knob.low is not None and knob.high is not None):
        raise InternalError("invariant broken: knob.low is not None and knob.high is not None")
    if knob.low == knob.high:
        return [int(knob.low) if kind in _INTS else knob.low]
    if kind in _INTS:
        if knob.log:
            return None  # Optuna's log-int draws: not enumerated here
        return list(range(int(knob.low), int(knob.high) + 1, int(knob.step or 1)))
    if knob.step is None:
        return None
    n = round((knob.high - knob.low) / knob.step + 1e-9)
    return [round(knob.low + i * knob.step, 6) for i in range(n + 1)]


def _num(v: Value) -> float:
    return 0.0 if v is None else float(v)


def _count(knob: Knob, kind: str = "float") -> int | None:
    v = _values(knob, kind)
    return None if v is None else len(v)


def _low(knob: Knob) -> float:
    if knob.choices is not None:
        nums = [float(c) for c in knob.choices if c is not None]
        return min(nums) if nums else 0.0
    if knob.low is None:
        raise InternalError("invariant broken: knob.low is None")
    return knob.low


def _high(knob: Knob) -> float:
    if knob.choices is not None:
        nums = [float(c) for c in knob.choices if c is not None]
        return max(nums) if nums else 0.0
    if knob.high is None:
        raise InternalError("invariant broken: knob.high is None")
    return knob.high


def _narrow(knob: Knob, *, low: float | None = None, high: float | None = None) -> Knob:
    """``knob`` restricted to ``low <= v <= high`` (the knob itself when nothing is cut)."""
    lo = -float("inf") if low is None else low
    hi = float("inf") if high is None else high
    if knob.choices is not None:
        kept = [c for c in knob.choices if c is not None and lo <= float(c) <= hi]
        if not kept:
            raise InputError(f"no value of {knob.describe()} lies in [{lo:g}, {hi:g}]")
        return knob if len(kept) == len(knob.choices) else Knob(choices=kept)
    if not (knob.low is not None and knob.high is not None):
        raise InternalError("invariant broken: knob.low is not None and knob.high is not None")
    new_low, new_high = max(knob.low, lo), min(knob.high, hi)
    if new_low > new_high:
        raise InputError(f"no value of {knob.describe()} lies in [{lo:g}, {hi:g}]")
    if (new_low, new_high) == (knob.low, knob.high):
        return knob
    if knob.step is not None:  # stay on the grid
        k = math.ceil((new_low - knob.low) / knob.step - 1e-9)
        new_low = knob.low + k * knob.step
    return knob.model_copy(update={"low": new_low, "high": new_high})


def _narrow_bool(knob: Knob, value: bool) -> Knob:
    if knob.choices is None or value not in knob.choices:
        raise InputError(f"{value} is not a choice of {knob.describe()}")
    return Knob(choices=[value])


def _sample(trial: optuna.Trial, name: str, kind: str, knob: Knob) -> Any:
    if knob.is_fixed:
        value = knob.first
        return int(value) if kind in _INTS and value is not None else value
    if knob.choices is not None:
        return trial.suggest_categorical(name, knob.choices)
    if not (knob.low is not None and knob.high is not None):
        raise InternalError("invariant broken: knob.low is not None and knob.high is not None")
    if kind in _INTS:
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
        raise InputError(f"{name}: {shown(text)} is not true/false")
    if kind in ("optional_float", "optional_int") and t in ("none", "null", "off"):
        return None
    try:
        value = int(t) if kind in _INTS else float(t)
    except ValueError:
        raise InputError(f"{name}: {shown(text)} is not a valid {_KIND_WORDS.get(kind, kind)}") from None
    if not math.isfinite(value):
        raise InputError(f"{name}: {shown(text)} is not a finite number")
    return value


def parse_knob(text: str) -> tuple[str, Knob]:
    """``name=a,b,c`` (choices), ``name=lo..hi[:step|:log]`` (range) or ``name=v`` (fixed)."""
    name, sep, spec = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not spec.strip():
        raise InputError(f"--space {shown(text)}: expected name=choices or name=low..high")
    if name not in KNOBS:
        raise InputError(f"--space {shown(text)}: unknown knob {shown(name)}; known: {', '.join(KNOBS)}")
    kind = KNOBS[name]
    if ".." in spec:
        if kind == "bool":
            raise InputError(f"--space {shown(text)}: {name} takes a list of choices, not a range")
        rng, _, extra = spec.partition(":")
        lo, _, hi = rng.partition("..")
        numeric = {"optional_float": "float", "optional_int": "int"}.get(kind, kind)
        low, high = _parse_value(name, numeric, lo), _parse_value(name, numeric, hi)
        if not (isinstance(low, int | float) and isinstance(high, int | float)):
            raise InternalError(
                "invariant broken: isinstance(low, int | float) and isinstance(high, int | float)"
            )
        if extra.strip().lower() == "log":
            return name, Knob(low=low, high=high, log=True)
        step = float(_parse_value(name, "float", extra)) if extra.strip() else None  # type: ignore[arg-type]
        return name, Knob(low=low, high=high, step=step)
    return name, Knob(choices=[_parse_value(name, kind, v) for v in spec.split(",")])


def space_from_mapping(data: Any) -> SearchSpace:
    """A space from a YAML/JSON mapping: ``knob: [choices]``, ``knob: value`` (fixed) or
    ``knob: {low: .., high: .., step: .., log: ..}``; unnamed knobs keep their defaults."""
    if not isinstance(data, dict):
        raise InputError(f"a search space is a mapping of knob names, got {type(data).__name__}")
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
    """The default (or ``base``) space with ``--space`` overrides applied, each checked as it
    is read: an error names the ``--space`` item and every value its field refuses."""
    space = base or SearchSpace()
    for text in items:
        try:
            name, knob = parse_knob(text)
            space = space.with_overrides({name: knob})
        except user_errors() as exc:
            reason = describe(exc)
            if reason.startswith("--space "):
                raise
            raise InputError(f"--space {shown(text)}: {reason}") from None
    return space
