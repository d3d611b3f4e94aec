"""A request's one small compressed batch is validated on the event loop within a decompression
budget (the validator thread's hand-off costs a lone request more than the batch's validation),
and its answer is the validator thread's: the same batches accepted byte for byte, the same
refusals. What needs more than the budget, or is refused within it, goes to the thread, whose
answer with Kafka's bound stands."""
from __future__ import annotations

import asyncio

import pytest

from headwater.broker.appender import OFF_LOOP_BYTES, ProduceResult, Validated
from headwater.records import Compression, Record, encode_batch, layout
from headwater.testing import rebuilt_batch, zstd_bomb
from tests.support.appender_fixtures import appender  # noqa: F401  (the fixture)

T0 = 1_700_000_000_000
CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def one_record(codec: Compression) -> bytes:
    return encode_batch([Record(0, T0, None, b"x" * 100)], compression=codec)


def many_records(codec: Compression) -> bytes:
    return encode_batch([Record(i, T0 + i, b"k%d" % i, b"value %d" % i) for i in range(50)], compression=codec)


def over_the_budget(codec: Compression) -> bytes:
    """Valid, and well within Kafka's bound, but its records decompress past OFF_LOOP_BYTES."""
    return encode_batch([Record(0, T0, None, bytes(OFF_LOOP_BYTES))], compression=codec)


def corrupt(codec: Compression) -> bytes:
    good = one_record(codec)
    return rebuilt_batch(good, good[layout.HEADER_SIZE:-4] + b"\xff\xff\xff\xff")


def two_batches(codec: Compression) -> bytes:
    return one_record(codec) + one_record(codec)


CASES = {"one record": one_record, "many records": many_records, "over the budget": over_the_budget,
         "corrupt": corrupt, "two batches": two_batches}
ON_THE_LOOP = {"one record", "many records"}   # the others are answered by the thread


class CountingExecutor:
    """The validator thread's executor, counting the validations handed to it."""

    def __init__(self, executor):
        self.executor, self.handed = executor, 0

    def submit(self, *args, **kwargs):
        self.handed += 1
        return self.executor.submit(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.executor, name)


def answer(result: Validated | ProduceResult) -> tuple:
    if isinstance(result, ProduceResult):
        return "refused", result.error, result.message, result.record_errors
    return "valid", bytes(result.buf), [(pos, header) for pos, header in result.batches]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_the_loop_answers_as_the_validator_thread_does(appender, codec, case):  # noqa: F811
    appender.log_manager.create_topic("t", 1)
    topic, records = appender.log_manager.topics["t"], CASES[case](codec)
    appender._validator = counting = CountingExecutor(appender._validator)
    result = asyncio.run(appender.validate("t", 0, records))
    general = appender._validate(topic, records)   # what the validator thread runs
    assert answer(result) == answer(general if isinstance(general, ProduceResult) else Validated(topic, 0, *general))
    assert answer(result)[0] == ("refused" if case == "corrupt" else "valid")
    assert counting.handed == (0 if case in ON_THE_LOOP else 1)


def test_a_bomb_is_refused_by_the_thread_with_kafkas_bound(appender):  # noqa: F811
    appender.log_manager.create_topic("t", 1)
    appender._validator = counting = CountingExecutor(appender._validator)
    result = asyncio.run(appender.validate("t", 0, zstd_bomb(64 << 20)))
    assert isinstance(result, ProduceResult) and result.error.name == "INVALID_RECORD"
    assert counting.handed == 1


def test_a_batch_the_thread_accepts_past_the_budget_is_appended_whole(appender):  # noqa: F811
    appender.log_manager.create_topic("t", 1)
    records = over_the_budget(Compression.ZSTD)
    valid = asyncio.run(appender.validate("t", 0, records))
    assert isinstance(valid, Validated) and bytes(valid.buf) == records
    assert appender.append_valid(valid).base_offset == 0


def test_the_budget_never_raises_kafkas_bound(appender):  # noqa: F811
    # message.max.bytes 4 KiB: Kafka's bound (32 times it) is under the loop's budget
    appender.config.message_max_bytes = 4096
    appender.log_manager.create_topic("t", 1)
    topic, records = appender.log_manager.topics["t"], encode_batch([Record(0, T0, None, bytes(200_000))],
                                                                   compression=Compression.ZSTD)
    result, general = asyncio.run(appender.validate("t", 0, records)), appender._validate(topic, records)
    assert isinstance(general, ProduceResult) and general.error.name == "INVALID_RECORD"
    assert answer(result) == answer(general)
