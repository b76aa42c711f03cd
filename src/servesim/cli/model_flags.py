"""Options spelled from a request model's fields: one declaration of a command's many settings.

Why: a command with a score of settings (``servesim generate``'s overrides) declared each as a
Typer option and passed each on by hand, twice; a request model already names them, types them
and says what each means. ``model_flags(Model, "name")`` gives the command one ``--kebab-case``
option per field (its description as help, ``None``: not given) and hands it one validated
``Model`` as the keyword argument ``name``: a bad value is the model's one-line error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, get_args

import typer
from pydantic import BaseModel

from servesim.cli.engine_flags import with_options

F = TypeVar("F", bound=Callable[..., Any])


def _options(
    model: type[BaseModel], aliases: Mapping[str, tuple[str, ...]], switches: Iterable[str]
) -> dict[str, tuple[Any, Any]]:
    out: dict[str, tuple[Any, Any]] = {}
    flags = set(switches)
    for name, field in model.model_fields.items():
        decl = (f"--{name.replace('_', '-')}", *aliases.get(name, ()))
        text = field.description or name
        if name in flags:  # an on-switch: ``--no-rescale``, not ``--no-rescale/--no-no-rescale``
            out[name] = (bool, typer.Option(False, *decl, help=text))
            continue
        annotation: Any = field.annotation
        if type(None) not in get_args(annotation):
            annotation = annotation | None
        out[name] = (annotation, typer.Option(None, *decl, help=text))
    return out


def model_flags(
    model: type[BaseModel],
    name: str,
    *,
    aliases: Mapping[str, tuple[str, ...]] | None = None,
    switches: Iterable[str] = (),
) -> Callable[[F], F]:
    """Give ``func`` (which takes ``name: model``) an option per field of ``model``; ``aliases``:
    extra spellings (``-n``); ``switches``: boolean fields that are a flag with no negation."""
    options = _options(model, aliases or {}, switches)

    def collect(values: dict[str, Any]) -> BaseModel:
        return model.model_validate({k: v for k, v in values.items() if v is not None})

    def decorate(func: F) -> F:
        return with_options(func, options, name, collect, after="")

    return decorate


__all__ = ["model_flags"]
