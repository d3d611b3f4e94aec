"""Segment indexes take and return absolute offsets and store them relative to the segment's
base offset as u32, in Kafka's layout; the expected file bytes are packed in plain Python."""
import struct

from headwater.log.index import MAX_RELATIVE_OFFSET, OffsetIndex, TimeIndex

BASE = 5_000_000_000  # past 2**32: an absolute offset would not even fit an entry


def test_offset_index_translates_offsets_and_stores_them_relative(tmp_path):
    path = tmp_path / "x.index"
    entries = [(BASE + 10, 4096), (BASE + 25, 8200), (BASE + 90, 12_400)]
    index = OffsetIndex.create(path, BASE)
    for offset, position in entries:
        index.append(offset, position)
    index.flush()
    assert path.read_bytes() == b"".join(struct.pack(">II", offset - BASE, position) for offset, position in entries)

    loaded = OffsetIndex.load(path, BASE, segment_size=20_000)
    assert loaded.position_for(BASE + 9) == 0
    assert loaded.position_for(BASE + 10) == 4096
    assert loaded.position_for(BASE + 89) == 8200
    assert loaded.position_for(BASE + 1000) == 12_400
    assert loaded.last_position == 12_400
    assert loaded.last_entry_below(BASE + 90) == (BASE + 25, 8200)
    assert loaded.last_entry_below(BASE + 10) is None
    loaded.truncate_from(BASE + 25)
    assert path.read_bytes() == struct.pack(">II", 10, 4096)


def test_time_index_translates_offsets_and_stores_them_relative(tmp_path):
    path = tmp_path / "x.timeindex"
    entries = [(1_000, BASE + 3), (1_500, BASE + 40), (2_000, BASE + 41)]
    index = TimeIndex.create(path, BASE)
    for timestamp, offset in entries:
        index.append(timestamp, offset)
    index.flush()
    assert path.read_bytes() == b"".join(struct.pack(">qI", ts, offset - BASE) for ts, offset in entries)

    loaded = TimeIndex.load(path, BASE, segment_size=20_000)
    assert (loaded.max_timestamp, loaded.offset_of_max_timestamp) == (2_000, BASE + 41)
    assert loaded.offset_before(1_000) == BASE          # no entry below: the segment's start
    assert loaded.offset_before(1_200) == BASE + 3
    assert loaded.offset_before(5_000) == BASE + 41
    loaded.truncate_from(BASE + 40)
    assert path.read_bytes() == struct.pack(">qI", 1_000, 3)


def test_an_index_holds_offsets_up_to_u32_past_its_base(tmp_path):
    index = OffsetIndex.create(tmp_path / "x.index", BASE)
    assert index.can_hold(BASE + MAX_RELATIVE_OFFSET)
    assert not index.can_hold(BASE + MAX_RELATIVE_OFFSET + 1)
    assert MAX_RELATIVE_OFFSET == 2**32 - 1
