"""The cheapest deployment across GPU types: ``TuneRequest`` with ``gpu_types`` -> ``GpuTypesAnswer``.

The GPU type is a categorical dimension searched by type: each type gets the request's own study
(``services.tune``: the vLLM flags, TP and replicas, so the GPU count too, with vllm serve's
defaults *for that GPU* as the baseline the fewest-changes rule counts from, at the fewest GPUs
per replica that hold the model when TP 1 does not and no ``--tp`` is given), its step-time model
and KV sizing built for that GPU (``tuning.hardware.PerfHardware``), and its recommendation
re-verified on fresh seeds and priced at that GPU's $/GPU-hour (``perf.prices``: the shipped list
price, or the user's). Before any trial, the memory fit: the model's weights and a
``max_model_len`` sequence of KV must fit one replica at some TP of the space (at the space's
highest memory share); a type that fits at none is infeasible with vLLM's reason, and no trial
runs on it.

**The rule: the cheapest that meets the SLO.** Each recommendation serves the target rate (with
replicas added when no setting meets the SLO), so the answer is the type whose verified
recommendation meets the SLO at the lowest $/hour (ties: the lower $ per 1M output tokens, then
the name); without an SLO, the lowest $ per 1M output tokens. None meets it: no type is chosen,
and every row says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import InputError, describe
from servesim.services.inputs import Progress

if TYPE_CHECKING:
    from servesim.services.tune import TuneAnswer, TuneRequest
    from servesim.tuning import Hardware
    from servesim.tuning.space import SearchSpace

RULE = (
    "the cheapest that meets the SLO: each GPU type's recommendation, re-verified at the target rate, "
    "priced at its $/GPU-hour; the lowest $/hour among those meeting the SLO (ties: $ per 1M output tokens)"
)
RULE_NO_SLO = "no SLO: the lowest $ per 1M output tokens at the predicted throughput"


class GpuTypeRow(BaseModel):
    """One GPU type's answer: infeasible (with the reason), or its recommendation's size and cost."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(description="Catalog GPU name.")
    usd_per_gpu_hour: float
    price_source: str = Field(description="'given', or the list price's source and month.")
    feasible: bool = Field(description="The model fits and a trial could run (False: see reason).")
    reason: str | None = Field(None, description="Why the type is infeasible, or why it was not chosen.")
    study: str | None = None
    meets_slo: bool | None = None
    replicas: int | None = None
    tensor_parallel_size: int | None = None
    gpus: int | None = None
    output_tokens_per_s: float | None = None
    usd_per_hour: float | None = None
    usd_per_1m_output_tokens: float | None = None
    gpu_hours_per_day: float | None = None


class GpuTypesAnswer(BaseModel):
    """Every GPU type searched, the rule, and the cheapest (None: no type meets the SLO)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: str
    objective: Literal["cheapest_meeting_slo", "lowest_usd_per_1m_output_tokens"]
    target_rate_rps: float | None
    rows: list[GpuTypeRow]
    cheapest: str | None = Field(description="The chosen GPU type (None: none meets the SLO).")


@dataclass(frozen=True)
class GpuTypesResult:
    """The comparison and each feasible type's full tune answer (the chosen one's is the card)."""

    answer: GpuTypesAnswer
    answers: dict[str, TuneAnswer]

    @property
    def chosen(self) -> TuneAnswer | None:
        c = self.answer.cheapest
        return self.answers.get(c) if c is not None else None


def price_of(request: TuneRequest, gpu: str | None) -> tuple[float | None, str | None]:
    """The $/GPU-hour of ``gpu`` for ``request`` and where it comes from: ``gpu_hour_usd`` when
    given (plain tune only), else the price table with the request's overrides (None: no GPU, or
    a user-catalog GPU without a price)."""
    from servesim.perf.prices import GIVEN, load_prices

    if request.gpu_hour_usd is not None:
        return request.gpu_hour_usd, GIVEN
    if gpu is None:
        return None, None
    p = load_prices(request.gpu_prices).get(gpu)
    if p is None:
        return None, None
    return p.usd_per_gpu_hour, GIVEN if p.source == GIVEN else f"{p.source}, {p.as_of}"


def memory_fit(
    request: TuneRequest,
    hardware: Hardware,
    max_model_len: int,
    util: float | None = None,
    space: SearchSpace | None = None,
) -> tuple[list[int], str]:
    """The TP degrees of the space (``request.space`` unless given; within ``max_gpus``) at which
    one replica of vllm serve's defaults fits ``hardware`` (at memory share ``util``, default the
    space's highest), and, when none does, the reason at the largest TP tried."""
    from servesim.spec import engine_values
    from servesim.tuning import Deployment, resolve_deployment
    from servesim.tuning.selection import knob_choices

    space = space if space is not None else request.space
    tps = sorted(int(t) for t in knob_choices(space, "tensor_parallel_size"))
    if request.max_gpus is not None:
        tps = [t for t in tps if t <= request.max_gpus] or tps[:1]
    utils = [float(u) for u in knob_choices(space, "gpu_memory_utilization")]
    spec = request.deployment.model_copy(update={"gpu": hardware.base.gpu})
    config, _ = engine_values(spec, max_model_len)
    reason, fits = "no TP to try", []
    for tp in tps:
        d = Deployment.from_engine_config(
            config,
            max_model_len=max_model_len,
            tensor_parallel_size=tp,
            gpu_memory_utilization=util if util is not None else max(utils),
        )
        try:
            resolve_deployment(d, hardware)
        except ValueError as exc:
            reason = f"TP {tp}: {describe(exc)}"
            continue
        fits.append(tp)
    why = "" if fits else f"does not fit ({', '.join(map(str, tps))} GPU(s) per replica tried): {reason}"
    return fits, why


def _tps(tps: list[int]) -> str:
    return ", ".join(map(str, tps))


def _row(request: TuneRequest, gpu: str, answer: TuneAnswer | None, reason: str | None) -> GpuTypeRow:
    usd, source = price_of(request, gpu)
    if usd is None or source is None:
        raise InputError(f"--gpu-price: no price for GPU {gpu!r}: give one, e.g. --gpu-price {gpu}=2.5")
    rec = answer.recommendation if answer is not None else None
    if rec is None or rec.deploy is None:
        return GpuTypeRow(
            gpu=gpu, usd_per_gpu_hour=usd, price_source=source, feasible=False, reason=reason or "no answer"
        )
    p = rec.deploy
    return GpuTypeRow(
        gpu=gpu,
        usd_per_gpu_hour=usd,
        price_source=source,
        feasible=True,
        study=answer.study.study_name if answer is not None else None,
        meets_slo=rec.meets_slo,
        replicas=p.replicas,
        tensor_parallel_size=p.tensor_parallel_size,
        gpus=p.gpus,
        output_tokens_per_s=rec.predicted_output_tokens_per_s.mean,
        usd_per_hour=p.usd_per_hour,
        usd_per_1m_output_tokens=p.usd_per_1m_output_tokens,
        gpu_hours_per_day=p.gpu_hours_per_day,
    )


def _key(r: GpuTypeRow, by_hour: bool) -> tuple[float, float, str]:
    inf = float("inf")
    per_m = r.usd_per_1m_output_tokens if r.usd_per_1m_output_tokens is not None else inf
    hour = r.usd_per_hour if r.usd_per_hour is not None else inf
    return (hour, per_m, r.gpu) if by_hour else (per_m, hour, r.gpu)


def choose(rows: list[GpuTypeRow], has_slo: bool) -> str | None:
    """The rule (module docstring) over ``rows``."""
    ok = [r for r in rows if r.feasible and (r.meets_slo or not has_slo)]
    return min(ok, key=lambda r: _key(r, has_slo)).gpu if ok else None


def _explained(rows: list[GpuTypeRow], cheapest: str | None, has_slo: bool) -> list[GpuTypeRow]:
    """Each feasible row not chosen says why (missed the SLO, or costs more)."""
    best = next((r for r in rows if r.gpu == cheapest), None)
    out = []
    for r in rows:
        why = r.reason
        if r.feasible and r.gpu != cheapest:
            if has_slo and not r.meets_slo:
                why = "its recommendation misses the SLO on a fresh seed"
            elif (
                best is not None and has_slo and r.usd_per_hour is not None and best.usd_per_hour is not None
            ):
                why = f"${r.usd_per_hour:,.2f}/hour against {best.gpu}'s ${best.usd_per_hour:,.2f}/hour"
            elif best is not None and r.usd_per_1m_output_tokens is not None:
                why = (
                    f"${r.usd_per_1m_output_tokens:,.3g} per 1M output tokens against {best.gpu}'s "
                    f"${best.usd_per_1m_output_tokens or 0:,.3g}"
                )
        out.append(r.model_copy(update={"reason": why}))
    return out


def gpu_type_names(
    gpu_types: list[str], gpu_prices: dict[str, float] | None = None, flag: str = "--gpu-types"
) -> list[str]:
    """The types' catalog names, each known and priced (the list prices with ``gpu_prices`` over
    them), in order without repeats: ``InputError`` naming ``flag`` (the web passes its field)."""
    from servesim.perf.prices import load_prices

    table = load_prices(gpu_prices)
    names: list[str] = []
    for g in gpu_types:
        try:
            name = table.name(g)
        except InputError:
            known = ", ".join(sorted(table.catalog.gpus))
            raise InputError(f"{flag}: unknown GPU {g!r} (known: {known})") from None
        table.price(name)
        if name not in names:
            names.append(name)
    if not names:
        raise InputError(f"{flag}: name at least one GPU, e.g. {flag} h100,l40s")
    return names


def check_gpu_types(request: TuneRequest) -> list[str]:
    """The types' catalog names (each known and priced; ``InputError`` naming the flag), and what
    cannot go with them refused: one GPU named, one GPU's price, a fixed step time, no
    recommendation to compare."""
    if request.deployment.gpu is not None:
        raise InputError("--gpu sets one GPU, --gpu-types compares several: give one of them")
    if request.gpu_hour_usd is not None:
        raise InputError(
            "--gpu-hour-usd prices one GPU: with --gpu-types give each type's price with --gpu-price "
            "(e.g. h100=2.5,l40s=0.9) or --gpu-prices FILE"
        )
    if request.deployment.fixed_timing:
        raise InputError("--gpu-types needs the roofline step-time model: drop the fixed step time")
    if not request.recommend:
        raise InputError("--gpu-types compares verified recommendations: drop --no-recommend")
    return gpu_type_names(request.gpu_types, request.gpu_prices)


def compare_gpu_types(request: TuneRequest, *, progress: Progress | None = None) -> GpuTypesResult:
    """One study per GPU type of ``request.gpu_types`` (each checked for memory fit first), their
    recommendations priced, and the cheapest that meets the SLO."""
    from servesim.services.tune import prepare

    names = check_gpu_types(request)
    rows: list[GpuTypeRow] = []
    answers: dict[str, TuneAnswer] = {}
    for gpu in names:
        one = request.model_copy(
            update={"deployment": request.deployment.model_copy(update={"gpu": gpu}), "gpu_types": []}
        )
        try:
            prepared = prepare(one)
        except ValueError as exc:  # the model or the configuration is refused on this GPU
            rows.append(_row(request, gpu, None, describe(exc)))
            continue
        fits, misfit = memory_fit(one, prepared.hardware, prepared.max_model_len, space=prepared.space)
        if not fits:
            rows.append(_row(request, gpu, None, misfit))
            continue
        if request.deployment.tp is None:  # vllm serve's defaults at the fewest GPUs that hold them
            hw = prepared.hardware
            at = memory_fit(
                one, hw, prepared.max_model_len, hw.default_gpu_memory_utilization, space=prepared.space
            )[0]
            if at and at[0] != hw.default_tensor_parallel_size:
                one = one.model_copy(update={"deployment": one.deployment.model_copy(update={"tp": at[0]})})
                prepared = prepare(one)
        try:
            answer = prepared.run(progress=progress)
        except InputError as exc:  # every trial refused (e.g. no TP of the space fits its KV)
            rows.append(_row(request, gpu, None, f"{describe(exc)} (one replica fits at TP {_tps(fits)})"))
            continue
        answers[gpu] = answer
        rows.append(_row(request, gpu, answer, None))
    has_slo = request.slo is not None
    cheapest = choose(rows, has_slo)
    target = next((a.study.target_rate_rps for a in answers.values()), request.target_rate)
    compared = GpuTypesAnswer(
        rule=RULE if has_slo else RULE_NO_SLO,
        objective="cheapest_meeting_slo" if has_slo else "lowest_usd_per_1m_output_tokens",
        target_rate_rps=target,
        rows=_explained(rows, cheapest, has_slo),
        cheapest=cheapest,
    )
    return GpuTypesResult(compared, answers)


__all__ = [
    "GpuTypeRow",
    "GpuTypesAnswer",
    "GpuTypesResult",
    "check_gpu_types",
    "choose",
    "compare_gpu_types",
    "gpu_type_names",
    "memory_fit",
    "price_of",
]
