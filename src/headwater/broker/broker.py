"""The broker's state: its logs, its producers, and who is waiting for data."""
from __future__ import annotations

import fcntl
import logging
import uuid
from pathlib import Path

from headwater.broker.config import BrokerConfig
from headwater.broker.groups.coordinator import GroupCoordinator
from headwater.broker.growth import GrowthSignals
from headwater.broker.producer_state import Duplicate, PartitionProducers, ProducerIds
from headwater.log import InvalidTopicError, Log, LogConfig, LogManager
from headwater.protocol.errors import ErrorCode
from headwater.records import NO_PRODUCER_ID, CorruptRecordError, iter_batches

log = logging.getLogger("headwater.broker")


class DataDirInUse(Exception):
    pass


class ProduceResult:
    __slots__ = ("error", "base_offset", "message")

    def __init__(self, error: ErrorCode, base_offset: int = -1, message: str | None = None):
        self.error, self.base_offset, self.message = error, base_offset, message


class Broker:
    def __init__(self, config: BrokerConfig, log_defaults: LogConfig | None = None):
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = self._lock_data_dir(config.data_dir)
        self.logs = LogManager(config.data_dir, log_defaults or LogConfig())
        self.cluster_id = self._load_cluster_id(config.data_dir)
        self.producer_ids = ProducerIds(config.data_dir)
        self.growth = GrowthSignals()
        self._producers: dict[tuple[str, int], PartitionProducers] = {}
        self.groups = GroupCoordinator(self)  # replays __consumer_offsets: groups and offsets are back

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
        except InvalidTopicError as exc:
            return ProduceResult(ErrorCode.INVALID_TOPIC_EXCEPTION, message=str(exc))
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
        first, _last = plog.append(buf)
        if idempotent:
            offset = first
            for _, header in batches:
                if header.producer_id != NO_PRODUCER_ID:
                    producers.appended(header, offset)
                offset += header.last_offset_delta + 1
        self.growth.notify(topic_name, partition)
        return ProduceResult(ErrorCode.NONE, first)

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
