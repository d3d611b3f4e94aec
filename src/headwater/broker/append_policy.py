"""What a topic's configs ask of each append, past the log validator: records whose
timestamps lie outside ``message.timestamp.before.max.ms`` / ``after.max.ms`` are refused
(INVALID_TIMESTAMP, naming each record; as Kafka, not a record without a timestamp, -1), and
``compression.type`` other than ``producer`` recompresses batches to that codec, as Kafka's
broker does."""
from __future__ import annotations

from headwater.log.config import PRODUCER, LogConfig
from headwater.records import Compression, decode_records, iter_batches
from headwater.records.encoding import recompressed

NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP

CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


def timestamp_errors(buf, batches: list, config: LogConfig, now_ms: int) -> list[tuple[int, str]]:
    """(index in its batch, why) of each record whose CreateTime is out of the topic's bounds."""
    # As Kafka: the deprecated difference.max.ms stands in for whichever of the two is unset.
    difference = config.message_timestamp_difference_max_ms
    before = config.message_timestamp_before_max_ms if config.message_timestamp_before_max_ms is not None \
        else difference
    after = config.message_timestamp_after_max_ms if config.message_timestamp_after_max_ms is not None \
        else difference
    if config.log_append_time or (before is None and after is None):
        return []
    earliest = now_ms - before if before is not None else None
    latest = now_ms + after if after is not None else None
    errors = []
    for pos, _ in batches:
        for index, record in enumerate(decode_records(buf, pos)[1]):
            if record.timestamp == NO_TIMESTAMP:
                continue
            if earliest is not None and record.timestamp < earliest:
                errors.append((index, f"timestamp {record.timestamp} is more than message.timestamp.before.max.ms "
                                      f"{before} before the broker's time {now_ms}"))
            elif latest is not None and record.timestamp > latest:
                errors.append((index, f"timestamp {record.timestamp} is more than message.timestamp.after.max.ms "
                                      f"{after} after the broker's time {now_ms}"))
    return errors


def recompress(buf: bytearray, batches: list, compression_type: str) -> tuple[bytearray, list]:
    """The batches in the topic's codec (unchanged when it is ``producer`` or already theirs)."""
    if compression_type == PRODUCER:
        return buf, batches
    codec = CODECS[compression_type]
    if all(header.compression == codec for _, header in batches):
        return buf, batches
    out = bytearray()
    for pos, header in batches:
        out += buf[pos:pos + header.size] if header.compression == codec else recompressed(buf, pos, header, codec)
    return out, list(iter_batches(out, validate=False))
