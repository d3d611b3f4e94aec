"""The codecs' fast paths (python-lz4 and python-zstandard with a context per thread) against the
general path (cramjam, bounded) on the same input: the same bytes out, the same inputs refused,
a bomb refused without allocating past the limit; and zstd compressed to the same bytes."""
import random
import threading
import tracemalloc

import cramjam
import lz4.frame
import pytest
import zstandard

from headwater.records import Compression, InvalidRecordError, codecs

SKIPPABLE = b"\x50\x2a\x4d\x18\x00\x00\x00\x00"  # an empty zstd skippable frame


def frames(codec: Compression, raw: bytes) -> list[bytes]:
    """``raw`` compressed the ways producers do: with and without the size stated, with checksums."""
    if codec == Compression.ZSTD:
        return [bytes(cramjam.zstd.compress(raw)), zstandard.ZstdCompressor().compress(raw),
                zstandard.ZstdCompressor(write_content_size=False, write_checksum=True).compress(raw)]
    return [bytes(cramjam.lz4.compress(raw)), lz4.frame.compress(raw),
            lz4.frame.compress(raw, store_size=False, content_checksum=True, block_checksum=True)]


def variants(frame: bytes, rng: random.Random) -> list[bytes]:
    flipped = bytearray(frame)
    flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
    return [frame, frame + frame, frame[:rng.randrange(len(frame))], frame + b"x", SKIPPABLE + frame,
            frame + SKIPPABLE, bytes(flipped)]


def answer(codec: Compression, data: bytes, limit: int | None):
    try:
        return bytes(codecs.decompress(codec, data, limit))
    except InvalidRecordError:
        return InvalidRecordError


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_the_fast_path_answers_as_the_general_path(codec, monkeypatch):
    rng = random.Random(27)
    cases = []
    for _ in range(150):
        raw = rng.randbytes(rng.randrange(50)) * rng.randrange(1, 2000)  # up to ~100 KiB, some past 4x
        for frame in frames(codec, raw):
            for data in variants(frame, rng):
                for limit in {None, len(raw), max(0, len(raw) - 1), 1 << 16, 2 * len(raw) + 1}:
                    cases.append((data, limit))
    fast = [answer(codec, data, limit) for data, limit in cases]
    monkeypatch.setattr(codecs, "_AT_ONCE", {})  # the general path alone
    general = [answer(codec, data, limit) for data, limit in cases]
    assert fast == general
    assert general.count(InvalidRecordError) > len(cases) // 4  # refusals were compared too


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
@pytest.mark.parametrize("size", [0, 100, 1 << 10, 1 << 14, 1 << 20])
def test_the_fast_path_takes_what_producers_send(codec, size):
    raw = random.Random(size).randbytes(size // 8 + 1) * 8
    for frame in frames(codec, raw):
        out = codecs._AT_ONCE[codec](frame, 32 << 20)
        assert out is not None or size == 0 and codec == Compression.ZSTD  # a stated 0: the general path
        assert bytes(codecs.decompress(codec, frame, 32 << 20)) == raw


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
@pytest.mark.parametrize("stated", [True, False])
def test_a_bomb_is_refused_without_allocating_past_the_limit(codec, stated):
    zeros = bytes(64 << 20)
    if codec == Compression.ZSTD:
        bomb = zstandard.ZstdCompressor(write_content_size=stated).compress(zeros)
    else:
        bomb = lz4.frame.compress(zeros, store_size=stated)
    del zeros
    limit = 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRecordError, match=str(limit)):
            codecs.decompress(codec, bomb, limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * limit


def test_each_thread_has_its_own_contexts():
    # A codec context is not thread-safe: the event loop and the validator thread each get theirs.
    seen = []
    thread = threading.Thread(target=lambda: seen.append(codecs._contexts.zstd_in))
    thread.start()
    thread.join()
    assert seen[0] is not codecs._contexts.zstd_in


def test_concurrent_decompression_in_threads_is_exact():
    rng = random.Random(3)
    inputs = [(codec, rng.randbytes(200) * rng.randrange(1, 200)) for codec in (Compression.LZ4, Compression.ZSTD)
              for _ in range(8)]
    compressed = [(codec, raw, frames(codec, raw)[2]) for codec, raw in inputs]
    wrong = []

    def work():
        for _ in range(200):
            for codec, raw, frame in compressed:
                if bytes(codecs.decompress(codec, frame, 1 << 20)) != raw:
                    wrong.append(codec)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong


def test_zstd_compresses_small_bodies_to_the_bytes_cramjam_wrote():
    # What the broker stores (recompression, the cleaner's rewrite) must not change with the library.
    rng = random.Random(5)
    for _ in range(300):
        size = rng.choice([rng.randrange(300), rng.randrange(1 << 17), 1 << 17])
        unit = rng.randbytes(rng.randrange(1, 200))
        raw = rng.randbytes(size) if rng.random() < 0.3 else (unit * (size // len(unit) + 1))[:size]
        assert codecs.compress(Compression.ZSTD, raw) == bytes(cramjam.zstd.compress(raw))
    for size in (200_000, 300_000):  # past one block the two libraries' frames differ: cramjam's, as before
        raw = rng.randbytes(size // 10) * 10
        assert codecs.compress(Compression.ZSTD, raw) == bytes(cramjam.zstd.compress(raw))


def test_a_zstd_frame_stating_a_size_of_0_is_judged_by_the_general_path():
    # python-zstandard returns b"" for a stated 0 without decoding the blocks that follow.
    frame = zstandard.ZstdCompressor().compress(b"abc" * 20)
    assert frame[4] == 0x20  # single segment: the next byte is the stated size
    lying = frame[:5] + b"\x00" + frame[6:]
    with pytest.raises(InvalidRecordError):
        codecs.decompress(Compression.ZSTD, lying, 1 << 16)
