"""The text of ARPA n-gram lines built with numpy, a block of rows at a time (no Python loop per n-gram).

A block of lines is first laid out as a byte matrix with one fixed-width row per line (every field
left-aligned in its slot, the rest of the slot filled with 0xFF), then the fill bytes are dropped in one
boolean compaction. 0xFF never occurs in UTF-8 text, so it cannot be confused with a byte of a word.

Numbers are printed exactly as Python's ``"%.8g" % x`` prints them (the format the ARPA files of this
project always used; 8 significant digits, enough for KenLM's 32-bit floats), so the output is byte for
byte the one of the former line-by-line writer. :func:`format_g8` does the decimal conversion in integer
arithmetic; the few values it cannot decide exactly (a rounding tie within float error, or a number
that needs the exponent notation) are printed by Python itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FILL = 0xFF
NUMBER_WIDTH = 16  # '%.8g' in fixed notation is at most 14 characters ("-0.00012345678")
ARPA_ZERO = -99.0  # log10 0 (-inf) as ARPA files write it

_U64 = np.uint64
_ALL_ONES = _U64(0xFFFFFFFFFFFFFFFF)
_POW10 = 10.0 ** np.arange(23)  # exact doubles
# "0000" .. "9999" as little-endian 32-bit lanes, and how many trailing zeros each has ("0000": 4)
_FOUR_DIGITS = np.frombuffer(b"".join(b"%04d" % i for i in range(10000)), dtype="<u4").astype(np.uint64)
_TRAILING_ZEROS = np.array([4] + [len(s) - len(s.rstrip("0")) for s in (f"{i:04d}" for i in range(1, 10000))])
# _FILL_FROM[k]: a 64-bit lane whose bytes k.. are fill (k = 0..8); _KEEP_BELOW[k] keeps bytes 0..k-1
_FILL_FROM = np.array([_ALL_ONES << _U64(8 * k) for k in range(8)] + [_U64(0)], dtype=np.uint64)
_KEEP_BELOW = ~_FILL_FROM
# the start of 10**e for e = -1 .. -4 in fixed notation: "0.", "0.0", "0.00", "0.000"
_SMALL_PREFIX = {e: _U64(int.from_bytes(b"0." + b"0" * (-e - 1), "little")) for e in range(-4, 0)}


def format_g8(values: np.ndarray) -> np.ndarray:
    """(m, NUMBER_WIDTH) uint8: row i is ``"%.8g" % values[i]`` padded with FILL; -inf is written as -99
    and -0 as 0 (ARPA conventions)."""
    v = np.asarray(values, dtype=np.float64)
    v = np.where(np.isneginf(v), ARPA_ZERO, v)
    m = len(v)
    zero = v == 0
    finite = np.isfinite(v)
    a = np.where(zero | ~finite, 1.0, np.abs(v))
    # decimal exponent e and the 8 significant digits r (an integer in [1e7, 1e8))
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.floor(np.log10(a)).astype(np.int64)
    for _ in range(2):  # log10 may be off by one next to a power of ten: rescale once more if so
        k = 7 - e
        scaled = np.where(k >= 0, a * _POW10[np.clip(k, 0, 22)], a / _POW10[np.clip(-k, 0, 22)])
        e += (scaled >= 1e8).astype(np.int64) - (scaled < 1e7)
    r = np.floor(scaled + 0.5)
    carry = r >= 1e8  # 99999999.5 rounds up to one more digit
    e += carry
    r = np.where(carry, 1e7, r).astype(np.int64)
    r[zero] = 0
    e[zero] = 0
    # `scaled` carries a relative error below 2**-52 (< 3e-8 absolute): a fraction this close to .5 could
    # round either way, so Python decides those; exponent notation (e < -4 or e > 7) is left to it too.
    slow = ~zero & ((np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6) | (e < -4) | (e > 7) | ~finite)
    high = r // 10000
    low = r - high * 10000
    digits = _FOUR_DIGITS[high] | (_FOUR_DIGITS[low] << _U64(32))  # the 8 digit characters, first in byte 0
    significant = np.where(low == 0, 4 - _TRAILING_ZEROS[high], 8 - _TRAILING_ZEROS[low])
    significant[zero] = 1
    lanes = np.full((m, 2), _ALL_ONES, dtype=np.uint64)  # the 16 output bytes as two little-endian lanes
    present = np.flatnonzero(np.bincount(np.clip(e + 4, 0, 12), minlength=13)[:12]) - 4
    for exp in present.tolist():  # one fixed layout per exponent: shifts by constants
        rows = np.flatnonzero((e == exp) & ~slow)
        d, nd = digits[rows], significant[rows]
        if exp >= 0:  # D[:exp+1] '.' D[exp+1:nd]; zeros of the integer part are kept
            ints = exp + 1
            nd = np.maximum(nd, ints)
            d = (d & _KEEP_BELOW[nd]) | _FILL_FROM[nd]
            if ints == 8:
                first, second = d, np.full(len(d), _ALL_ONES)
            else:
                dot = np.where(nd > ints, _U64(ord(".")), _U64(FILL))
                first = (d & _KEEP_BELOW[ints]) | (dot << _U64(8 * ints)) | ((d >> _U64(8 * ints)) << _U64(8 * ints + 8))
                second = (d >> _U64(56)) | _FILL_FROM[1]
        else:  # '0.' '0' * (-exp - 1) D[:nd]
            d = (d & _KEEP_BELOW[nd]) | _FILL_FROM[nd]
            lead = 1 - exp
            first = _SMALL_PREFIX[exp] | (d << _U64(8 * lead))
            second = (d >> _U64(64 - 8 * lead)) | _FILL_FROM[lead]
        negative = v[rows] < 0
        lanes[rows, 0] = np.where(negative, (first << _U64(8)) | _U64(ord("-")), first)
        lanes[rows, 1] = np.where(negative, (second << _U64(8)) | (first >> _U64(56)), second)
    out = lanes.astype("<u8", copy=False).view(np.uint8).reshape(m, NUMBER_WIDTH)
    for i in np.flatnonzero(slow).tolist():
        text = ("%.8g" % v[i]).encode("ascii")
        out[i] = FILL
        out[i, :len(text)] = np.frombuffer(text, dtype=np.uint8)
    return out


def word_matrix(words: Sequence[str]) -> np.ndarray:
    """(V, W) uint8: each word's UTF-8 bytes, padded with FILL to the longest word's length W."""
    encoded = [w.encode("utf-8") for w in words]
    width = max([1, *map(len, encoded)])
    packed = b"".join(b + b"\xff" * (width - len(b)) for b in encoded)
    return np.frombuffer(packed, dtype=np.uint8).reshape(len(encoded), width)


def arpa_lines(words: np.ndarray, ids: np.ndarray, logprob: np.ndarray, backoff: np.ndarray | None) -> bytes:
    """``log10prob<TAB>w1 .. wn[<TAB>log10backoff]<NEWLINE>`` for a block of n-grams, as UTF-8 bytes.

    ``words`` comes from :func:`word_matrix`; ``backoff`` is None for the highest order (no column).
    """
    m, n = ids.shape
    width = words.shape[1]
    row = NUMBER_WIDTH + 1 + n * (width + 1) + (0 if backoff is None else NUMBER_WIDTH + 1)
    block = np.empty((m, row), dtype=np.uint8)
    block[:, :NUMBER_WIDTH] = format_g8(logprob)
    block[:, NUMBER_WIDTH] = ord("\t")
    word_slot = np.dtype((np.void, width))  # a whole word is one element: a gather copies it at once
    slots = words.view(word_slot)[:, 0]
    at = NUMBER_WIDTH + 1
    for j in range(n):
        block[:, at:at + width].view(word_slot)[:, 0] = slots[ids[:, j]]
        block[:, at + width] = ord(" ") if j < n - 1 else ord("\n" if backoff is None else "\t")
        at += width + 1
    if backoff is not None:
        # a backoff weight is a function of a few small integers (counts of counts of children), so a
        # block holds few distinct ones: format each once
        distinct, where = np.unique(backoff, return_inverse=True)
        block[:, at:at + NUMBER_WIDTH] = format_g8(distinct)[where]
        block[:, at + NUMBER_WIDTH] = ord("\n")
    return block[block != FILL].tobytes()
