"""Data directories stay byte-compatible: the same batches, appended the same way, are stored
as the same bytes. The digests below were computed by the code before records.py became the
records/ package; a change that alters a stored byte (a batch layout, a codec, the validator's
max-timestamp rewrite, the broker's recompression, LogAppendTime stamping, a marker, the
cleaner's rewrite) fails here and must be a deliberate format decision."""
import hashlib
from pathlib import Path

import pytest

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.log import Log, LogConfig
from headwater.log.cleaner import clean_log
from headwater.protocol.errors import ErrorCode
from headwater.records import Compression, Record, encode_batch
from headwater.records.control import encode_marker
from headwater.testing import rebuilt_batch

T0 = 1_700_000_000_000
PID = 4242


def inputs() -> list[bytes]:
    """What clients send: every codec, headers, null keys and values, an idempotent producer,
    a header max timestamp the records contradict, librdkafka's records without a timestamp."""
    out = []
    for codec in Compression:
        out.append(encode_batch([Record(i, T0 + (i * 37) % 11, b"key-%d" % (i % 4), None if i == 5 else b"v%d" % i * 9,
                                        [("h", b"x"), ("null", None)] if i % 3 == 0 else [])
                                 for i in range(12)], compression=codec))
        out.append(encode_batch([Record(i, T0 + i, b"k%d" % i, b"idempotent") for i in range(3)], compression=codec,
                                producer_id=PID, producer_epoch=0, base_sequence=3 * int(codec)))
        wrong = encode_batch([Record(0, T0 + 5, b"a", b"1"), Record(1, T0, b"b", b"2")], compression=codec)
        out.append(rebuilt_batch(wrong, max_timestamp=T0 + 9))
        no_stamps = encode_batch([Record(0, -1, b"a", b"1"), Record(1, -1, b"b", b"2")], compression=codec)
        out.append(rebuilt_batch(no_stamps, max_timestamp=0))
    return out


def digest(directory: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted(directory.glob("*.log")):
        sha.update(path.name.encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()[:32]


# compression.type of the topic -> digest of its partition's segments, from the pre-package code
PRODUCED = {
    "producer": "8b96097d4df5e48b0f191ecf72f7e1e9",
    "uncompressed": "1d852d8fddbcf3bbd4b46c57b63619a8",
    "gzip": "e3c5b0e16590117fc4955d6aa92856e1",
    "snappy": "f994ed8c81c63bed1ef369030ec777a3",
    "lz4": "13133a230b0170cb7ecf5e0c01f98e71",
    "zstd": "d526df993700b04ee1f0901324e2c610",
}
LOG_APPEND_TIME = "afc25ae4fefcdc86349c485f46bf2e08"
CLEANED = "7f0448fbfdd78bca1fe46b37853ca4c5"


@pytest.fixture
def broker(tmp_path):
    broker = Broker(BrokerConfig(data_dir=tmp_path / "data", flush="never"))
    yield broker
    broker.close()


def test_produced_batches_are_stored_as_before(broker):
    for compression_type in PRODUCED:
        broker.log_manager.create_topic(compression_type, 1, {"compression.type": compression_type})
        for batch in inputs():
            assert broker.appender.append(compression_type, 0, batch).error is ErrorCode.NONE
        plog = broker.log_manager.get_log(compression_type, 0)
        plog.append(bytearray(encode_marker(PID, 0, True, 7, T0 + 100)))
        plog.flush()
    assert {name: digest(broker.log_manager.get_log(name, 0).directory) for name in PRODUCED} == PRODUCED


def test_log_append_time_is_stamped_as_before(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"))
    for i, batch in enumerate(inputs()):
        log.append(bytearray(batch), now_ms=T0 + 1000 + i)
    log.flush()
    assert digest(log.directory) == LOG_APPEND_TIME
    log.close()


def test_the_cleaners_rewrite_is_stored_as_before(tmp_path):
    config = LogConfig(cleanup_policy="compact", segment_bytes=3000, min_cleanable_dirty_ratio=0.0,
                       min_compaction_lag_ms=0)
    log = Log.open(tmp_path / "c-0", config)
    for _ in range(3):
        for batch in inputs():
            log.append(bytearray(batch))
    log.roll()
    assert clean_log(log, now_ms=T0 + 1000).records_removed > 0
    assert digest(log.directory) == CLEANED
    log.close()
