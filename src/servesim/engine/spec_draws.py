# cython: boundscheck=False, wraparound=False
"""Speculative decoding's accept/reject draws for a whole step at once, in the compiled core.

``AcceptanceModel.accepted`` draws from ``random.Random(key)`` with ``key = (seed << 48) ^
(request index << 20) ^ verification number``: a fresh Mersenne Twister per verification, so
that a run does not depend on batch order. Seeding one costs CPython ~10 us (the object, then
``init_by_array``'s 1,247 dependent steps): three quarters of a speculative run's time.

This module gives the same numbers to the bit: it seeds MT19937 exactly as CPython's
``random_seed`` does (``init_by_array`` over the key's little-endian 32-bit words, at least one)
and makes ``random()`` from two outputs as ``random_random`` does. It is quicker only compiled:
up to ``W`` keys are seeded side by side, their independent chains interleaved so the CPU
overlaps them (a single chain waits on each multiply), and only the state words the first
outputs read are twisted. A step verifies too few requests to fill ``W`` lanes, so each
request's next verifications are drawn ahead (``accepted_batch``). The pure-Python reference
(``COMPILED`` False) keeps ``random.Random``: running this code uncompiled would be far slower,
though it gives the same draws (tests/engine/test_spec_draws.py checks both against
``random.Random``).
"""

from __future__ import annotations

from array import array

from servesim.engine.request import Request

try:
    import cython  # type: ignore[import-not-found]

    COMPILED: bool = bool(cython.compiled)
except ImportError:  # Cython is a build dependency only
    COMPILED = False

N = 624  # MT19937's state words
M = 397
W = 32  # keys seeded side by side at most (the loops below spell these numbers out)
AHEAD = 32  # verifications of one request drawn ahead at most
# MT19937's 32-bit constants, C unsigned ints in the compiled core (spec_draws.pxd): written as
# literals, Cython would make them Python ints and every expression with one Python arithmetic.
MASK32 = 0xFFFFFFFF
UPPER = 0x80000000
MATRIX_A = 0x9908B0DF
TEMPER_B = 0x9D2C5680
TEMPER_C = 0xEFC60000
NAN = float("nan")
MAX_DRAWS = (N - M) // 2  # uniforms readable from the first twist of a fresh state


def _genrand_base() -> array[int]:
    """The state ``init_genrand(19650218)`` leaves: where every ``init_by_array`` starts."""
    mt = array("I", [19650218])
    for i in range(1, N):
        prev = mt[i - 1]
        mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    return mt


_BASE = _genrand_base()


def accepted_batch(
    seed: int,
    reqs: list[Request],
    ns: list[int],
    rates: array[float],
    flat: array[float] | None,
    cap: int,
    table: dict[int, tuple[int, bytes]],
    out: list[int],
) -> None:
    """Append to ``out`` how many of ``ns[i]`` drafts the target accepts at ``reqs[i]``'s next
    verification: position j with probability ``rates[j]`` (the last rate repeating), or the
    request's own ``flat[idx]`` at every position when that is not NaN; exactly what
    ``AcceptanceModel.accepted`` returns for each (``ns[i]`` at most ``cap`` <= ``MAX_DRAWS``).
    Keys, as CPython splits them: ``seed < 2**63``, request index ``< 2**44``.

    A step verifies a handful of requests, too few to keep the CPU busy (one key's seeding is a
    chain of dependent multiplies), so draws are made ahead: a key depends only on (seed,
    index, verification number), never on the schedule, so a request's next verifications'
    accepted counts (of ``cap`` drafts) are drawn together, up to ``W`` keys seeded side by
    side, and kept in ``table`` (request index -> first verification, counts), which the
    caller keeps for these draws only (the same seed, rates and ``cap``)."""
    start = len(out)
    total = len(reqs)
    needy: list[int] = []
    for i in range(total):
        r = reqs[i]
        entry = table.get(r.idx)
        a = -1
        if entry is not None:
            base, held = entry
            off = r.spec_verifications - base
            if 0 <= off < len(held):
                a = held[off]
        if a < 0:
            needy.append(i)
        n = ns[i]
        out.append(a if a < n else n)
    if needy:
        _draw_ahead(seed, reqs, ns, needy, rates, flat, cap, table, out, start)


def _ahead_sizes(reqs: list[Request], needy: list[int]) -> array[int]:
    """How many verifications each needy request draws ahead: one (the one asked for), then the
    lanes left in the last batch of ``W`` handed out one at a time, round robin, to requests
    that may verify again (each verification emits a token: ``max_tokens - num_output`` at
    most) and hold fewer than ``AHEAD``."""
    count = len(needy)
    size = array("q", [1]) * count
    lanes = count
    target = -(-count // W) * W
    grew = True
    while lanes < target and grew:
        grew = False
        for j in range(count):
            if lanes >= target:
                break
            r = reqs[needy[j]]
            if size[j] < AHEAD and size[j] < r.max_tokens - r.num_output:
                size[j] += 1
                lanes += 1
                grew = True
    return size


def _draw_ahead(
    seed: int,
    reqs: list[Request],
    ns: list[int],
    needy: list[int],
    rates: array[float],
    flat: array[float] | None,
    cap: int,
    table: dict[int, tuple[int, bytes]],
    out: list[int],
    start: int,
) -> None:
    """Draw, for each ``reqs[needy[j]]``, the accepted counts (of ``cap`` drafts) of its next
    verifications (``_ahead_sizes``), answer its ``out`` row and keep them in ``table``
    (after what it holds when they follow on, else in its place)."""
    size = _ahead_sizes(reqs, needy)
    count = len(needy)
    lanes = 0
    for j in range(count):
        lanes += size[j]
    res = bytearray(lanes)
    mt = array("I", bytes(4 * 624 * 32))
    addend = array("I", bytes(4 * 12 * 32))
    own = array("d", bytes(8 * 32))
    kw = array("I", [0, 0, 0, 0])
    nflat = len(flat) if flat is not None else 0
    nrates = len(rates)
    pos = 0  # keys set up so far; the batch holds keys pos - lane .. pos - 1
    lane = 0
    for j in range(count):
        r = reqs[needy[j]]
        idx = r.idx
        p = flat[idx] if flat is not None and idx < nflat else NAN  # NaN: the model's rates
        for t in range(size[j]):
            verification = r.spec_verifications + t
            lo = ((seed & 0xFFFF) << 48) ^ (idx << 20) ^ verification  # the key's low 64 bits
            hi = (seed >> 16) ^ (idx >> 44)
            kw[0] = lo & MASK32
            kw[1] = lo >> 32
            kw[2] = hi & MASK32
            kw[3] = hi >> 32
            used = 4 if kw[3] else 3 if kw[2] else 2 if kw[1] else 1
            for s in range(12):  # step s of the first loop adds key word j = s % used, plus j
                w = s % used
                addend[s * 32 + lane] = (kw[w] + w) & MASK32
            own[lane] = p
            lane += 1
            pos += 1
            if lane == 32 or pos == lanes:
                width = (lane + 7) // 8 * 8
                _init_by_array(mt, _BASE, addend, width)
                for x in range(lane):
                    res[pos - lane + x] = _count(mt, x, width, cap, own[x], rates, nrates)
                lane = 0
    pos = 0
    for j in range(count):
        i = needy[j]
        r = reqs[i]
        a = res[pos]
        n = ns[i]
        out[start + i] = a if a < n else n
        drawn = bytes(res[pos : pos + size[j]])
        v = r.spec_verifications
        entry = table.get(r.idx)
        if entry is not None:
            base, held = entry
            if base + len(held) == v:  # they follow on
                table[r.idx] = (base, held + drawn)
                pos += size[j]
                continue
        table[r.idx] = (v, drawn)
        pos += size[j]


def _init_by_array(mt: array[int], base: array[int], addend: array[int], width: int) -> None:
    """CPython's ``init_by_array`` on ``width`` (8, 16, 24 or 32) states at once (word i of lane
    l at ``i * width + l``), each from ``init_genrand(19650218)`` (``base``); ``addend[s * 32 +
    l]`` is lane l's key word plus its index at step s of the first loop (of period 12: keys
    have 1 to 4 words). The lanes go in groups of 8 (literal: the compiled loops stay C and
    vectorise), and the groups' chains are independent, so the CPU overlaps them."""
    mask = MASK32  # a local: a store into ``mt`` cannot change it, so the lanes vectorise
    for i in range(624):
        word = base[i]
        for x in range(width):
            mt[i * width + x] = word
    i = 1
    s = 0
    for _k in range(624):  # key_length <= 4 < N: N steps
        cur = i * width
        prv = cur - width
        add = s * 32
        for x in range(width):
            y = mt[prv + x]
            mt[cur + x] = ((mt[cur + x] ^ (((y ^ (y >> 30)) * 1664525) & mask)) + addend[add + x]) & mask
        i += 1
        s = s + 1 if s < 11 else 0
        if i >= 624:
            for x in range(width):
                mt[x] = mt[623 * width + x]
            i = 1
    for _k in range(623):
        cur = i * width
        prv = cur - width
        sub = i  # a 32-bit word compiled: the lanes stay 32-bit arithmetic
        for x in range(width):
            y = mt[prv + x]
            mt[cur + x] = ((mt[cur + x] ^ (((y ^ (y >> 30)) * 1566083941) & mask)) - sub) & mask
        i += 1
        if i >= 624:
            for x in range(width):
                mt[x] = mt[623 * width + x]
            i = 1
    for x in range(width):
        mt[x] = UPPER


def _count(mt: array[int], lane: int, width: int, n: int, p: float, rates: array[float], nrates: int) -> int:
    """Drafts accepted of ``n`` by lane ``lane``'s fresh state: ``random()`` after ``random()``
    (two tempered outputs of the first twist each) against position a's rate (``p`` at every
    position when the request has its own, not NaN), stopping at the first rejection."""
    a = 0
    while a < n:
        u = (_output(mt, lane, width, 2 * a) * 67108864.0 + _output(mt, lane, width, 2 * a + 1)) * (
            1.0 / 9007199254740992.0
        )
        q = p if p == p else rates[a if a < nrates else nrates - 1]
        if not u < q:
            break
        a += 1
    return a


def _output(mt: array[int], lane: int, width: int, i: int) -> int:
    """Output ``i`` (< N - M) of a fresh state, tempered, shifted as ``random()`` takes it: by 5
    for the first of a pair, 6 for the second."""
    y = (mt[i * width + lane] & UPPER) | (mt[(i + 1) * width + lane] & 0x7FFFFFFF)
    v = mt[(i + 397) * width + lane] ^ (y >> 1)
    if y & 1:
        v ^= MATRIX_A
    v ^= v >> 11
    v ^= (v << 7) & TEMPER_B
    v ^= (v << 15) & TEMPER_C
    v ^= v >> 18
    out: int = v >> 6 if i & 1 else v >> 5
    return out
