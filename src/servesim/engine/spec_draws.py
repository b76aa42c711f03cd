# cython: boundscheck=False, wraparound=False
"""Speculative decoding's accept/reject draws for a whole step at once, in the compiled core.

``AcceptanceModel.accepted`` draws from ``random.Random(key)`` with ``key = (seed << 48) ^
(request index << 20) ^ verification number``: a fresh Mersenne Twister per verification, so
that a run does not depend on batch order. Seeding one costs CPython ~10 us (the object, then
``init_by_array``'s 1,247 dependent steps): three quarters of a speculative run's time.

This module gives the same numbers to the bit: it seeds MT19937 exactly as CPython's
``random_seed`` does (``init_by_array`` over the key's little-endian 32-bit words, at least one)
and makes ``random()`` from two outputs as ``random_random`` does. It is quicker only compiled:
``LANES`` keys are seeded side by side, their independent chains interleaved so the CPU
overlaps them (a single chain waits on each multiply), and only the state words the first
outputs read are twisted. The pure-Python reference (``COMPILED`` False) keeps
``random.Random``: running this code uncompiled would be far slower, though it gives the same
draws (tests/engine/test_spec_draws.py checks both against ``random.Random``).
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
LANES = 8  # keys seeded side by side (the loops below spell these numbers out)
# MT19937's 32-bit constants, C unsigned ints in the compiled core (spec_draws.pxd): written as
# literals, Cython would make them Python ints and every expression with one Python arithmetic.
MASK32 = 0xFFFFFFFF
UPPER = 0x80000000
MATRIX_A = 0x9908B0DF
TEMPER_B = 0x9D2C5680
TEMPER_C = 0xEFC60000
MAX_DRAWS = (N - M) // 2  # uniforms readable from the first twist of a fresh state


def _genrand_base() -> array[int]:
    """The state ``init_genrand(19650218)`` leaves: where every ``init_by_array`` starts."""
    mt = array("I", [19650218])
    for i in range(1, N):
        prev = mt[i - 1]
        mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    return mt


_BASE = _genrand_base()
#: ``_BASE`` for each of the 8 lanes, lane-minor: what ``_init_by_array`` starts every batch from.
_TILED = array("I", [w for w in _BASE for _lane in range(8)])


def accepted_batch(
    seed: int,
    reqs: list[Request],
    ns: list[int],
    rates: array[float],
    flat: array[float] | None,
    out: list[int],
) -> None:
    """Append to ``out`` how many of ``ns[i]`` drafts the target accepts at ``reqs[i]``'s next
    verification: position j with probability ``rates[j]`` (the last rate repeating), or the
    request's own ``flat[idx]`` at every position when that is not NaN; exactly what
    ``AcceptanceModel.accepted`` returns for each (``ns[i]`` at most ``MAX_DRAWS``). Keys, as
    CPython splits them: ``seed < 2**63``, request index ``< 2**44``, verification ``< 2**20``."""
    total = len(reqs)
    tiled = _TILED
    mt = array("I", bytes(4 * 624 * 8))
    addend = array("I", bytes(4 * 12 * 8))
    kw = array("I", [0, 0, 0, 0])
    nrates = len(rates)
    nflat = len(flat) if flat is not None else 0
    for b in range(0, total, 8):
        width = total - b if total - b < 8 else 8
        for lane in range(width):
            r = reqs[b + lane]
            idx = r.idx
            verification = r.spec_verifications
            lo = ((seed & 0xFFFF) << 48) ^ (idx << 20) ^ verification  # the key's low 64 bits
            hi = (seed >> 16) ^ (idx >> 44)
            kw[0] = lo & MASK32
            kw[1] = lo >> 32
            kw[2] = hi & MASK32
            kw[3] = hi >> 32
            used = 4 if kw[3] else 3 if kw[2] else 2 if kw[1] else 1
            for s in range(12):  # step s of the first loop adds key word j = s % used, plus j
                j = s % used
                addend[s * 8 + lane] = (kw[j] + j) & MASK32
        _init_by_array(mt, tiled, addend)
        for lane in range(width):
            idx = reqs[b + lane].idx
            own = flat is not None and idx < nflat and flat[idx] == flat[idx]
            p = flat[idx] if own and flat is not None else 0.0
            out.append(_count(mt, lane, ns[b + lane], own, p, rates, nrates))


def _init_by_array(mt: array[int], tiled: array[int], addend: array[int]) -> None:
    """CPython's ``init_by_array`` on ``LANES`` (8) states at once (word i of lane l at
    ``i * 8 + l``), each from ``init_genrand(19650218)`` (``tiled``); ``addend[s * 8 + l]`` is
    lane l's key word plus its index at step s of the first loop (of period 12: keys have 1 to 4
    words). Literals, not the module's constants: the compiled loops stay C."""
    mask = MASK32  # a local: a store into ``mt`` cannot change it, so the lanes vectorise
    for x in range(624 * 8):
        mt[x] = tiled[x]
    i = 1
    s = 0
    for _k in range(624):  # key_length <= 4 < N: N steps
        cur = i * 8
        prv = cur - 8
        add = s * 8
        for lane in range(8):
            y = mt[prv + lane]
            mt[cur + lane] = (
                (mt[cur + lane] ^ (((y ^ (y >> 30)) * 1664525) & mask)) + addend[add + lane]
            ) & mask
        i += 1
        s = s + 1 if s < 11 else 0
        if i >= 624:
            for lane in range(8):
                mt[lane] = mt[623 * 8 + lane]
            i = 1
    for _k in range(623):
        cur = i * 8
        prv = cur - 8
        sub = i  # a 32-bit word compiled: the lanes stay 32-bit arithmetic
        for lane in range(8):
            y = mt[prv + lane]
            mt[cur + lane] = ((mt[cur + lane] ^ (((y ^ (y >> 30)) * 1566083941) & mask)) - sub) & mask
        i += 1
        if i >= 624:
            for lane in range(8):
                mt[lane] = mt[623 * 8 + lane]
            i = 1
    for lane in range(8):
        mt[lane] = UPPER


def _count(mt: array[int], lane: int, n: int, own: bool, p: float, rates: array[float], nrates: int) -> int:
    """Drafts accepted of ``n`` by lane ``lane``'s fresh state: ``random()`` after ``random()``
    (two tempered outputs of the first twist each) against position a's rate (``p`` at every
    position when the request has its ``own``), stopping at the first rejection."""
    a = 0
    while a < n:
        u = (_output(mt, lane, 2 * a) * 67108864.0 + _output(mt, lane, 2 * a + 1)) * (
            1.0 / 9007199254740992.0
        )
        q = p if own else rates[a if a < nrates else nrates - 1]
        if not u < q:
            break
        a += 1
    return a


def _output(mt: array[int], lane: int, i: int) -> int:
    """Output ``i`` (< N - M) of a fresh state, tempered, shifted as ``random()`` takes it: by 5
    for the first of a pair, 6 for the second."""
    y = (mt[i * 8 + lane] & UPPER) | (mt[(i + 1) * 8 + lane] & 0x7FFFFFFF)
    v = mt[(i + 397) * 8 + lane] ^ (y >> 1)
    if y & 1:
        v ^= MATRIX_A
    v ^= v >> 11
    v ^= (v << 7) & TEMPER_B
    v ^= (v << 15) & TEMPER_C
    v ^= v >> 18
    out: int = v >> 6 if i & 1 else v >> 5
    return out
