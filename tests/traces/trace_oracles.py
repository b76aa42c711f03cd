"""Slow, obviously-correct reference computations that the trace tests compare against."""


def reuse_oracle(hash_ids: list[list[int] | None], prompt: list[int], block: int) -> float:
    """Share of prompt tokens in leading blocks whose whole prefix appeared in an earlier request."""
    seen: set[tuple[int, ...]] = set()
    reused = 0
    for ids, plen in zip(hash_ids, prompt, strict=True):
        ids = ids or []
        k = 0
        while k < len(ids) and tuple(ids[: k + 1]) in seen:
            k += 1
        reused += min(k * block, plen)
        seen.update(tuple(ids[: j + 1]) for j in range(len(ids)))
    return reused / sum(prompt) if sum(prompt) else 0.0


def group_reuse_oracle(groups: list[str | None], prefix_len: list[int], prompt: list[int]) -> float:
    """Share of prompt tokens inside a group prefix that an earlier request of the group had."""
    longest: dict[str, int] = {}
    reused = 0
    for g, p in zip(groups, prefix_len, strict=True):
        if g is None:
            continue
        reused += min(p, longest.get(g, 0))
        longest[g] = max(longest.get(g, 0), p)
    return reused / sum(prompt) if sum(prompt) else 0.0
