"""The log validator (records.validator), in-process: every kind of bad batch is built from
encode_batch, mutated, and re-sealed with a valid CRC, so only the validator can refuse it."""
import collections
import random
import subprocess
import sys

import numpy as np
import pytest

from headwater.log import LogConfig
from headwater.protocol.errors import ErrorCode
from headwater.records import (Compression, CorruptRecordError, InvalidRecordError, Record, codecs, compiled_walk,
                               decode_records, encode_batch, layout, validator)
from headwater.records.validator import Appendable, AppendRules, Refusal, Refused
from headwater.records.varint import write_varint
from headwater.testing import rebuilt_batch as rebuilt

T0 = 1_700_000_000_000
LIMIT = 1 << 20
validator.load_compiled_walk()   # as the broker does as it starts: validate() below judges with it


def one_record(**kw) -> bytes:
    return encode_batch([Record(0, T0, b"k", b"v")], **kw)


def validate(buf: bytes, keys_required: bool = False):
    return validator.validate_produce(bytearray(buf), max_uncompressed_bytes=LIMIT, keys_required=keys_required)


# The records section of one_record(): length 8, attributes, ts delta 0, offset delta 0,
# key length 1 "k", value length 1 "v", no header (varints are zigzag: 1 -> 0x02, 8 -> 0x10).
GOOD_BODY = bytes([0x10, 0x00, 0x00, 0x00, 0x02]) + b"k" + bytes([0x02]) + b"v" + bytes([0x00])


def test_the_body_layout_the_mutations_start_from():
    assert one_record()[layout.HEADER_SIZE:] == GOOD_BODY
    assert validate(rebuilt(one_record(), GOOD_BODY))


@pytest.mark.parametrize("codec", list(Compression))
def test_valid_batches_pass_with_their_positions(codec):
    first = encode_batch([Record(i, T0 + (i * 37) % 11, b"k%d" % i, None if i == 3 else b"v" * i,
                                 [("h", b"x"), ("null", None)]) for i in range(50)], compression=codec)
    second = encode_batch([Record(0, T0 - 5, None, b"no key")], compression=codec)
    batches = validate(first + second)
    assert [(pos, h.records_count) for pos, h in batches] == [(0, 50), (len(first), 1)]


def test_a_bad_crc_is_corrupt_and_retriable_not_invalid():
    bad = bytearray(one_record())
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError) as refused:
        validate(bytes(bad))
    assert not isinstance(refused.value, InvalidRecordError)


def test_a_partial_batch_is_corrupt():
    with pytest.raises(CorruptRecordError, match="truncated batch header"):
        validate(one_record() + one_record()[:30])
    with pytest.raises(CorruptRecordError, match="does not fit"):
        validate(one_record() + one_record()[:-1])
    with pytest.raises(CorruptRecordError, match="partial batch"):
        validate(one_record() + one_record()[:5])


def test_control_batches_are_refused():
    with pytest.raises(InvalidRecordError, match="control"):
        validate(one_record(attributes=layout.ATTR_CONTROL))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs_are_refused(codec):
    with pytest.raises(InvalidRecordError, match=f"unknown compression codec {codec}"):
        validate(rebuilt(one_record(), attributes=codec))


@pytest.mark.parametrize("codec", [c for c in Compression if c])
def test_a_corrupt_compressed_payload_is_refused(codec):
    payload = bytearray(codecs.compress(codec, GOOD_BODY * 1))
    for i in range(len(payload) // 2, len(payload)):  # the back half: past any magic and frame header
        payload[i] ^= 0x5A
    with pytest.raises(InvalidRecordError):
        validate(rebuilt(one_record(), bytes(payload), attributes=int(codec)))


@pytest.mark.parametrize("codec", [c for c in Compression if c])
def test_a_decompression_bomb_is_refused_at_the_limit(codec):
    bomb = codecs.compress(codec, bytes(64 * LIMIT))  # 64 MiB of zeros in a few KiB (snappy: 3 MiB)
    with pytest.raises(InvalidRecordError, match=str(LIMIT)):
        validate(rebuilt(one_record(), bomb, attributes=int(codec)))


def test_decompression_within_the_limit_is_exact():
    body = GOOD_BODY
    for codec in (Compression.GZIP, Compression.LZ4, Compression.ZSTD):
        assert bytes(codecs.decompress(codec, codecs.compress(codec, body), limit=len(body))) == body
        with pytest.raises(InvalidRecordError):
            codecs.decompress(codec, codecs.compress(codec, body), limit=len(body) - 1)


@pytest.mark.parametrize("count, last_delta", [(2, 0), (1, 1), (0, 0), (2, 1)])
def test_records_count_and_last_offset_delta_must_agree_with_the_records(count, last_delta):
    with pytest.raises(InvalidRecordError):
        validate(rebuilt(one_record(), records_count=count, last_offset_delta=last_delta))


def test_offset_deltas_must_run_0_to_last_offset_delta():
    gap = encode_batch([Record(1, T0, b"a", b"1"), Record(1, T0, b"b", b"2")])  # deltas 1, 1; count 2
    with pytest.raises(InvalidRecordError, match="offset delta 1"):
        validate(gap)


@pytest.mark.parametrize("body, problem", [
    (bytes([0x7E]) + GOOD_BODY[1:], "length 63 does not fit"),                 # length past the batch
    (bytes([0x0E]) + GOOD_BODY[1:], "does not match its fields"),              # length one short
    (GOOD_BODY + b"\x00", "1 bytes after the last record"),                    # trailing bytes
    (GOOD_BODY[:4] + bytes([0x03]) + GOOD_BODY[5:], "key of length -2"),       # key length -2
    (GOOD_BODY[:-1] + bytes([0x01]), "-1 headers"),                             # header count -1
    (GOOD_BODY[:-3], "length"),                                                 # truncated record
])
def test_record_framing_is_checked(body, problem):
    with pytest.raises(InvalidRecordError, match=problem):
        validate(rebuilt(one_record(), body))


def test_varints_longer_than_kafka_allows_are_refused():
    # offset delta 0 written in 6 bytes (0x80 x5, 0x00): a 5-byte maximum for an int32 varint
    body = bytes([0x1A, 0x00, 0x00]) + b"\x80" * 5 + b"\x00" + GOOD_BODY[4:]
    with pytest.raises(InvalidRecordError, match="varint longer than 5 bytes"):
        validate(rebuilt(one_record(), body))


def test_a_varint_cut_by_the_end_of_the_batch_is_refused():
    with pytest.raises(InvalidRecordError, match="past the end"):
        validate(rebuilt(one_record(), bytes([0x04, 0x00, 0x80])))


def test_a_null_header_key_is_refused():
    body = bytes([0x14, 0x00, 0x00, 0x00, 0x02]) + b"k" + bytes([0x02]) + b"v" + bytes([0x02, 0x01, 0x00])
    with pytest.raises(InvalidRecordError, match="null key"):
        validate(rebuilt(one_record(), body))


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
@pytest.mark.parametrize("stamps, header_max", [
    ((T0 + 5, T0), T0 + 6),  # a header max the records do not reach
    ((-1, -1), 0),           # librdkafka's batch of records without a timestamp
])
def test_a_wrong_max_timestamp_is_rewritten_as_kafka_does(codec, stamps, header_max):
    batch = encode_batch([Record(i, t, b"k", b"v") for i, t in enumerate(stamps)], compression=codec)
    wrong = bytearray(rebuilt(batch, max_timestamp=header_max))
    [(pos, header)] = validator.validate_produce(wrong, max_uncompressed_bytes=LIMIT)
    assert header.max_timestamp == max(stamps) == layout.validate_batch(wrong).max_timestamp  # CRC re-sealed
    assert bytes(wrong) == batch  # nothing else changed
    assert [r.timestamp for r in decode_records(wrong)[1]] == list(stamps)


def test_a_right_max_timestamp_leaves_the_batch_as_it_came(monkeypatch):
    batch = bytearray(encode_batch([Record(0, T0 + 5, b"a", b"1"), Record(1, T0, b"b", b"2")]))
    monkeypatch.setattr(validator, "reseal_crc", None)  # the hot path: no second CRC pass
    assert validate(batch)[0][1].max_timestamp == T0 + 5


def test_compacted_topics_require_keys():
    batch = encode_batch([Record(0, T0, b"a", b"1"), Record(1, T0, None, b"2")])
    assert validate(batch)
    with pytest.raises(InvalidRecordError, match="record 1 is without a key"):
        validate(batch, keys_required=True)


def test_decode_records_refuses_garbage_with_invalid_record_not_index_error():
    garbage = rebuilt(one_record(), bytes([0x04, 0x00, 0x80]))
    with pytest.raises(InvalidRecordError):
        decode_records(garbage)
    with pytest.raises(InvalidRecordError):
        decode_records(rebuilt(one_record(), attributes=7))


def test_named_field_setters_match_the_header():
    out = bytearray(one_record())
    layout.set_partition_leader_epoch(out, 0, 9)
    layout.set_last_offset_delta(out, 0, 4)
    layout.set_max_timestamp(out, 0, T0 + 99)
    layout.reseal_crc(out)
    header = layout.validate_batch(out)
    assert (header.partition_leader_epoch, header.last_offset_delta, header.max_timestamp) == (9, 4, T0 + 99)


# --- the compiled walk (numba) and the Python walk: the same verdict on the same bytes

def varint(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


def one_record_body(payload: bytes) -> bytes:
    """A records section of one record: its length, then ``payload`` (attributes onwards)."""
    return varint(len(payload)) + payload


def compiled(body: bytes, count: int = 1, keys_required: bool = False) -> tuple[int, int]:
    return compiled_walk.records_max_delta(np.frombuffer(body, np.uint8), count, keys_required)


def walked(body: bytes, count: int = 1, keys_required: bool = False) -> int | str:
    """The Python walk's answer: the largest timestamp delta, or the refusal's words."""
    try:
        return validator._walk_records(body, count, keys_required)
    except InvalidRecordError as exc:
        return str(exc)


def agree(body: bytes, count: int = 1, keys_required: bool = False) -> tuple[int, int]:
    """Both walks' verdict on ``body``, asserting that they are the same one."""
    verdict, delta = compiled(body, count, keys_required)
    walk = walked(body, count, keys_required)
    if isinstance(walk, str):
        assert verdict == compiled_walk.INVALID, (body.hex(), walk)
    else:
        assert (verdict, delta) == (compiled_walk.VALID, walk), body.hex()
    return verdict, delta


CLIENT_RECORDS = {
    "keyed": [Record(i, T0 + i, b"key-%d" % i, b"x" * 100) for i in range(300)],
    "no keys": [Record(i, T0, None, b"v") for i in range(100)],
    "tombstones": [Record(i, T0, b"k%d" % i, None) for i in range(70)],
    "headers": [Record(i, T0, b"k", b"v", [("trace", b"t" * i), ("é", b""), ("null", None)]) for i in range(80)],
    "10,000 records": [Record(i, T0 + i * 1000, b"k", b"") for i in range(10_000)],
    "a 100 KiB value": [Record(0, T0, b"k", b"v" * (100 << 10))],
}


@pytest.mark.parametrize("name", list(CLIENT_RECORDS))
def test_the_compiled_walk_vouches_for_what_clients_send(name):
    body = encode_batch(CLIENT_RECORDS[name])[layout.HEADER_SIZE:]
    assert agree(body, len(CLIENT_RECORDS[name]))[0] == compiled_walk.VALID


def test_the_compiled_walk_takes_negative_timestamp_deltas():
    # Java producers base a batch on its first record's timestamp: later records may be earlier
    body = b"".join(one_record_body(b"\x00" + varint(delta) + varint(offset) + b"\x02k\x02v\x00")
                    for offset, delta in enumerate((0, -5, -100_000, 3)))
    assert agree(body, 4) == (compiled_walk.VALID, 3)
    assert agree(body[:-len(one_record_body(b"\x00\x06\x06\x02k\x02v\x00"))], 3) == (compiled_walk.VALID, 0)


def test_validate_produce_takes_the_compiled_walk_for_what_clients_send(monkeypatch):
    def no_walk(*args):
        raise AssertionError("walked")
    monkeypatch.setattr(validator, "_walk_records", no_walk)
    for codec in Compression:
        assert validate(b"".join(encode_batch(batch, compression=codec) for batch in CLIENT_RECORDS.values()))


@pytest.mark.parametrize("payload, problem", [
    (b"\x80\x00\x00\x00\x01\x01\x00", "-1 headers"),        # attributes 0x80 are one byte, not a varint
    (b"\x00\x00\x00\x03\x02v\x00", "key of length -2"),
    (b"\x00\x00\x00\x02k\x03\x00", "value of length -2"),
    (b"\x00\x00" + b"\x80" * 5 + b"\x00\x02k\x02v\x00", "longer than 5 bytes"),  # offset delta 0 in 6 bytes
    (b"\x00\x00\x02\x02k\x02v\x00", "offset delta 1"),
    (b"\x00\x00\x00\x01\x02v\x00", "without a key"),
    (b"\x00\x00\x00\x02k\x02v\x02\x01\x02v", "header with a null key"),
    (b"\x00\x00\x00\x02k\x02v\x02\x01", "header with a null key"),  # read on as if it were a length
    (b"\x00\x00\x00\x02k\x02v\x02\x02h\x05", "header value of length -3"),
    (b"\x00\x00\x00\x02k\x02v\x00\x00", "does not match its fields"),
    (b"\x00\x00\x00\x02k\x04v", "runs past the end"),
])
def test_the_compiled_walk_refuses_what_the_walk_refuses(payload, problem):
    body = one_record_body(payload)
    assert agree(body, 1, keys_required=True)[0] == compiled_walk.INVALID
    with pytest.raises(InvalidRecordError, match=problem):
        validate(rebuilt(one_record(), body), keys_required=True)


@pytest.mark.parametrize("payload", [
    b"\x81\x00\x00\x02k\x02v\x00",               # attributes 0x81: Kafka ignores them
    b"\x00\x00\x00\x02k\x02v\x02\x02\xff\x02x",  # a header key that is not UTF-8: bytes to the broker
    b"\x00\x00\x80\x00\x02k\x02v\x00",           # offset delta 0 in two bytes: longer than needed, within 5
])
def test_what_the_walk_accepts_the_compiled_walk_accepts(payload):
    body = one_record_body(payload)
    assert agree(body)[0] == compiled_walk.VALID
    assert validate(rebuilt(one_record(), body))


def test_a_timestamp_delta_of_ten_varint_bytes_is_left_to_the_walk():
    # 10 varint bytes carry up to 70 bits: int64 cannot hold what the walk reads, so the compiled
    # walk is unsure and the walk decides: it refuses one past 64 bits as the batch's latest...
    past_64_bits = one_record_body(b"\x00" + b"\xff" * 9 + b"\x03" + b"\x00\x02k\x02v\x00")
    assert compiled(past_64_bits)[0] == compiled_walk.UNSURE
    with pytest.raises(InvalidRecordError, match="does not fit 64 bits"):
        validate(rebuilt(one_record(), past_64_bits, base_timestamp=0, max_timestamp=-1 << 63))
    # ... and takes one within 64 bits: -2**62 - 1 needs 10 bytes, the batch's latest is another's
    wide = (one_record_body(b"\x00" + varint(-(1 << 62) - 1) + b"\x00\x02k\x02v\x00")
            + one_record_body(b"\x00\x00\x02\x02k\x02v\x00"))
    assert compiled(wide, 2)[0] == compiled_walk.UNSURE
    assert validate(rebuilt(one_record(), wide, records_count=2, last_offset_delta=1, max_timestamp=T0))


@pytest.mark.parametrize("key_length", [(1 << 63) - 40, (1 << 63) - 10])
def test_a_length_near_2_63_is_refused_not_raised(key_length):
    body = one_record_body(b"\x00\x00\x00" + varint(key_length) + b"\x02v\x00")
    assert compiled(body)[0] == compiled_walk.INVALID
    with pytest.raises(InvalidRecordError, match="longer than 5 bytes"):
        validate(rebuilt(one_record(), body))


def mutations(seed: int, n: int):
    """(records section, count, keys_required): ``n`` mutations of small valid batches."""
    rng = random.Random(seed)
    seeds = [(encode_batch(batch)[layout.HEADER_SIZE:], len(batch)) for batch in (
        [Record(0, T0, b"k", b"v")],
        [Record(0, T0, None, b"value"), Record(1, T0 + 70, b"key", None)],
        [Record(i, T0 - i, b"k%d" % i, b"v" * i, [("h", b"x"), ("n", None)]) for i in range(4)],
    )]
    for _ in range(n):
        seed, count = rng.choice(seeds)
        body = bytearray(seed)
        for _ in range(rng.randint(1, 2)):
            at = rng.randrange(len(body))
            kind = rng.randrange(3)
            if kind == 0:
                body[at] = rng.choice((0x00, 0x01, 0x02, 0x03, 0x7F, 0x80, 0x81, 0xFF, rng.randrange(256)))
            elif kind == 1:
                body.insert(at, rng.choice((0x00, 0x01, 0x80, 0xFF, rng.randrange(256))))
            else:
                del body[at]
        yield bytes(body), (count if rng.random() < 0.8 else rng.randint(0, 5)), rng.random() < 0.3


def test_the_compiled_walk_agrees_with_the_walk_on_thousands_of_mutations():
    verdicts = collections.Counter(agree(*mutation)[0] for mutation in mutations(10, 6000))
    assert verdicts[compiled_walk.VALID] > 300 and verdicts[compiled_walk.INVALID] > 3000, verdicts


def test_the_compiled_walk_is_not_loaded_with_the_validator():
    """numba is the broker's to load: a program that only reads a log's configs (the CLI) does not."""
    imported = subprocess.run([sys.executable, "-c", "import sys, headwater.cli.main, headwater.records.validator; "
                               "print(sorted(m for m in ('numba', 'headwater.records.compiled_walk') if m in sys.modules))"],
                              capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "[]"


def test_validate_answers_as_the_python_walk_alone_does(monkeypatch):
    """The whole validator, with and without the compiled walk, on the same mutated batches
    (a fifth of them with a bad CRC): the same batches appended, or the same refusal."""
    rng = random.Random(11)
    batches = []
    for body, count, _ in mutations(12, 1500):
        batch = bytearray(rebuilt(one_record(), body, records_count=count, last_offset_delta=count - 1))
        if rng.random() < 0.2:
            batch[-1] ^= 0x01
        batches.append(bytes(batch))
    rules = [RULES, AppendRules(max_request_bytes=LIMIT, max_batch_bytes=LIMIT, keys_required=True)]
    fast = [validator.validate(batch, rule, T0) for batch in batches for rule in rules]
    monkeypatch.setattr(compiled_walk, "records_max_delta", lambda *args: (compiled_walk.UNSURE, 0))
    general = [validator.validate(batch, rule, T0) for batch in batches for rule in rules]
    assert fast == general
    assert sum(isinstance(answer, Appendable) for answer in fast) > 100
    assert {answer.error for answer in fast if isinstance(answer, Refusal)} == {Refused.CORRUPT_MESSAGE,
                                                                                Refused.INVALID_RECORD}


# --- validate: the one entry, with a topic's rules ---------------------------------------------

RULES = AppendRules(max_request_bytes=LIMIT, max_batch_bytes=LIMIT)


def refusal(records: bytes | None, rules: AppendRules = RULES, now_ms: int = T0) -> Refusal:
    checked = validator.validate(records, rules, now_ms)
    assert isinstance(checked, Refusal), checked
    return checked


def test_every_refusal_is_a_kafka_error_code():
    assert {reason.name for reason in Refused} <= set(ErrorCode.__members__)


@pytest.mark.parametrize("records, rules, error, message", [
    (None, RULES, Refused.INVALID_RECORD, "no record batch"),
    (b"", RULES, Refused.INVALID_RECORD, "no record batch"),
    (one_record(), AppendRules(max_request_bytes=50, max_batch_bytes=LIMIT), Refused.MESSAGE_TOO_LARGE,
     "exceed message.max.bytes 50"),
    (one_record()[:-1] + b"\x01", RULES, Refused.CORRUPT_MESSAGE, "CRC-32C mismatch"),
    (one_record(attributes=layout.ATTR_CONTROL), RULES, Refused.INVALID_RECORD, "control"),
    (one_record(), AppendRules(max_request_bytes=LIMIT, max_batch_bytes=50), Refused.MESSAGE_TOO_LARGE,
     "exceeds the topic's max.message.bytes 50"),
], ids=["null", "empty", "request too large", "bad CRC", "control batch", "batch too large"])
def test_validate_refuses_with_the_error_kafka_answers(records, rules, error, message):
    refused = refusal(records, rules)
    assert refused.error is error and message in refused.message and refused.record_errors == []


def test_keyless_records_on_a_compacted_topic_are_named():
    batch = encode_batch([Record(i, T0, None if i in (1, 3) else b"k", b"v") for i in range(5)])
    refused = refusal(batch, AppendRules(max_request_bytes=LIMIT, max_batch_bytes=LIMIT, keys_required=True))
    assert refused.error is Refused.INVALID_RECORD
    assert [index for index, _ in refused.record_errors] == [1, 3]


def test_timestamps_out_of_the_topics_bounds_are_named_and_records_without_one_pass():
    stamps = [T0, T0 - 1001, -1, T0 + 501, T0 + 500, T0 - 1000]
    rules = AppendRules(max_request_bytes=LIMIT, max_batch_bytes=LIMIT, timestamp_before_max_ms=1000,
                        timestamp_after_max_ms=500)
    refused = refusal(encode_batch([Record(i, t, b"k", b"v") for i, t in enumerate(stamps)]), rules)
    expected = [i for i, t in enumerate(stamps) if t != -1 and not T0 - 1000 <= t <= T0 + 500]
    assert refused.error is Refused.INVALID_TIMESTAMP and [i for i, _ in refused.record_errors] == expected == [1, 3]
    assert refused.message == refused.record_errors[0][1]
    log_append_time = AppendRules(max_request_bytes=LIMIT, max_batch_bytes=LIMIT, log_append_time=True,
                                  timestamp_before_max_ms=1000, timestamp_after_max_ms=500)
    assert isinstance(validator.validate(encode_batch([Record(0, 0, b"k", b"v")]), log_append_time, T0), Appendable)


@pytest.mark.parametrize("log_append_time", [False, True], ids=["CreateTime topic", "LogAppendTime topic"])
def test_a_batch_stamped_log_append_time_by_its_producer_is_refused_on_any_topic(log_append_time):
    rules = AppendRules(max_request_bytes=LIMIT, max_batch_bytes=LIMIT, log_append_time=log_append_time)
    batch = encode_batch([Record(i, T0, b"k", b"v") for i in range(3)], attributes=layout.ATTR_LOG_APPEND_TIME)
    refused = refusal(batch, rules)
    assert refused.error is Refused.INVALID_TIMESTAMP and [i for i, _ in refused.record_errors] == [0, 1, 2]


@pytest.mark.parametrize("codec", list(Compression))
def test_batches_are_stored_in_the_topics_codec_with_their_producer_fields(codec):
    sent = [encode_batch([Record(i, T0 + i, b"k%d" % i, b"v" * i) for i in range(20)], compression=c, producer_id=7,
                         producer_epoch=1, base_sequence=20 * int(c)) for c in Compression]
    rules = AppendRules(max_request_bytes=LIMIT, max_batch_bytes=LIMIT, compression=codec)
    buf, batches = validator.validate(b"".join(sent), rules, T0)
    assert [header.compression for _, header in batches] == [codec] * len(sent)
    assert [header.base_sequence for _, header in batches] == [20 * int(c) for c in Compression]
    assert [decode_records(buf, pos)[1] for pos, _ in batches] == [decode_records(batch)[1] for batch in sent]


def test_a_producers_codec_is_kept_when_the_topic_says_producer():
    sent = encode_batch([Record(0, T0, b"k", b"v")], compression=Compression.LZ4)
    buf, batches = validator.validate(sent, RULES, T0)
    assert bytes(buf) == sent


@pytest.mark.parametrize("configs, before, after", [
    ({}, None, None),
    ({"message.timestamp.difference.max.ms": "100"}, 100, 100),  # the deprecated config stands in for both
    ({"message.timestamp.difference.max.ms": "100", "message.timestamp.before.max.ms": "7"}, 7, 100),
    ({"message.timestamp.after.max.ms": "9"}, None, 9),
])
def test_a_topics_config_gives_the_rules(configs, before, after):
    rules = LogConfig.from_topic_configs(configs, LogConfig()).append_rules(message_max_bytes=5000)
    assert (rules.timestamp_before_max_ms, rules.timestamp_after_max_ms) == (before, after)
    assert (rules.max_request_bytes, rules.max_batch_bytes) == (5000, LogConfig().max_message_bytes)


@pytest.mark.parametrize("compression_type, codec", [
    ("producer", None), ("uncompressed", Compression.NONE), ("gzip", Compression.GZIP),
    ("snappy", Compression.SNAPPY), ("lz4", Compression.LZ4), ("zstd", Compression.ZSTD),
])
def test_compression_type_names_the_codec(compression_type, codec):
    config = LogConfig.from_topic_configs({"compression.type": compression_type, "cleanup.policy": "compact"},
                                          LogConfig())
    rules = config.append_rules(message_max_bytes=LIMIT)
    assert (rules.compression, rules.keys_required) == (codec, True)
