"""Every ``vllm serve`` command servesim emits, gathered for ``check_vllm_commands.py``.

Three sources, as issue 46 asks:

* the demo's committed outputs (``examples/demo``): the outbox's ``vllm-serve-command.txt``, its
  ``vllm serve --config`` YAMLs, the Kubernetes manifest's container args, and every string of
  the JSON documents and ``report.md`` that holds a ``vllm serve`` command;
* the commands the docs print: ``vllm serve`` lines in the fenced code blocks of ``docs/*.md``
  and ``README.md`` (prose that mentions a flag is not a command);
* ``knob_deployments()``: deployments covering every knob of the tuning space (each speculation
  method on a model with a published head, the CPU KV tier, every block size vLLM 0.33 starts
  with on a GPU, chunked prefill on and off, prefix caching off, TP 1-8, replicas, the queue
  timeout, priority scheduling, a long-prefill cap), rendered by the functions the recommendation
  uses: the replica lines, the ``--config`` YAML and the Kubernetes manifest.

Each command is a ``Command``: where it comes from, the arguments after ``vllm serve``, the YAML
of a ``--config`` file, and (``stand_ins``) a config.json for each model it names, from servesim's
catalog, for the oracle to put in place of repos it cannot download.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]

#: Where a shell line stops being the command (servesim's lines end with a comment at most).
_SHELL_STOPS = {"&&", "||", "|", ";", "&", ">", ">>", "<"}


@dataclass
class Command:
    """One ``vllm serve`` invocation: ``argv`` after ``vllm serve``; ``config_yaml``: the text of
    the ``--config`` file it reads (then ``argv`` holds no ``--config``)."""

    source: str
    argv: list[str]
    config_yaml: str | None = None
    models: dict[str, Any] = field(default_factory=dict)

    def item(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "argv": self.argv,
            "config_yaml": self.config_yaml,
            "models": self.models,
        }


# ---------------------------------------------------------------------- finding commands in text
def shell_commands(text: str) -> list[list[str]]:
    """The ``vllm serve`` commands of shell text: backslash-continued lines joined, leading
    ``VAR=value`` assignments and trailing comments dropped; each as the argv after ``serve``."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        if "vllm serve" not in line:
            continue
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i in range(len(tokens) - 1):
            if tokens[i] == "vllm" and tokens[i + 1] == "serve":
                argv = []
                for tok in tokens[i + 2 :]:
                    if tok in _SHELL_STOPS:
                        break
                    argv.append(tok)
                out.append(argv)
                break
    return out


def fenced_blocks(markdown: str) -> list[str]:
    """The bodies of a Markdown file's fenced code blocks."""
    return re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.S | re.M)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


# ---------------------------------------------------------------------- the three sources
def demo_commands(demo: Path = ROOT / "examples" / "demo") -> list[Command]:
    out: list[Command] = []
    for path in sorted(demo.rglob("*")):
        rel = str(path.relative_to(ROOT))
        if path.suffix == ".json":
            strings = list(_strings(json.loads(path.read_text(encoding="utf-8"))))
            lines = [a for s in strings for a in shell_commands(s)]
        elif path.suffix in (".txt", ".md"):
            lines = shell_commands(path.read_text(encoding="utf-8"))
        elif path.suffix == ".yaml":
            out += _yaml_commands(path.read_text(encoding="utf-8"), rel)
            continue
        else:
            continue
        out += [Command(f"{rel} #{i + 1}", argv) for i, argv in enumerate(lines)]
    return out


def _yaml_commands(text: str, source: str) -> list[Command]:
    """A ``--config`` YAML (a mapping with ``model``) or a Kubernetes manifest's vllm containers."""
    docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    if len(docs) == 1 and "model" in docs[0] and "kind" not in docs[0]:
        return [Command(source, [], config_yaml=text)]
    out = []
    for doc in docs:
        spec = doc.get("spec", {}).get("template", {}).get("spec", {})
        for c in spec.get("containers", []):
            if c.get("command") == ["vllm", "serve"]:
                out.append(Command(f"{source} ({doc['kind']} {doc['metadata']['name']})", list(c["args"])))
    return out


def doc_commands(root: Path = ROOT) -> list[Command]:
    out = []
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        rel = str(path.relative_to(root))
        argvs = [
            a for block in fenced_blocks(path.read_text(encoding="utf-8")) for a in shell_commands(block)
        ]
        out += [Command(f"{rel} #{i + 1}", argv) for i, argv in enumerate(argvs)]
    return out


def knob_deployments() -> list[tuple[str, Any, str]]:
    """``(label, Deployment, model)`` covering every knob of the tuning space."""
    from servesim.tuning.deployment import CUDA_BLOCK_MULTIPLE, VLLM_BLOCK_SIZES, Deployment

    def d(**kw: Any) -> Any:
        return Deployment(**{"max_model_len": 32768, "max_num_batched_tokens": 8192, **kw})

    def spec(method: str, k: int = 3, **kw: Any) -> dict[str, Any]:
        return {
            "num_speculative_tokens": k,
            "speculative_config": {"method": method, "num_speculative_tokens": k, **kw},
        }

    llama = "llama-3.1-8b"
    out: list[tuple[str, Any, str]] = [
        ("defaults", d(), llama),
        ("vllm serve's H100 row", d(max_num_seqs=1024), llama),
        ("eagle3", d(**spec("eagle3")), llama),
        ("eagle", d(**spec("eagle", 2)), llama),
        ("eagle3 on an MoE", d(tensor_parallel_size=2, **spec("eagle3", 4)), "qwen3-30b-a3b"),
        ("eagle3 at TP 8", d(tensor_parallel_size=8, **spec("eagle3")), "qwen3-235b-a22b"),
        ("eagle on Llama 4", d(tensor_parallel_size=4, **spec("eagle", 2)), "llama-4-scout-17b-16e"),
        ("eagle3 on Llama 4", d(tensor_parallel_size=4, **spec("eagle3")), "llama-4-scout-17b-16e"),
        ("draft model", d(**spec("draft_model", 4, model="llama-3.2-1b")), llama),
        (
            "draft model, draft TP 1",
            d(
                tensor_parallel_size=2,
                **spec("draft_model", 2, model="llama-3.2-1b", draft_tensor_parallel_size=1),
            ),
            llama,
        ),
        ("ngram", d(**spec("ngram", 5)), llama),
        (
            "speculation off (k = 0)",
            d(num_speculative_tokens=0, speculative_config=spec("eagle3")["speculative_config"]),
            llama,
        ),
        ("CPU KV tier", d(kv_offloading_size=16.0), llama),
        ("pipeline parallel", d(tensor_parallel_size=2, pipeline_parallel_size=2, async_scheduling=True), llama),
        ("CPU KV tier at TP 2", d(tensor_parallel_size=2, kv_offloading_size=64.0), llama),
        ("chunked prefill off", d(enable_chunked_prefill=False, max_num_batched_tokens=32768), llama),
        ("prefix caching off", d(enable_prefix_caching=False), llama),
        ("long-prefill cap", d(long_prefill_token_threshold=512), llama),
        (
            "long-prefill cap above max_model_len",
            d(max_model_len=1500, max_num_batched_tokens=2048, long_prefill_token_threshold=2048),
            llama,
        ),
        ("priority scheduling", d(policy="priority"), llama),
        ("memory share", d(gpu_memory_utilization=0.85), llama),
        ("replicas and queue timeout", d(replicas=3, queue_timeout_s=60.0), llama),
        ("replicas across nodes", d(replicas=5, tensor_parallel_size=2), llama),
        ("TP 4, 70B", d(tensor_parallel_size=4), "llama-3.1-70b"),
        ("TP 8, 405B FP8", d(tensor_parallel_size=8), "llama-3.1-405b-fp8"),
        ("step-time model, no catalog model", d(**spec("eagle3")), "MODEL"),
        ("MLA at TP 8", d(tensor_parallel_size=8), "deepseek-v3"),
        (
            "MLA, fp8 KV, FlashMLA's block 64",
            d(tensor_parallel_size=8, kv_cache_dtype="fp8", block_size=64),
            "kimi-k2",
        ),
        ("FP8 weights quantized at load, 128x128 blocks", d(quantization="fp8_per_block"), llama),
        (
            "MXFP4 weights quantized at load, TP 4",
            d(tensor_parallel_size=4, quantization="mxfp4"),
            "llama-3.1-70b",
        ),
    ]
    out += [
        (f"block size {b}", d(block_size=b), llama) for b in VLLM_BLOCK_SIZES if b % CUDA_BLOCK_MULTIPLE == 0
    ]
    return out


def knob_commands() -> list[Command]:
    """The knob deployments as the recommendation renders them: each replica's line, the
    ``--config`` YAML and the Kubernetes manifest's args."""
    from servesim.tuning.deploy import kubernetes_manifest

    out = []
    for label, dep, model in knob_deployments():
        for i, line in enumerate(dep.replica_commands(model)):
            out += [Command(f"knob '{label}' replica {i + 1}", a) for a in shell_commands(line)]
        out.append(Command(f"knob '{label}' --config YAML", [], config_yaml=dep.vllm_config_yaml(model)))
        manifest = kubernetes_manifest(dep, model, router="least_outstanding")
        out += [
            Command(f"knob '{label}' {c.source.split(' ', 1)[1]}", c.argv)
            for c in _yaml_commands(manifest, "k8s")
        ]
    return out


def all_commands(root: Path = ROOT) -> list[Command]:
    cmds = [*demo_commands(root / "examples" / "demo"), *doc_commands(root), *knob_commands()]
    for c in cmds:
        c.models = stand_ins(c)
    return cmds


# ---------------------------------------------------------------------- models for the oracle
def named_models(c: Command) -> tuple[str | None, dict[str, Any] | None]:
    """The command's target model and its ``--speculative-config`` object (None: none)."""
    args = list(c.argv)
    if c.config_yaml is not None:
        data = yaml.safe_load(c.config_yaml) or {}
        for k, v in data.items():
            args += [f"--{k}", v if isinstance(v, str) else json.dumps(v)]
    target = args[0] if args and not args[0].startswith("-") else None
    spec = None
    for flag, value in itertools.pairwise(args):
        if flag == "--model" and target is None:
            target = value
        if flag == "--speculative-config":
            try:
                spec = json.loads(value)
            except json.JSONDecodeError:
                spec = None
    return target, spec if isinstance(spec, dict) else None


def stand_ins(c: Command) -> dict[str, Any]:
    """A config.json for each model the command names: the catalog model's sizes and context as a
    Llama-architecture stand-in; an EAGLE head as one layer of its target with the architecture
    its published config.json names; a placeholder (MODEL, DRAFT_MODEL) as Llama-3.1-8B's."""
    from servesim.perf.catalog import load_catalog
    from servesim.perf.errors import PerfError
    from servesim.perf.speculators import published_heads

    target, spec = named_models(c)
    if target is None:
        return {}
    catalog = load_catalog()
    try:
        target_spec = catalog.model(target)
    except PerfError:
        target_spec = catalog.model("llama-3.1-8b")
    out = {target: hf_config(target_spec)}
    draft = (spec or {}).get("model")
    if not isinstance(draft, str) or draft == target:
        return out
    method = (spec or {}).get("method")
    heads = {h.hf_id: h for by in published_heads().values() for h in by.values() if h.hf_id}
    if method in ("eagle", "eagle3"):
        arch = heads[draft].architecture if draft in heads else "LlamaForCausalLM"
        out[draft] = hf_config(target_spec, layers=1, architecture=arch, eagle3=method == "eagle3")
    else:
        try:
            out[draft] = hf_config(catalog.model(draft))
        except PerfError:
            out[draft] = hf_config(catalog.model("llama-3.2-1b"))
    return out


def hf_config(
    spec: Any, layers: int | None = None, architecture: str = "LlamaForCausalLM", eagle3: bool = False
) -> dict[str, Any]:
    """A Llama-type config.json with ``spec``'s sizes, context and vocabulary; an MLA model's own
    shipped config.json (servesim/data/perf/hf_configs) without its weights' quantization_config,
    which the oracle cannot import the libraries for and which no serve flag depends on."""
    shipped = ROOT / "src" / "servesim" / "data" / "perf" / "hf_configs" / f"{spec.name}.json"
    if getattr(spec, "is_mla", False) and shipped.is_file() and layers is None:
        own = json.loads(shipped.read_text(encoding="utf-8"))
        return {k: v for k, v in own.items() if k != "quantization_config"}
    cfg: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "num_hidden_layers": layers or spec.num_layers,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "torch_dtype": "bfloat16",
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
    }
    if eagle3:
        cfg["draft_vocab_size"] = min(32000, spec.vocab_size)
    return cfg
