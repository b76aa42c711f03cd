"""Prompt tokens without a tokenizer: a documented approximation (docs/emulate.md).

No tokenizer is downloaded at run time. Text counts as one token per ``CHARS_PER_TOKEN`` bytes
of UTF-8 (English text averages about four characters per Llama-3 token); a prompt given as a list
of token ids (vLLM accepts that) is counted exactly. Each token is a pseudo id (its 4-byte chunk
read as an integer), so identical leading text gives identical leading blocks: the prefix cache
hits where a real one would, to within a block.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

CHARS_PER_TOKEN = 4
HASH_BLOCK = 16  # tokens per prefix-cache content hash (vLLM's default block size)
_MASK = (1 << 62) - 1


def text_tokens(text: str) -> list[int]:
    """Pseudo token ids of ``text``: one per ``CHARS_PER_TOKEN`` bytes of UTF-8 (at least one)."""
    data = text.encode("utf-8")
    ids = [
        int.from_bytes(data[i : i + CHARS_PER_TOKEN], "little") for i in range(0, len(data), CHARS_PER_TOKEN)
    ]
    return ids or [0]


def chat_text(messages: Sequence[tuple[str, str]]) -> str:
    """A chat as the text a template would make of it: a header per message and the assistant's
    turn opened (Llama-3's template adds about 4 tokens a message; ``<|role|>\\n`` is as long)."""
    parts = [f"<|{role}|>\n{content}\n" for role, content in messages]
    return "".join(parts) + "<|assistant|>\n"


def block_hashes(tokens: Sequence[int], block: int = HASH_BLOCK) -> list[int]:
    """One content id per full ``block`` of tokens (the engine chains them into prefix keys)."""
    out = []
    for i in range(0, len(tokens) - block + 1, block):
        chunk = b"".join((t & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little") for t in tokens[i : i + block])
        out.append(int.from_bytes(hashlib.blake2b(chunk, digest_size=8).digest(), "little") & _MASK)
    return out


def output_text(index: int) -> str:
    """The text of output token ``index``: no model runs, so a fixed, countable filler word."""
    return " tok" if index else "tok"
