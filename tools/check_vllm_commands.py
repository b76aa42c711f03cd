#!/usr/bin/env python3
"""Check every ``vllm serve`` command servesim emits against vLLM 0.33's own argument handling.

Usage (servesim's virtualenv):
    .venv/bin/python tools/check_vllm_commands.py              # snapshot check, then vLLM's own
    .venv/bin/python tools/check_vllm_commands.py --no-oracle  # the snapshot check only
    .venv/bin/python tools/check_vllm_commands.py --list       # the commands, one per line
    .venv/bin/python tools/check_vllm_commands.py --write-table  # regenerate the snapshot

The commands are those of ``tools/vllm_commands.py`` (the demo's outputs, the docs' code blocks,
a deployment per knob of the tuning space). Two checks, one problem per line (``source: what``),
exit status 1 when there is any:

* the snapshot (always; ``tests/tuning/test_vllm_commands.py`` runs it in CI): every flag is one of
  vLLM 0.33's ``vllm serve`` option strings (``tools/vllm_serve_flags.json``, made by
  ``tools/vllm_serve_oracle.py --table`` from vLLM's own parser), a flag that takes a value has
  one of its type, in its choices and in the range pydantic enforces on the config field; a
  ``--config`` YAML is read as vLLM's loader reads it; ``--speculative-config`` has only
  ``SpeculativeConfig``'s keys, a method vLLM knows and, for the methods that need one, its
  draft's checkpoint; and the cross-flag rules of vLLM's ``SchedulerConfig`` (budget >= max_num_seqs,
  budget >= max_model_len without chunked prefill, long-prefill cap <= max_model_len) and of its
  NVIDIA attention backends (block size a multiple of 16) hold;
* vLLM itself, where the oracle's virtualenv exists (``--oracle-python``, default
  ``$VLLM_ORACLE_PYTHON`` or ``~/.cache/vllm-oracle-venv/bin/python``; see
  ``../shared/vllm-oracle/README.md``): ``tools/vllm_serve_oracle.py`` parses each command with
  ``make_arg_parser(FlexibleArgumentParser())`` and builds its ``VllmConfig``
  (``EngineArgs.from_cli_args(...).create_engine_config()``), with local stand-ins for the models.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from vllm_commands import Command, all_commands  # noqa: E402

TABLE = HERE / "vllm_serve_flags.json"
ORACLE_SCRIPT = HERE / "vllm_serve_oracle.py"

#: vLLM 0.33's speculative methods whose drafter is a checkpoint of its own: without "model"
#: ``SpeculativeConfig`` raises "num_speculative_tokens was provided but without speculative model".
NEEDS_MODEL = ("eagle", "eagle3", "draft_model", "dflash")

#: The multiple of 16 vLLM 0.33's NVIDIA attention backends take (servesim.tuning.deployment).
CUDA_BLOCK_MULTIPLE = 16


def default_oracle_python() -> Path:
    env = os.environ.get("VLLM_ORACLE_PYTHON")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(env) if env else base / "vllm-oracle-venv" / "bin" / "python"


def load_table(path: Path = TABLE) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------- the snapshot check
def config_argv(config_yaml: str, table: dict[str, Any]) -> list[str]:
    """A ``--config`` YAML as vLLM 0.33's ``FlexibleArgumentParser.load_config_file`` turns it
    into flags: true -> ``--key``, false -> ``--no-key`` (dropped if there is none), a mapping ->
    JSON, a list -> the flag then its items, anything else -> ``--key str(value)``."""
    out: list[str] = []
    for key, value in (yaml.safe_load(config_yaml) or {}).items():
        if isinstance(value, bool):
            if value:
                out.append(f"--{key}")
            elif f"--no-{key}" in table["flags"]:
                out.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                out += [f"--{key}", *map(str, value)]
        elif isinstance(value, dict):
            out += [f"--{key}", json.dumps(value)]
        else:
            out += [f"--{key}", str(value)]
    return out


def _value_problem(flag: str, value: str, spec: dict[str, Any]) -> str | None:
    kind = spec["type"]
    if kind.startswith("optional "):
        if value in ("", "None"):
            return None
        kind = kind.removeprefix("optional ")
    number: float | None = None
    try:
        if kind in ("int", "human_int", "human_int_or_auto"):
            if kind == "human_int_or_auto" and value == "auto":
                return None
            number = int(value) if re.fullmatch(r"-?\d+", value) else _human_int(value)
        elif kind == "float":
            number = float(value)
        elif kind == "json" or (kind == "json_or_str" and value.lstrip().startswith("{")):
            json.loads(value)
    except (ValueError, json.JSONDecodeError):
        return f"{flag} {value!r}: not a value of type {spec['type']}"
    if "choices" in spec and value not in spec["choices"]:
        return f"{flag} {value!r}: not one of {', '.join(spec['choices'])}"
    return _range_problem(flag, number, spec.get("range", {}))


def _human_int(value: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value.strip())
    if not m:
        raise ValueError(value)
    scale = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    mult = scale[m[2]] if m[2] in scale else 2 ** (10 * "KMGT".index(m[2]) + 10)
    return int(float(m[1]) * mult)


def _range_problem(flag: str, number: float | None, rng: dict[str, float]) -> str | None:
    if number is None:
        return None
    tests = {"gt": number > rng.get("gt", -1e300), "ge": number >= rng.get("ge", -1e300)}
    tests |= {"lt": number < rng.get("lt", 1e300), "le": number <= rng.get("le", 1e300)}
    broken = [f"{k} {rng[k]:g}" for k, ok in tests.items() if k in rng and not ok]
    return f"{flag} {number:g}: out of vLLM's range ({', '.join(broken)})" if broken else None


def parse_with_table(argv: list[str], table: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``argv`` (after ``vllm serve``) read with the snapshot: ``(dest -> value, problems)``."""
    flags = table["flags"]
    values: dict[str, Any] = {}
    problems: list[str] = []
    positional: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("-"):
            positional.append(tok)
            continue
        name, eq, inline = tok.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")  # FlexibleArgumentParser takes both spellings
        spec = flags.get(name)
        if spec is None:
            problems.append(f"{name}: not a flag of vLLM {table['vllm_version']}'s vllm serve")
            continue
        if not spec["takes_value"]:
            values[spec["dest"]] = not spec["negative"]
            continue
        if eq:
            value = inline
        elif i < len(argv):
            value, i = argv[i], i + 1
        else:
            problems.append(f"{name}: needs a value")
            continue
        problem = _value_problem(name, value, spec)
        if problem:
            problems.append(problem)
        values[spec["dest"]] = value
    if len(positional) > 1:
        problems.append(f"more than one model given: {positional}")
    if positional:
        values.setdefault("model_tag", positional[0])
    return values, problems


def rule_problems(values: dict[str, Any], table: dict[str, Any]) -> list[str]:
    """vLLM 0.33's cross-flag start-up rules on the parsed values (the oracle runs the real ones)."""
    out: list[str] = []
    if "model_tag" not in values and "model" not in values:
        out.append("no model: vllm serve needs one, positional or --model")

    def num(key: str, default: float) -> float:
        try:
            return float(values.get(key, default))
        except (TypeError, ValueError):
            return default

    mml, mbt, mns = num("max_model_len", 0), num("max_num_batched_tokens", 8192), num("max_num_seqs", 1024)
    if mbt < mns:
        out.append(f"--max-num-batched-tokens {mbt:g} < --max-num-seqs {mns:g}: SchedulerConfig refuses it")
    if mml and values.get("enable_chunked_prefill") is False and mbt < mml:
        out.append(f"chunked prefill off with --max-num-batched-tokens {mbt:g} < --max-model-len {mml:g}")
    if mml and num("long_prefill_token_threshold", 0) > mml:
        out.append("--long-prefill-token-threshold above --max-model-len: SchedulerConfig refuses it")
    if num("block_size", 16) % CUDA_BLOCK_MULTIPLE:
        out.append(f"--block-size {values['block_size']}: no NVIDIA attention backend of vLLM 0.33 takes it")
    if "speculative_config" in values:
        out += _speculative_problems(values["speculative_config"], table)
    return out


def _speculative_problems(text: str, table: dict[str, Any]) -> list[str]:
    try:
        sc = json.loads(text)
    except json.JSONDecodeError:
        return []  # said by the value check
    fields = table["speculative_config"]
    out = [f"--speculative-config {k!r}: not a key of SpeculativeConfig" for k in sc if k not in fields]
    for key, value in sc.items():
        spec = fields.get(key, {})
        if "choices" in spec and str(value) not in spec["choices"]:
            out.append(f"--speculative-config {key} {value!r}: not one vLLM knows")
        if isinstance(value, int | float) and not isinstance(value, bool):
            out += [
                p for p in [_range_problem(f"--speculative-config {key}", value, spec.get("range", {}))] if p
            ]
    if sc.get("method") in NEEDS_MODEL and not sc.get("model"):
        out.append(f'--speculative-config: method {sc["method"]!r} without "model": vLLM does not start')
    if "num_speculative_tokens" not in sc:
        out.append("--speculative-config: no num_speculative_tokens")
    return out


def model_problems(values: dict[str, Any], models: dict[str, Any]) -> list[str]:
    """vLLM 0.33's checks against the model's config.json (``ModelConfig`` max_model_len within
    the context, ``ParallelConfig`` TP dividing the heads, ``SpeculativeConfig`` draft TP 1 or
    the target's, ``mtp`` only on a model with MTP layers), on the stand-ins the command names."""
    target = models.get(values.get("model_tag") or values.get("model") or "")
    if target is None:
        return []
    out = []
    tp = int(values.get("tensor_parallel_size", 1))
    if target["num_attention_heads"] % tp:
        out.append(
            f"--tensor-parallel-size {tp} does not divide the {target['num_attention_heads']} attention heads"
        )
    mml = values.get("max_model_len")
    if mml is not None and str(mml).isdigit() and int(mml) > target["max_position_embeddings"]:
        out.append(f"--max-model-len {mml} above the model's context ({target['max_position_embeddings']})")
    try:
        sc = json.loads(values.get("speculative_config") or "{}")
    except json.JSONDecodeError:
        sc = {}
    if sc.get("draft_tensor_parallel_size") not in (None, 1, tp):
        out.append(
            f"--speculative-config draft_tensor_parallel_size {sc['draft_tensor_parallel_size']}: 1 or {tp}"
        )
    if sc.get("method") == "mtp" and not sc.get("model") and "num_nextn_predict_layers" not in target:
        out.append("--speculative-config: method 'mtp' on a model without MTP layers")
    return out


def table_problems(cmd: Command, table: dict[str, Any]) -> list[str]:
    argv = list(cmd.argv)
    if cmd.config_yaml is not None:
        argv += config_argv(cmd.config_yaml, table)
    values, problems = parse_with_table(argv, table)
    return problems + rule_problems(values, table) + model_problems(values, cmd.models)


# ---------------------------------------------------------------------- the oracle
def oracle_problems(cmds: list[Command], python: Path, timeout_s: float = 900) -> dict[str, str]:
    """source -> vLLM's refusal, for each command vLLM refuses (``vllm_serve_oracle.py``)."""
    items = json.dumps([c.item() for c in cmds])
    proc = subprocess.run(
        [str(python), str(ORACLE_SCRIPT)],
        input=items,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(results) != len(cmds):
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"the vLLM oracle failed (exit {proc.returncode}): {tail}")
    return {r["source"]: f"{r['stage']}: {_short(r['error'])}" for r in results if not r["ok"]}


#: vLLM dependencies a command needs in the oracle's venv beyond what its setup.sh installs
#: (../shared/vllm-oracle/requirements-cpu.txt): any ``--quantization`` imports compressed-tensors,
#: which imports loguru (a venv with the one and not the other fails on every such command).
NEEDS: dict[str, str] = {"--quantization": "compressed_tensors,loguru"}


def oracle_checkable(cmds: list[Command], python: Path) -> tuple[list[Command], list[str]]:
    """The commands the oracle at ``python`` can check, and a note per flag whose vLLM module
    its venv lacks (those commands are then checked against the flag table only)."""
    missing = {
        flag: module
        for flag, module in NEEDS.items()
        if subprocess.run(  # found, not imported (it imports torch: seconds)
            [
                str(python),
                "-c",
                "import importlib.util, sys; "
                f"sys.exit(not all(importlib.util.find_spec(m) for m in {module.split(',')!r}))",
            ],
            capture_output=True,
            check=False,
        ).returncode
    }
    kept = [c for c in cmds if not any(_sets(c, flag) for flag in missing)]
    notes = [
        f"{len(cmds) - len(kept)} command(s) with {flag} not run through vLLM: its venv lacks {module} "
        f"(`{python} -m pip install --no-deps compressed-tensors==0.17.0 loguru`)"
        for flag, module in missing.items()
    ]
    return kept, notes


def _sets(cmd: Command, flag: str) -> bool:
    """Whether ``cmd`` sets ``flag``, on its command line or as a key of its ``--config`` YAML."""
    key = re.escape(flag.removeprefix("--")).replace("\\-", "[-_]")  # YAML keys take either
    in_yaml = cmd.config_yaml is not None and re.search(rf"^\s*{key}\s*:", cmd.config_yaml, re.MULTILINE)
    return flag in cmd.argv or bool(in_yaml)


def _short(error: str) -> str:
    """vLLM's message without pydantic's boilerplate lines."""
    lines = [ln.strip() for ln in error.splitlines() if ln.strip() and "errors.pydantic.dev" not in ln]
    return re.sub(r"\s*\[type=.*$", "", " ".join(lines))


def write_table(python: Path) -> None:
    out = subprocess.run(
        [str(python), str(ORACLE_SCRIPT), "--table"], capture_output=True, text=True, check=True, timeout=600
    )
    TABLE.write_text(out.stdout, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--oracle-python", type=Path, default=default_oracle_python())
    ap.add_argument("--no-oracle", action="store_true", help="the snapshot check only")
    ap.add_argument("--list", action="store_true", help="print the commands and stop")
    ap.add_argument("--write-table", action="store_true", help="regenerate tools/vllm_serve_flags.json")
    args = ap.parse_args(argv)
    if args.write_table:
        write_table(args.oracle_python)
        print(f"wrote {TABLE}")
        return 0
    cmds = all_commands()
    if args.list:
        for c in cmds:
            print(
                f"{c.source}: vllm serve {' '.join(c.argv)}" + (" --config <yaml>" if c.config_yaml else "")
            )
        return 0
    table = load_table()
    problems = [f"{c.source}: {p}" for c in cmds for p in table_problems(c, table)]
    checked = f"{len(cmds)} commands against vLLM {table['vllm_version']}'s flag table"
    if not args.no_oracle and args.oracle_python.exists():
        runnable, notes = oracle_checkable(cmds, args.oracle_python)
        problems += [
            f"{s}: vLLM refuses it at {e}" for s, e in oracle_problems(runnable, args.oracle_python).items()
        ]
        checked += " and vLLM's own parser and config checks" + "".join(f"; {n}" for n in notes)
    elif not args.no_oracle:
        checked += f" (no vLLM oracle at {args.oracle_python}: its check skipped)"
    for p in problems:
        print(p)
    print(f"{checked}: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
