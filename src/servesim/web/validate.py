"""Checks made when a job is submitted (422 naming each field), so a job never fails later on
input the server could have refused at the door: a tune space, the advisor's availability, the
trial budget, the engine settings with the GPU's ``vllm serve`` defaults."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from servesim.engine import EngineConfig
from servesim.errors import ConfigError, user_errors
from servesim.perf.offload import check_offloading_size
from servesim.web.defaults import with_defaults
from servesim.web.problems import Problem
from servesim.web.schemas import AdviseBody, TuneBody


def checked_engine(body: BaseModel, gpu: str) -> EngineConfig | None:
    """The engine ``body`` will run before KV sizing (the GPU's ``vllm serve`` defaults where it
    set none), checked at the door: 422 naming the field vLLM would refuse (e.g. a
    max_num_batched_tokens below the GPU's default max_num_seqs). None: the body has no engine."""
    engine = getattr(body, "engine", None)
    if not isinstance(engine, EngineConfig):
        return None
    hw = getattr(body, "hardware", None)
    try:
        check_offloading_size(engine.kv_offloading_size, getattr(hw, "tensor_parallel_size", 1))
    except ConfigError as exc:  # the bound every interface gets from servesim.spec.resolve
        field = "body.engine.kv_offloading_size"
        raise Problem(422, str(exc), errors=[{"field": field, "reason": str(exc)}]) from None
    try:
        return with_defaults(engine, gpu)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(["body", "engine", *(str(x) for x in e["loc"])]), "reason": e["msg"]}
            for e in exc.errors()
        ]
        raise Problem(422, "; ".join(f"{e['field']}: {e['reason']}" for e in errors), errors=errors) from None


def _reason(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
    return str(exc)


def space_errors(space: dict[str, Any]) -> list[dict[str, str]]:
    """Every knob of a tune space that the tuner would refuse, each with its reason."""
    from servesim.tuning import space_from_mapping

    errors = []
    for name, spec in space.items():
        try:
            space_from_mapping({name: spec})
        except user_errors() as exc:
            errors.append({"field": f"body.space.{name}", "reason": _reason(exc)})
    if not errors:
        try:
            space_from_mapping(space)
        except user_errors() as exc:
            errors.append({"field": "body.space", "reason": _reason(exc)})
    return errors


def check_tune(body: TuneBody, max_trials: int) -> None:
    errors = []
    if body.n_trials > max_trials:
        errors.append({"field": "body.n_trials", "reason": f"this server runs at most {max_trials} per job"})
    if body.space:
        errors += space_errors(body.space)
    if errors:
        raise Problem(422, "; ".join(f"{e['field']}: {e['reason']}" for e in errors), errors=errors)


def check_advisor(body: AdviseBody) -> None:
    from servesim.advisor import ClaudeAdvisor

    if body.advisor in ("claude", "dspy") and not ClaudeAdvisor.available():
        reason = "this server has no ANTHROPIC_API_KEY: choose 'rules' or 'auto'"
        raise Problem(422, f"body.advisor: {reason}", errors=[{"field": "body.advisor", "reason": reason}])
