"""The broker's state: its logs, its producers, and who is waiting for data."""
from __future__ import annotations

import fcntl
import logging
import time
import uuid
from pathlib import Path

from headwater.broker.clock import Clock, LoopClock
from headwater.broker.config import BrokerConfig
from headwater.broker.groups.coordinator import GroupCoordinator
from headwater.broker.groups.store import GroupStore
from headwater.broker.growth import GrowthSignals
from headwater.broker.producer_state import Duplicate, PartitionProducers, ProducerIds
from headwater.log import InvalidTopicError, Log, LogConfig, LogManager, PartitionLimitError, TopicExistsError
from headwater.protocol.errors import ErrorCode
from headwater.records import ATTR_CONTROL, NO_PRODUCER_ID, CorruptRecordError, decode_records, iter_batches

log = logging.getLogger("headwater.broker")


class DataDirInUse(Exception):
    pass


# What a topic creation (CreateTopics, or auto-creation on Metadata and Produce) may fail with.
CREATION_ERRORS: dict[type[Exception], ErrorCode] = {
    InvalidTopicError: ErrorCode.INVALID_TOPIC_EXCEPTION,
    TopicExistsError: ErrorCode.TOPIC_ALREADY_EXISTS,
    PartitionLimitError: ErrorCode.POLICY_VIOLATION,
    ValueError: ErrorCode.INVALID_CONFIG,
    OSError: ErrorCode.KAFKA_STORAGE_ERROR,   # a full disk, too many open files
}


def creation_error(exc: Exception) -> ErrorCode:
    return next(code for kind, code in CREATION_ERRORS.items() if isinstance(exc, kind))


class ProduceResult:
    __slots__ = ("error", "base_offset", "message", "log_append_time")

    def __init__(self, error: ErrorCode, base_offset: int = -1, message: str | None = None,
                 log_append_time: int = -1):
        self.error, self.base_offset, self.message = error, base_offset, message
        self.log_append_time = log_append_time  # the broker's timestamp on LogAppendTime topics, else -1


class Broker:
    def __init__(self, config: BrokerConfig, log_defaults: LogConfig | None = None, clock: Clock | None = None):
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = self._lock_data_dir(config.data_dir)
        self.logs = LogManager(config.data_dir,
                               log_defaults or LogConfig.from_topic_configs(config.topic_defaults, LogConfig()),
                               config.max_partitions)
        self.cluster_id = self._load_cluster_id(config.data_dir)
        self.producer_ids = ProducerIds(config.data_dir)
        self.growth = GrowthSignals()
        self._producers: dict[tuple[str, int], PartitionProducers] = {}
        # Replays __consumer_offsets: groups and offsets are back.
        self.groups = GroupCoordinator(GroupStore(self.logs, self.append, fsync_each_write=config.flush == "always"),
                                       clock or LoopClock())

    @staticmethod
    def _lock_data_dir(data_dir: Path):
        """Two brokers on one data directory would interleave their writes: refuse the second."""
        lock = open(data_dir / ".lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DataDirInUse(f"data directory {data_dir} is in use by another broker") from None
        return lock

    @staticmethod
    def _load_cluster_id(data_dir: Path) -> str:
        path = data_dir / "cluster-id"
        if not path.exists():
            path.write_text(uuid.uuid4().hex[:22])
        return path.read_text().strip()

    def topic_for_produce(self, name: str):
        """The topic, auto-created when the broker allows it; None if it does not exist."""
        topic = self.logs.topics.get(name)
        if topic is None and self.config.auto_create_topics:
            topic = self.logs.create_topic(name, self.config.num_partitions)
            log.info("auto-created topic %s with %d partition(s)", name, self.config.num_partitions)
        return topic

    def append(self, topic_name: str, partition: int, records: bytes | None) -> ProduceResult:
        """Validate and append one partition's batches; the unit of work is the batch, never the record."""
        try:
            topic = self.topic_for_produce(topic_name)
        except tuple(CREATION_ERRORS) as exc:
            return ProduceResult(creation_error(exc), message=str(exc))
        if topic is None or not 0 <= partition < len(topic.partitions):
            return ProduceResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if not records:
            return ProduceResult(ErrorCode.INVALID_RECORD, message="no record batch in the request")
        if len(records) > self.config.message_max_bytes:
            return ProduceResult(ErrorCode.MESSAGE_TOO_LARGE,
                                 message=f"{len(records)} bytes exceed message.max.bytes {self.config.message_max_bytes}")
        buf = bytearray(records)
        try:
            batches = list(iter_batches(buf))
        except CorruptRecordError as exc:
            return ProduceResult(ErrorCode.CORRUPT_MESSAGE, message=str(exc))
        if not batches or sum(h.size for _, h in batches) != len(buf):
            return ProduceResult(ErrorCode.CORRUPT_MESSAGE, message="records end in a partial batch")
        refused = self._topic_rules(topic, partition, buf, batches)
        if refused:
            return refused
        plog = topic.partitions[partition]
        idempotent = [h for _, h in batches if h.producer_id != NO_PRODUCER_ID]
        if idempotent:
            producers = self._partition_producers(topic_name, partition, plog)
            try:
                for header in idempotent:
                    error = producers.check(header)
                    if error:
                        return ProduceResult(error)
            except Duplicate as dup:
                return ProduceResult(ErrorCode.NONE, dup.base_offset)
        now_ms = int(time.time() * 1000)
        try:
            first, _last = plog.append(buf, now_ms)
        except OSError as exc:  # the log is left as it was: the producer may retry once there is room
            return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR, message=f"cannot write to {plog.directory}: {exc}")
        if idempotent:
            offset = first
            for _, header in batches:
                if header.producer_id != NO_PRODUCER_ID:
                    producers.appended(header, offset)
                offset += header.last_offset_delta + 1
        self.growth.notify(topic_name, partition)
        return ProduceResult(ErrorCode.NONE, first, log_append_time=now_ms if topic.config.log_append_time else -1)

    @staticmethod
    def _topic_rules(topic, partition: int, buf: bytearray, batches) -> ProduceResult | None:
        """The topic's own limits: max.message.bytes per batch; keys on compacted topics (which
        is the one case where the broker opens batches: the cleaner needs a key per record)."""
        limit = topic.config.max_message_bytes
        for _, header in batches:
            if header.size > limit:
                return ProduceResult(ErrorCode.MESSAGE_TOO_LARGE, message=f"a batch of {header.size} bytes exceeds "
                                     f"max.message.bytes {limit} of topic {topic.name!r}")
        if not topic.config.compact:
            return None
        for pos, header in batches:
            if header.attributes & ATTR_CONTROL:
                continue
            try:
                _, records = decode_records(buf, pos)
            except Exception as exc:  # a codec's own error on a bad compressed body
                return ProduceResult(ErrorCode.CORRUPT_MESSAGE, message=f"cannot decode a batch: {exc}")
            if any(r.key is None for r in records):
                return ProduceResult(ErrorCode.INVALID_RECORD, message=f"compacted topic {topic.name!r} "
                                     f"(cleanup.policy=compact) refuses records without a key, partition {partition}")
        return None

    def _partition_producers(self, topic: str, partition: int, plog: Log) -> PartitionProducers:
        producers = self._producers.get((topic, partition))
        if producers is None:
            producers = self._producers[(topic, partition)] = PartitionProducers()
            self._replay_producers(producers, plog)
        return producers

    @staticmethod
    def _replay_producers(producers: PartitionProducers, plog: Log) -> None:
        """Rebuild sequence state from the batches of the active segment, so a producer
        retrying across a broker restart is still recognised."""
        offset = plog.active_segment_base_offset
        while offset < plog.log_end_offset:
            chunk = plog.read(offset, 1 << 20)
            if not chunk:
                break
            for _, header in iter_batches(chunk, validate=False):
                if header.producer_id != NO_PRODUCER_ID and header.last_offset >= offset:
                    producers.appended(header, header.base_offset)
                offset = header.last_offset + 1

    def delete_topic(self, name: str) -> None:
        self.logs.delete_topic(name)
        self.growth.forget_topic(name)
        for key in [k for k in self._producers if k[0] == name]:
            del self._producers[key]

    def close(self) -> None:
        self.logs.close()
        self._lock.close()
