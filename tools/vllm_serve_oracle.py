#!/usr/bin/env python3
"""vLLM 0.33's own ``vllm serve`` argument handling, run on servesim's commands. Not run in CI.

Runs in the vLLM oracle's virtualenv (``../shared/vllm-oracle/setup.sh``: vLLM 0.33.0 on CPU
torch), never in servesim's; ``tools/check_vllm_commands.py`` starts it. Two modes:

* ``--table``: vLLM's ``vllm serve`` flag table as JSON on stdout (every option string, its
  destination, the config class it belongs to, whether it takes a value, its type, choices, and
  the range pydantic enforces on the config field; the ``--speculative-config`` keys likewise):
  the committed snapshot ``tools/vllm_serve_flags.json`` that servesim's own test checks against.
* default: JSON items on stdin (``{"source", "argv", "config_yaml", "models"}``), one JSON result
  per item on stdout (``{"source", "ok", "stage", "error"}``). Each command goes through what
  ``vllm serve`` itself does before it loads a model: ``make_arg_parser(FlexibleArgumentParser())``
  (unknown flags, types, choices; ``--config`` YAML read by vLLM's own loader),
  ``validate_parsed_serve_args``, ``AsyncEngineArgs.from_cli_args`` and
  ``create_engine_config()`` (every config class's pydantic ranges and ``__post_init__`` checks:
  ``SchedulerConfig`` budget vs max_model_len, ``CacheConfig``, ``ParallelConfig``,
  ``SpeculativeConfig`` complete per method, draft TP, ``ModelConfig`` max_model_len vs the
  model's context).

What stands in for the network: the command's models (the target, an EAGLE head, a draft model)
are Hugging Face repos this machine cannot download, so each is replaced by a local folder whose
``config.json`` the item gives (``models``: id -> config, made by servesim from its catalog: the
model's sizes, context and vocabulary, and for a head the architecture its real config.json names).
vLLM's checks that depend on the model see those numbers; whether the repo exists is not checked
here (servesim's catalog sources each id). The platform is vLLM's CPU platform
(``VLLM_TARGET_DEVICE=cpu``: without a GPU vLLM cannot infer a device and refuses to build its
configs), with ``HF_HUB_OFFLINE=1``. A command with ``--pipeline-parallel-size`` above 1 is checked
with ``VLLM_USE_V2_MODEL_RUNNER=1``: on a GPU vLLM picks the V2 model runner itself (Triton is
there, ``VllmConfig.use_v2_model_runner``), which runs pipeline parallelism with async scheduling;
the CPU platform has no Triton and would pick the V1 runner, which refuses the pair.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import typing
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


class ArgError(Exception):
    """argparse's complaint (it would print usage and exit 2)."""


def make_parser() -> Any:
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser  # vLLM 0.33
    except ImportError:  # older releases
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # type: ignore[no-redef]
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))

    def error(message: str) -> typing.NoReturn:
        raise ArgError(message)

    parser.error = error  # type: ignore[method-assign]
    return parser


# ---------------------------------------------------------------------------- the flag table
#: vLLM's argument types by function name, as the snapshot spells them.
_TYPE_NAMES = {
    "int": "int",
    "float": "float",
    "str": "str",
    "loads": "json",
    "human_readable_int": "human_int",
    "human_readable_int_or_auto": "human_int_or_auto",
    "union_dict_and_str": "json_or_str",
}


def _describe_type(t: Any) -> str:
    """A value type as the snapshot spells it: ``optional_type(f)`` / ``parse_type(f)`` closures
    resolved to ``f`` ("optional int" also takes "None"), anything else "other"."""
    name = getattr(t, "__name__", type(t).__name__)
    if name in ("_optional_type", "_parse_type"):
        cells = [c.cell_contents for c in (getattr(t, "__closure__", None) or ())]
        inner = next((c for c in cells if callable(c)), None)
        base = _describe_type(inner) if inner is not None else "other"
        return f"optional {base}" if name == "_optional_type" else base
    return _TYPE_NAMES.get(name, "other")


def _type_name(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "flag"
    return "str" if action.type is None else _describe_type(action.type)


def _field_range(config: type | None, dest: str) -> dict[str, float]:
    """The pydantic range of ``config.dest`` (gt/ge/lt/le), where it has one."""
    fields = getattr(config, "__pydantic_fields__", {}) if config is not None else {}
    info = fields.get(dest)
    out: dict[str, float] = {}
    for meta in getattr(info, "metadata", []) or []:
        for key in ("gt", "ge", "lt", "le"):
            value = getattr(meta, key, None)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[key] = value
    return out


def _config_classes() -> dict[str, type]:
    import vllm.config as cfg

    return {name: obj for name, obj in vars(cfg).items() if isinstance(obj, type) and name.endswith("Config")}


def flag_table(parser: Any) -> dict[str, Any]:
    import vllm

    classes = _config_classes()
    group_of = {id(a): g.title for g in parser._action_groups for a in g._group_actions}
    flags: dict[str, Any] = {}
    # every option string the parser takes, the hidden --no-/--disable- spellings included
    for opt, action in parser._option_string_actions.items():
        if isinstance(action, argparse._HelpAction) or not opt.startswith("-"):
            continue
        title = group_of.get(id(action))
        negative = set(getattr(action, "negative_option_strings", ()) or ())
        if isinstance(action, argparse.BooleanOptionalAction) and opt.startswith("--no-"):
            negative.add(opt)
        entry: dict[str, Any] = {
            "dest": action.dest,
            "group": title,
            "takes_value": action.nargs != 0,
            "type": _type_name(action),
            "nargs": action.nargs if isinstance(action.nargs, str | int) else None,
            "negative": opt in negative,
        }
        if action.choices is not None:
            entry["choices"] = sorted(str(c) for c in action.choices)
        rng = _field_range(classes.get(title or ""), action.dest)
        if rng:
            entry["range"] = rng
        flags[opt] = entry
    return {
        "vllm_version": vllm.__version__,
        "flags": dict(sorted(flags.items())),
        "speculative_config": _speculative_fields(),
    }


def _speculative_fields() -> dict[str, Any]:
    """``--speculative-config``'s keys (``SpeculativeConfig`` init fields): type, choices, range."""
    import dataclasses

    from vllm.config import SpeculativeConfig

    out: dict[str, Any] = {}
    hints = typing.get_type_hints(SpeculativeConfig)
    for f in dataclasses.fields(SpeculativeConfig):
        if not f.init or f.name.startswith("target_") or f.name.endswith("_config"):
            continue
        entry: dict[str, Any] = {"type": _hint_name(hints.get(f.name))}
        literals = _literals(hints.get(f.name))
        if literals:
            entry["choices"] = sorted(literals)
        rng = _field_range(SpeculativeConfig, f.name)
        if rng:
            entry["range"] = rng
        out[f.name] = entry
    return dict(sorted(out.items()))


def _literals(hint: Any) -> list[str]:
    if typing.get_origin(hint) is typing.Literal:
        return [str(a) for a in typing.get_args(hint)]
    out: list[str] = []
    for arg in typing.get_args(hint):
        out += _literals(arg)
    return out


def _hint_name(hint: Any) -> str:
    names = {getattr(a, "__name__", str(a)) for a in (typing.get_args(hint) or (hint,))}
    names.discard("NoneType")
    for simple in ("bool", "int", "float", "str"):
        if names == {simple}:
            return simple
    return "other"


# ---------------------------------------------------------------------------- the checks
def _materialise(item: dict[str, Any], tmp: Path) -> list[str]:
    """The item's argv with each model id replaced by a local folder holding its config.json (and
    a ``--config`` YAML written to a file, its ids replaced the same way)."""
    local: dict[str, str] = {}
    for i, (model_id, config) in enumerate(sorted((item.get("models") or {}).items())):
        folder = tmp / f"m{i}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        local[model_id] = str(folder)

    def swap(text: str) -> str:
        if text in local:
            return local[text]
        if text.startswith("{"):  # a JSON flag: its "model"
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                return text
            if isinstance(data, dict) and data.get("model") in local:
                data["model"] = local[data["model"]]
                return json.dumps(data)
        return text

    argv = [swap(a) for a in item["argv"]]
    if item.get("config_yaml") is not None:
        import yaml

        data = yaml.safe_load(item["config_yaml"]) or {}
        data = {k: swap(v) if isinstance(v, str) else v for k, v in data.items()}
        path = tmp / "config.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        argv = [*argv, "--config", str(path)]
    return argv


def check(parser: Any, item: dict[str, Any]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import validate_parsed_serve_args

    result = {"source": item["source"], "ok": False, "stage": "parse", "error": None}
    argv0 = item["argv"]
    pp = any(
        a == "--pipeline-parallel-size" and i + 1 < len(argv0) and argv0[i + 1] != "1"
        for i, a in enumerate(argv0)
    ) or "pipeline-parallel-size" in (item.get("config_yaml") or "")
    before = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    if pp:  # what vLLM picks on a GPU (see the module's docstring)
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    try:
        return _check(parser, item, result)
    finally:
        if before is None:
            os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
        else:
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = before


def _check(parser: Any, item: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import validate_parsed_serve_args

    with tempfile.TemporaryDirectory() as tmp:
        argv = _materialise(item, Path(tmp))
        quiet = io.StringIO()
        try:
            with contextlib.redirect_stdout(quiet):
                if "--config" in argv:  # vLLM's own YAML loader, as `vllm serve ... --config F`
                    argv = parser._pull_args_from_config(["serve", *argv])[1:]
                ns = parser.parse_args(argv)
                result["stage"] = "validate_parsed_serve_args"
                validate_parsed_serve_args(ns)
                if getattr(ns, "model_tag", None):
                    ns.model = ns.model_tag
                result["stage"] = "EngineArgs.from_cli_args"
                engine_args = AsyncEngineArgs.from_cli_args(ns)
                result["stage"] = "create_engine_config"
                engine_args.create_engine_config()
        except (ArgError, SystemExit, Exception) as e:  # every refusal is the answer
            result["error"] = f"{type(e).__name__}: {e}".replace(tmp, "<local>")
            return result
    result.update(ok=True, stage="create_engine_config")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--table", action="store_true", help="print vLLM's vllm serve flag table (JSON)")
    args = ap.parse_args()
    parser = make_parser()
    if args.table:
        json.dump(flag_table(parser), sys.stdout, indent=1, sort_keys=False)
        sys.stdout.write("\n")
        return 0
    items = json.load(sys.stdin)
    for item in items:
        sys.stdout.write(json.dumps(check(parser, item)) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
