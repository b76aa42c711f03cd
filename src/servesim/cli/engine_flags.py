"""The CLI's engine and deployment options, derived from the spec's fields (one declaration).

Why: every command that runs an engine takes the same ``vllm serve`` flags. Their names, types,
bounds, help and defaults are ``EngineConfig``'s and ``DeploymentSpec``'s fields (the library's one
declaration of each setting); this module only spells them as options: ``max_num_seqs`` becomes
``--max-num-seqs``, a boolean ``--x/--no-x``, a ``Literal`` a choice; values are checked by the
spec's own validation (one line naming the setting, as for a ``--config`` file's). A new engine setting is a
new ``EngineConfig`` field and nothing here.

``@engine_flags`` hands the command one ``flags`` dict of the values given (None: not given);
``@deployment_flags`` one ``DeploymentSpec`` (no engine keys yet); ``deployment_spec`` joins them
with a ``--config`` file's keys (flags win).
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import typer
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from servesim.errors import ConfigError, describe
from servesim.services.deployment import DeploymentSpec, engine_values
from servesim.services.run import EngineConfig

#: What each defaulted engine setting starts from, said in its help (the rest say their value).
DEFAULT_NOTES = {
    "max_num_seqs": "default: what vllm serve runs on the GPU (1024 on H100, 256 on smaller GPUs)",
    "max_num_batched_tokens": "default: what vllm serve runs on the GPU (8192 on H100, 2048 on smaller GPUs)",
    "num_gpu_blocks": "default: sized from GPU memory as vLLM does",
    "max_model_len": "",  # its description says it
    "queue_timeout_s": "default: none",
    "speculative_config": "default: off",
}

#: The deployment options every engine command takes (replicas and router: cluster commands).
HARDWARE_FIELDS = (
    "model",
    "gpu",
    "tp",
    "gpu_memory_utilization",
    "profile",
    "step_time_ms",
    "linear_step_time",
)
#: vLLM's data-parallel flags: the commands that run one deployment's DP ranks take them
#: (``servesim simulate``, ``servesim cluster``; ``servesim.spec.data_parallel``).
DATA_PARALLEL_FIELDS = ("data_parallel_size", "enable_expert_parallel")
#: Extra spellings (vLLM's own long name for TP).
ALIASES = {"tp": ("--tp", "--tensor-parallel-size")}


def _base(annotation: Any) -> Any:
    """``int | None`` -> ``int``."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (typing.Union, types.UnionType) and args:
        return args[0]
    return annotation


def _help(name: str, field: FieldInfo) -> str:
    text = (field.description or name).rstrip(".")
    note = DEFAULT_NOTES.get(name)
    if note is None and field.default is None and "default" in text:
        note = ""  # the description says what an unset value means ("default llama-3.1-8b")
    if note is None:
        default = field.default
        note = f"default: {default}"
        if isinstance(default, bool):
            note = f"default: {'on' if default else 'off'}"
    return f"{text}; {note}." if note else f"{text}."


def annotated(field: FieldInfo) -> Any:
    """The field's type with its constraints (``Annotated[int, Ge(1)]``), for a ``TypeAdapter``."""
    return Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation


def _checked(
    options: dict[str, tuple[Any, Any]], fields: dict[str, FieldInfo]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Check each given value against its field's bounds and type, naming the flag
    (``error: --max-num-seqs: Input should be greater than or equal to 1``), before any work."""
    adapters = {key: TypeAdapter(annotated(fields[key])) for key in options}

    def check(values: dict[str, Any]) -> dict[str, Any]:
        for key, value in values.items():
            if value is None:
                continue
            try:
                adapters[key].validate_python(value)
            except ValidationError as e:
                err = e.errors()[0]
                msg = str(err["msg"]).removeprefix("Value error, ")
                inner = ".".join(str(x) for x in err["loc"])  # a JSON flag's key: speculative_config's
                raise ConfigError(
                    f"--{key.replace('_', '-')}: {inner + ': ' if inner else ''}{msg}"
                ) from None
        return values

    return check


def option(
    name: str, field: FieldInfo, *, keep_default: bool = False, help_text: str | None = None
) -> tuple[Any, Any]:
    """``(annotation, typer.Option)`` for one spec field (``None`` = not given, unless
    ``keep_default``: then the field's default is the option's); ``help_text`` replaces the
    field's description where a command reads the value differently (its default, its source)."""
    kebab = name.replace("_", "-")
    base = _base(field.annotation)
    help_text = _help(name, field) if help_text is None else help_text
    default = field.default if keep_default else None
    if base is bool:
        if keep_default:
            # the help says "default: off" already (Click would add "[default: no-...]")
            return bool, typer.Option(
                bool(default), f"--{kebab}/--no-{kebab}", help=help_text, show_default=False
            )
        return bool | None, typer.Option(None, f"--{kebab}/--no-{kebab}", help=help_text)
    if isinstance(base, type) and issubclass(base, BaseModel):  # vLLM's JSON-valued flags
        return str | None, typer.Option(None, help=help_text)
    if get_origin(base) is Literal:  # a choice (Typer lists the values and names the flag)
        return (base if keep_default else base | None), typer.Option(
            default, help=help_text, show_default=False
        )
    names = ALIASES.get(name, ())
    return (base if keep_default else base | None), typer.Option(
        default, *names, help=help_text, show_default=False
    )


def _engine_options() -> dict[str, tuple[Any, Any]]:
    """name -> (annotation, typer.Option) of every engine setting (built per command: Typer
    keeps a reference to each option)."""
    return {name: option(name, f) for name, f in EngineConfig.model_fields.items() if name not in NOT_FLAGS}


#: Engine settings that are no ``vllm serve`` flag: the KV cache groups come from the model.
NOT_FLAGS = frozenset({"kv_cache_groups"})
FLAG_NAMES = tuple(k for k in EngineConfig.model_fields if k not in NOT_FLAGS)


def _deployment_options(
    fields: tuple[str, ...], helps: Mapping[str, str] | None = None
) -> dict[str, tuple[Any, Any]]:
    specs = DeploymentSpec.model_fields
    out = {}
    for name in fields:
        keep = name in ("linear_step_time", "replicas", "router", *DATA_PARALLEL_FIELDS)
        out[name] = option(name, specs[name], keep_default=keep, help_text=(helps or {}).get(name))
    return out


F = TypeVar("F", bound=Callable[..., Any])


def _with_options(
    func: F,
    options: dict[str, tuple[Any, Any]],
    name: str,
    collect: Callable[[dict[str, Any]], Any],
    after: str,
) -> F:
    """Add ``options`` to a Typer command (after its ``after`` parameter) and pass them collected
    into the one keyword argument ``name``."""
    sig = inspect.signature(func, eval_str=True)
    params = [p for p in sig.parameters.values() if p.name != name]
    extra = [
        inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=annotation)
        for key, (annotation, opt) in options.items()
    ]
    # Typer passes every parameter by name: all keyword-only, so the options can sit after the
    # command's argument (``--help`` lists them there).
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
    keys = tuple(options)

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        kwargs[name] = collect({key: kwargs.pop(key) for key in keys})
        return func(**kwargs)

    # inspect.signature (Typer) reads __signature__; get_type_hints follows __wrapped__ to the
    # command's module for its own (string) annotations.
    names = [p.name for p in params]
    at = names.index(after) + 1 if after in names else 1
    wrapper.__signature__ = sig.replace(parameters=params[:at] + extra + params[at:])  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


#: ``with_options(func, options, name, collect, after)``: the mechanism above, for other groups
#: of options a command takes as one value (``cli.capacity_options``, ``cli.model_flags``).
with_options = _with_options


def engine_flags(func: F) -> F:
    """Give ``func`` (which takes ``flags: dict[str, Any]``) every engine setting as an option."""
    options = _engine_options()
    return _with_options(func, options, "flags", _checked(options, EngineConfig.model_fields), "config")


def _deployment(func: F, fields: tuple[str, ...], helps: Mapping[str, str] | None = None) -> F:
    options = _deployment_options(fields, helps)
    check = _checked(options, DeploymentSpec.model_fields)
    return _with_options(
        func, options, "deployment", lambda v: DeploymentSpec.model_validate(check(v)), "config"
    )


def deployment_flags(func: F) -> F:
    """Give ``func`` (which takes ``deployment: DeploymentSpec``) the deployment options."""
    return _deployment(func, HARDWARE_FIELDS)


def data_parallel_deployment_flags(func: F) -> F:
    """``deployment_flags`` plus vLLM's ``--data-parallel-size`` and ``--enable-expert-parallel``."""
    return _deployment(func, (*HARDWARE_FIELDS, *DATA_PARALLEL_FIELDS))


def hardware_flags(*fields: str, helps: Mapping[str, str] | None = None) -> Callable[[F], F]:
    """Give ``func`` (which takes ``deployment: DeploymentSpec``) the named deployment options
    (``model``, ``gpu``, ``tp``, ...): the planners and the step-time commands, which take what
    times the steps but run no replica of their own. Each flag's name, type and bound is the
    spec's (``--tp`` also spelled ``--tensor-parallel-size``); ``helps`` words a flag for a command
    that reads it differently (a default of its own, a CSV column first)."""
    unknown = [f for f in fields if f not in DeploymentSpec.model_fields]
    if unknown:
        raise TypeError(f"not DeploymentSpec fields: {unknown}")

    def decorate(func: F) -> F:
        return _deployment(func, fields, helps)

    return decorate


def cluster_deployment_flags(func: F) -> F:
    """``deployment_flags`` plus ``--replicas`` and ``--router``."""
    return _deployment(func, (*HARDWARE_FIELDS, "replicas", "router"))


def file_settings(path: Path | None) -> dict[str, Any]:
    """The vLLM keys of a ``--config`` file (unknown keys are an error naming the file)."""
    if path is None:
        return {}
    return EngineConfig.read_file(path)


def deployment_spec(
    deployment: DeploymentSpec, config_file: Path | None, flags: dict[str, Any]
) -> DeploymentSpec:
    """The command's deployment: its options, with the ``--config`` file's vLLM keys overridden by
    the flags given."""
    engine = {**file_settings(config_file), **{k: v for k, v in flags.items() if v is not None}}
    spec = deployment.model_copy(update={"engine": engine})
    try:  # checked before any work (the trace is not read yet): vLLM's own rules, named
        engine_values(spec)
    except ConfigError as e:
        raise ConfigError(f"{config_file}: {describe(e)}" if config_file is not None else str(e)) from None
    return spec


__all__ = [
    "FLAG_NAMES",
    "annotated",
    "cluster_deployment_flags",
    "data_parallel_deployment_flags",
    "deployment_flags",
    "deployment_spec",
    "engine_flags",
    "file_settings",
    "hardware_flags",
    "option",
    "with_options",
]
