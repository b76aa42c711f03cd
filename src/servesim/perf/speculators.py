"""Published draft heads: the checkpoint vLLM's ``--speculative-config`` "model" names.

servesim times an EAGLE / EAGLE-3 head from the target's shape (``perf.drafter``) and never reads
the head itself, but vLLM 0.33 starts such speculation only with the head's checkpoint
(``SpeculativeConfig.__post_init__``: "num_speculative_tokens was provided but without
speculative model"), a ``draft_model`` only with the draft model's, and ``mtp`` drafts with the
target's own multi-token-prediction layers. ``draft_checkpoint`` says what a ``vllm serve``
command must name, from the user's ``model`` or the heads published for the catalog's models
(``servesim/data/perf/speculators.yaml``, each with its source), and refuses, with what to give,
where vLLM would not start.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from servesim.errors import ConfigError
from servesim.perf.catalog import load_catalog, resolve_model
from servesim.perf.errors import PerfError
from servesim.perf.shipped import shipped_yaml

#: What a command that names no real model serves (a step-time model without a catalog model).
PLACEHOLDER_MODELS = frozenset({"MODEL", "<model>"})

#: The draft a command names when its target is such a placeholder: both are to be replaced.
PLACEHOLDER_DRAFT = "DRAFT_MODEL"

#: Methods whose drafter is a checkpoint of its own (vLLM refuses them without "model").
NEEDS_CHECKPOINT = ("eagle", "eagle3", "draft_model")

_LABELS = {"eagle": "EAGLE", "eagle3": "EAGLE-3", "mtp": "MTP", "draft_model": "draft-model"}


class DraftHead(BaseModel):
    """One published head: its repo id (None for ``mtp``: the target's own checkpoint), the
    architecture in its config.json, who published it and where it is listed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hf_id: str | None = Field(description="Hugging Face repo id (None: the target's own MTP layers).")
    architecture: str = Field(description="architectures[0] of its config.json.")
    publisher: str
    source: str = Field(min_length=1, description="Where it is listed (URL, file).")


@lru_cache(maxsize=1)
def published_heads() -> dict[str, dict[str, DraftHead]]:
    """Catalog model -> vLLM method -> its published head (the shipped speculators.yaml)."""
    data = shipped_yaml("speculators.yaml")["speculators"]
    return {
        model: {method: DraftHead.model_validate(head) for method, head in by_method.items()}
        for model, by_method in data.items()
    }


def served_id(name: str) -> str:
    """The id ``vllm serve`` takes for ``name``: a catalog model's Hugging Face id, else ``name``
    (a repo id or a local path servesim does not know)."""
    try:
        spec = load_catalog().entry(name)
    except PerfError:
        return name
    return spec.hf_id or name


def draft_checkpoint(method: str, given: str | None, target: str | None) -> str | None:
    """What ``--speculative-config`` "model" must name for ``method`` on ``target`` (the served
    model: a catalog name, a Hugging Face id or a local config; None or a placeholder when the
    command serves none): ``given`` (a catalog model as its Hugging Face id), else the catalog's
    published head, else None where vLLM needs none (``ngram``; ``mtp`` on a model servesim does
    not know). ``ConfigError`` saying what to give where vLLM would refuse to start."""
    if method == "ngram":
        return None
    if given is not None:
        return served_id(given)
    if target is None or target in PLACEHOLDER_MODELS:
        return PLACEHOLDER_DRAFT if method in NEEDS_CHECKPOINT else None
    name = _catalog_name(target)
    head = published_heads().get(name or "", {}).get(method)
    if head is not None:
        return head.hf_id
    if method == "mtp" and name is None:
        return None  # a model servesim does not know: vLLM looks for MTP layers in its checkpoint
    raise ConfigError(_missing(method, name or target))


def _catalog_name(target: str) -> str | None:
    try:
        return resolve_model(target).name
    except (PerfError, OSError):
        return None


def _missing(method: str, target: str) -> str:
    label = _LABELS.get(method, method)
    if method == "draft_model":
        return (
            "--speculative-config: method 'draft_model' needs the draft model: give it as \"model\" "
            "(a model of servesim's catalog or a Hugging Face id); vLLM does not start without it"
        )
    if method == "mtp":
        return (
            f"--speculative-config: vLLM's 'mtp' method drafts with the target's own multi-token-"
            f"prediction layers, and {target} has none in servesim's catalog: use eagle3, eagle, "
            'draft_model or ngram, or name an MTP checkpoint as "model"'
        )
    known = sorted(m for m, heads in published_heads().items() if method in heads)
    return (
        f"--speculative-config: vLLM starts {label} speculation only with the head's checkpoint, and "
        f"servesim's catalog lists no published {label} head for {target} (it lists them for "
        f'{", ".join(known) or "no model"}): give the head\'s Hugging Face id or path as "model"'
    )
