"""Checks made when a job is submitted (422 naming each field), so a job never fails later on
input the server could have refused at the door: a tune space, the advisor's availability, the
trial budget. ``defaulted`` fills in the GPU's ``vllm serve`` defaults before the job is stored."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from servesim.errors import InternalError
from servesim.web.defaults import apply_defaults
from servesim.web.problems import Problem
from servesim.web.schemas import AdviseBody, TuneBody

B = TypeVar("B", bound=BaseModel)


def defaulted(body: B, gpu: str) -> B:
    """``body`` with the GPU's engine defaults where it set none (422 if the result is invalid,
    e.g. a max_num_batched_tokens below the GPU's default max_num_seqs)."""
    try:
        out = apply_defaults(body, gpu)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(["body", "engine", *(str(x) for x in e["loc"])]), "reason": e["msg"]}
            for e in exc.errors()
        ]
        raise Problem(422, "; ".join(f"{e['field']}: {e['reason']}" for e in errors), errors=errors) from None
    if not isinstance(out, type(body)):
        raise InternalError(f"invariant broken: apply_defaults returned a {type(out).__name__}")
    return out


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
        except (ValueError, TypeError, KeyError) as exc:
            errors.append({"field": f"body.space.{name}", "reason": _reason(exc)})
    if not errors:
        try:
            space_from_mapping(space)
        except (ValueError, TypeError, KeyError) as exc:
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

    if body.advisor == "claude" and not ClaudeAdvisor.available():
        reason = "this server has no ANTHROPIC_API_KEY: choose 'rules' or 'auto'"
        raise Problem(422, f"body.advisor: {reason}", errors=[{"field": "body.advisor", "reason": reason}])
