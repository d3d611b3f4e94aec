"""The log validator's walk over a batch's records, compiled (numba).

``records_max_delta`` answers as ``validator._walk_records`` does, step for step (the same
varint limits, the same field checks, in the same order), without a Python object per record:
the validator's per-record cost was most of the broker's CPU under a saturating producer. It
only judges; the Python walk still words every refusal, so a batch it calls INVALID is walked
again. It runs without the GIL (``nogil``), so the validator thread does not hold up the loop.

Loading its machine code takes a process about 0.3 s (numba's cache; 2.5 s to compile it
afresh): the broker ``load``s it as it starts, so that no produce request waits for it. Loaded
on a thread while the broker served, it cost a saturating producer more than it saved in the
broker's first second (docs/performance.md, ninth session). numba and LLVM add about 50 MiB of
private memory to the process (and 75 MiB of library pages, shared).
"""
from __future__ import annotations

import numba
import numpy as np

# What records_max_delta says of a records section: VALID (with the largest timestamp delta),
# INVALID (the walk refuses it), or UNSURE: a timestamp delta of 10 varint bytes, whose up to 70
# bits the walk keeps as a Python int and int64 cannot (it is for the walk to decide).
VALID, INVALID, UNSURE = 0, 1, 2
_INT32_VARINT, _INT64_VARINT = 5, 10   # varint.VARINT_MAX_BYTES, VARLONG_MAX_BYTES
_PAST = -1   # the position a varint read answers when it runs past the end or its byte limit
_TOO_WIDE = -2   # ... when it is a 10-byte varint (UNSURE)


@numba.njit(cache=True, nogil=True)
def _varint(body, p, max_bytes):
    """``varint.read_varint``: (value, next position); the position is _PAST where that raises
    (past the end of ``body``, more than ``max_bytes`` bytes) and _TOO_WIDE for a 10-byte varint."""
    end, raw, shift = len(body), np.int64(0), 0
    while True:
        if p >= end:
            return np.int64(0), _PAST
        b = np.int64(body[p])
        p += 1
        raw |= (b & 0x7F) << shift   # at most 9 bytes get here: 63 bits, a non-negative int64
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), p
        shift += 7
        if shift >= 7 * max_bytes:
            return np.int64(0), _PAST
        if shift == 63:
            return np.int64(0), _TOO_WIDE


@numba.njit(cache=True, nogil=True)
def _skip(p, length):
    """``validator._skip_field``: the position past a field of ``length`` (-1: null), or _PAST."""
    if length < -1:
        return _PAST
    return p + length if length > 0 else p


@numba.njit(cache=True, nogil=True)
def records_max_delta(body, count, keys_required):
    """(VALID, the largest timestamp delta) for ``count`` well-formed records in ``body`` (a uint8
    array), else (INVALID or UNSURE, 0): the Python walk's verdict on the same bytes."""
    p, end, max_delta = 0, len(body), np.int64(0)
    for index in range(count):
        length, p = _varint(body, p, _INT32_VARINT)
        if p < 0 or length < 1 or p + length > end:
            return INVALID, np.int64(0)
        record_end = p + length
        ts_delta, p = _varint(body, p + 1, _INT64_VARINT)   # +1: the record attributes, unused
        if p == _TOO_WIDE:
            return UNSURE, np.int64(0)
        if p < 0:
            return INVALID, np.int64(0)
        off_delta, p = _varint(body, p, _INT32_VARINT)
        if p < 0 or off_delta != index:
            return INVALID, np.int64(0)
        key_length, p = _varint(body, p, _INT32_VARINT)
        if p < 0 or (key_length < 0 and keys_required):
            return INVALID, np.int64(0)
        p = _skip(p, key_length)
        if p < 0:
            return INVALID, np.int64(0)
        value_length, p = _varint(body, p, _INT32_VARINT)
        if p < 0:
            return INVALID, np.int64(0)
        p = _skip(p, value_length)
        if p < 0:
            return INVALID, np.int64(0)
        n_headers, p = _varint(body, p, _INT32_VARINT)
        if p < 0 or n_headers < 0:
            return INVALID, np.int64(0)
        for _ in range(n_headers):
            hkey_length, p = _varint(body, p, _INT32_VARINT)
            if p < 0 or hkey_length < 0:
                return INVALID, np.int64(0)
            hvalue_length, p = _varint(body, p + hkey_length, _INT32_VARINT)
            if p < 0:
                return INVALID, np.int64(0)
            p = _skip(p, hvalue_length)
            if p < 0:
                return INVALID, np.int64(0)
        if p != record_end:
            return INVALID, np.int64(0)
        if index == 0 or ts_delta > max_delta:
            max_delta = ts_delta
    if p != end or count < 1:
        return INVALID, np.int64(0)
    return VALID, max_delta


def load() -> None:
    """Load (or compile) the machine code: for records in a client's buffer (writable) and for
    decompressed ones (bytes, read-only)."""
    for body in (bytearray(_ONE_RECORD), _ONE_RECORD):
        records_max_delta(np.frombuffer(body, np.uint8), 1, False)


_ONE_RECORD = b"\x10\x00\x00\x00\x02k\x02v\x00"   # key "k", value "v"
