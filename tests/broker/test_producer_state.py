"""Idempotent producer state, in-process: sequence numbers per (producer id, partition), the last
five batches for retries, epochs, and producer ids that survive restarts.

Batch headers come from kafka-python's DefaultRecordBatchBuilder (an independent encoder), as
a client would send them; the expected answers are Kafka's rules written out in plain Python.
"""
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from headwater.broker.producer_state import ID_BLOCK, Duplicate, PartitionProducers, ProducerIds
from headwater.protocol.errors import ErrorCode
from headwater.records import BatchHeader, Record, encode_batch, read_header

from tests.support.parts import close_appender, open_appender

E = ErrorCode
PID = 7
MAX_SEQUENCE = 2**31 - 1
REMEMBERED = 5  # batches per producer and partition, as many as librdkafka and the Java client keep in flight


def batch(first_sequence: int, count: int = 1, epoch: int = 0, pid: int = PID) -> BatchHeader:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                        producer_epoch=epoch, base_sequence=first_sequence, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=0, key=None, value=b"v%d" % i, headers=[])
    return read_header(builder.build())


def append(producers: PartitionProducers, header: BatchHeader, base_offset: int) -> None:
    """What Appender.append does with a batch the state accepted: write it, then record where it went."""
    assert producers.check(header) is E.NONE
    producers.appended(header, base_offset)


@pytest.fixture
def producers():
    return PartitionProducers()


def test_a_new_producer_starts_at_sequence_zero_and_continues_in_order(producers):
    assert producers.check(batch(1)) is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    offset = 0
    for first, count in [(0, 3), (3, 1), (4, 10)]:
        append(producers, batch(first, count), offset)
        offset += count
    assert producers.check(batch(14, 2)) is E.NONE
    assert producers.check(batch(15)) is E.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps the last batch
    assert producers.check(batch(16)) is E.OUT_OF_ORDER_SEQUENCE_NUMBER  # a gap: batch 14 never arrived


def test_a_retry_of_any_of_the_last_five_batches_is_answered_with_its_original_base_offset(producers):
    appended = []  # (header, base offset), in plain Python: what the log holds
    offset, sequence = 100, 0
    for count in [2, 1, 4, 3, 1, 5, 2]:
        header = batch(sequence, count)
        append(producers, header, offset)
        appended.append((header, offset))
        offset, sequence = offset + count, sequence + count
    for header, base_offset in appended[-REMEMBERED:]:
        with pytest.raises(Duplicate) as dup:
            producers.check(header)
        assert dup.value.base_offset == base_offset
    for header, _ in appended[:-REMEMBERED]:  # forgotten: no longer recognisable as a retry
        assert producers.check(header) is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert producers.check(batch(sequence)) is E.NONE  # the retries changed nothing


def test_a_retry_must_match_a_whole_batch(producers):
    append(producers, batch(0, 4), 0)
    assert producers.check(batch(0, 2)) is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert producers.check(batch(2, 2)) is E.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_an_older_epoch_is_fenced_and_a_newer_one_starts_over_at_zero(producers):
    append(producers, batch(0, 5, epoch=1), 0)
    assert producers.check(batch(5, epoch=0)) is E.INVALID_PRODUCER_EPOCH
    assert producers.check(batch(0, 5, epoch=0)) is E.INVALID_PRODUCER_EPOCH  # not even as a retry
    assert producers.check(batch(5, epoch=2)) is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    append(producers, batch(0, 2, epoch=2), 5)
    assert producers.check(batch(5, epoch=1)) is E.INVALID_PRODUCER_EPOCH
    assert producers.check(batch(0, 5, epoch=1)) is E.INVALID_PRODUCER_EPOCH  # the old epoch's batches are gone
    with pytest.raises(Duplicate) as dup:
        producers.check(batch(0, 2, epoch=2))
    assert dup.value.base_offset == 5
    assert producers.check(batch(2, epoch=2)) is E.NONE


def test_producers_are_independent(producers):
    append(producers, batch(0, 3, pid=1), 0)
    append(producers, batch(0, 1, pid=2), 3)
    assert producers.check(batch(3, pid=1)) is E.NONE
    assert producers.check(batch(1, pid=2)) is E.NONE
    with pytest.raises(Duplicate) as dup:
        producers.check(batch(0, 1, pid=2))
    assert dup.value.base_offset == 3


def test_the_sequence_wraps_to_zero_after_two_to_the_31_minus_one(producers):
    producers.appended(batch(MAX_SEQUENCE - 4, count=3), 0)  # where a long-lived producer gets, without 2**31 appends
    ends_at_max = batch(MAX_SEQUENCE - 1, count=2)
    assert ends_at_max.last_sequence == MAX_SEQUENCE
    append(producers, ends_at_max, 3)
    assert producers.check(batch(MAX_SEQUENCE)) is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert producers.check(batch(1)) is E.OUT_OF_ORDER_SEQUENCE_NUMBER
    append(producers, batch(0, count=2), 5)
    assert producers.check(batch(2)) is E.NONE
    with pytest.raises(Duplicate) as dup:
        producers.check(ends_at_max)
    assert dup.value.base_offset == 3


def test_a_batch_may_wrap_the_sequence_inside_itself(producers):
    producers.appended(batch(MAX_SEQUENCE - 9, count=8), 0)
    straddling = batch(MAX_SEQUENCE - 1, count=4)  # sequences 2**31-2, 2**31-1, 0, 1
    assert straddling.last_sequence == 1
    append(producers, straddling, 8)
    assert producers.check(batch(2)) is E.NONE
    with pytest.raises(Duplicate) as dup:
        producers.check(batch(MAX_SEQUENCE - 1, count=4))
    assert dup.value.base_offset == 8


def test_producer_ids_are_unique_across_restarts(tmp_path):
    first = ProducerIds(tmp_path)
    handed_out = [first.allocate() for _ in range(3)]
    assert handed_out == [0, 1, 2]
    second = ProducerIds(tmp_path)  # a restart: the rest of the reserved block is never reused
    assert second.allocate() == ID_BLOCK
    handed_out += [second.allocate() for _ in range(ID_BLOCK + 5)]
    assert len(set(handed_out)) == len(handed_out)
    assert ProducerIds(tmp_path).allocate() == 3 * ID_BLOCK


def test_an_idle_producer_that_outlived_its_segment_is_known_after_a_restart(tmp_path):
    def idempotent(first_sequence: int, count: int) -> bytes:
        return encode_batch([Record(i, 0, None, b"v") for i in range(count)], producer_id=PID, producer_epoch=0,
                            base_sequence=first_sequence)

    appender = open_appender(tmp_path / "data")
    appender.log_manager.create_topic("t", 1)
    first = appender.append("t", 0, idempotent(0, 3))
    appender.log_manager.get_log("t", 0).roll()            # the producer's batches are no longer in the active segment
    appender.append("t", 0, encode_batch([Record(0, 0, None, b"someone else")]))
    close_appender(appender)

    appender = open_appender(tmp_path / "data")
    try:
        retry = appender.append("t", 0, idempotent(0, 3))     # a retry across the restart: its original offset
        assert (retry.error, retry.base_offset) == (E.NONE, first.base_offset)
        assert appender.append("t", 0, idempotent(3, 1)).error is E.NONE    # the sequence goes on
        assert appender.log_manager.get_log("t", 0).log_end_offset == 5
    finally:
        close_appender(appender)


def test_the_snapshot_taken_at_a_roll_survives_a_crash(tmp_path):
    appender = open_appender(tmp_path / "data")
    appender.log_manager.create_topic("t", 1, {"segment.bytes": "1024"})
    batch = encode_batch([Record(0, 0, None, b"v")], producer_id=PID, producer_epoch=0, base_sequence=0)
    first = appender.append("t", 0, batch)
    for _ in range(40):   # someone else's records roll the segment several times
        appender.append("t", 0, encode_batch([Record(0, 0, None, b"x" * 100)]))
    plog = appender.log_manager.get_log("t", 0)
    assert plog.active_segment.base_offset > first.base_offset
    plog.flush()
    # a crash: no close(), no shutdown snapshot
    appender = open_appender(tmp_path / "data")
    try:
        retry = appender.append("t", 0, batch)
        assert (retry.error, retry.base_offset) == (E.NONE, first.base_offset)
    finally:
        close_appender(appender)
