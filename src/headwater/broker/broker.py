"""The broker's state: its logs, its producers, and who is waiting for data."""
from __future__ import annotations

import asyncio
import fcntl
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from headwater.broker.clock import Clock, LoopClock
from headwater.broker.config import BrokerConfig
from headwater.broker.dynamic_config import DynamicBrokerConfigs
from headwater.broker.fetch_sessions import FetchSessionCache
from headwater.broker.groups.consumer_group import ConsumerGroupCoordinator
from headwater.broker.groups.coordinator import GroupCoordinator
from headwater.broker.groups.store import GroupStore
from headwater.broker.group_commit import GroupCommit
from headwater.broker.growth import GrowthSignals
from headwater.broker.share import dead_letters
from headwater.broker.share.coordinator import ShareCoordinator
from headwater.broker.share.store import ShareStateStore
from headwater.broker.producer_state import Duplicate, PartitionProducers, ProducerIds
from headwater.broker.security.acls import AclStore, Authorizer
from headwater.broker.security.credentials import CredentialStore
from headwater.broker.quotas import ClientQuotas
from headwater.broker.txn.coordinator import TransactionCoordinator
from headwater.broker.txn.partitions import TxnPartitions
from headwater.broker.txn.store import TransactionStore
from headwater.log.layout import replace_atomically
from headwater.log import (InvalidTopicError, Log, LogConfig, LogManager, PartitionLimitError, Topic,
                           TopicExistsError)
from headwater.protocol.errors import ErrorCode
from headwater.records import BatchHeader, encode_batch
from headwater.records.layout import NO_PRODUCER_ID, is_compressed
from headwater.records.validator import Appendable, Refusal, validate

if TYPE_CHECKING:
    from headwater.broker.http.metrics import BrokerMetrics

log = logging.getLogger("headwater.broker")

# Uncompressed records at least this large are validated off the event loop too (measured:
# about 1.3 us per record, so this is a few milliseconds of work).
OFF_LOOP_BYTES = 256 << 10
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def is_internal_topic(name: str) -> bool:
    """Topics the broker writes itself; Kafka refuses clients' produce to them."""
    return name in INTERNAL_TOPICS


def _worth_a_thread(records: bytes | None) -> bool:
    return records is not None and (len(records) >= OFF_LOOP_BYTES or is_compressed(records))


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
    __slots__ = ("error", "base_offset", "message", "log_append_time", "record_errors")

    def __init__(self, error: ErrorCode, base_offset: int = -1, message: str | None = None,
                 log_append_time: int = -1, record_errors: list[tuple[int, str]] | None = None):
        self.error, self.base_offset, self.message = error, base_offset, message
        self.log_append_time = log_append_time  # the broker's timestamp on LogAppendTime topics, else -1
        self.record_errors = record_errors or []  # (index in the batch, why) of the invalid records (KIP-467)


class Broker:
    def __init__(self, config: BrokerConfig, log_defaults: LogConfig | None = None, clock: Clock | None = None):
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = self._lock_data_dir(config.data_dir)
        # the topic defaults the broker started with, under what AlterConfigs set on the broker resource
        self.static_log_defaults = log_defaults or LogConfig.from_topic_configs(config.topic_defaults, LogConfig())
        self.dynamic_configs = DynamicBrokerConfigs(config.data_dir)
        self.log_manager = LogManager(config.data_dir, self.dynamic_configs.topic_defaults(self.static_log_defaults),
                                      config.max_partitions)
        self.cluster_id = self._load_cluster_id(config.data_dir)
        self.producer_ids = ProducerIds(config.data_dir)
        self.credentials = CredentialStore(config.data_dir)  # SASL users, re-read when `headwater users` changes them
        self.authorizer = Authorizer(AclStore(config.data_dir), config.super_users)
        self.growth = GrowthSignals()
        self._producers: dict[tuple[str, int], PartitionProducers] = {}
        # One thread, not asyncio's pool: each thread that decompresses keeps a malloc arena of its
        # own sized by the largest batch it opened, so a pool of them multiplies resident memory.
        self._validator = ThreadPoolExecutor(max_workers=1, thread_name_prefix="produce-validator")
        self.group_commit = GroupCommit(Log.flush)  # fsyncs before acks=all answers, off the event loop
        self.metrics: BrokerMetrics | None = None  # set when the HTTP listener serves /metrics
        self.quotas = ClientQuotas(config.data_dir / "client-quotas.json")
        # Replays __consumer_offsets: groups and offsets are back.
        clock = clock or LoopClock()
        fsync_each_write = config.flush == "always"
        self.groups = GroupCoordinator(GroupStore(self.log_manager, self.append, fsync_each_write), clock,
                                       config.group_initial_rebalance_delay_ms)
        # KIP-848 consumer groups: membership in memory, offsets in __consumer_offsets through self.groups
        self.consumer_groups = ConsumerGroupCoordinator(
            clock, self._subscribable_topics,
            taken=lambda g: bool(self.groups.describe(g).members) or g in self.share.groups,
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            max_size=config.group_consumer_max_size)
        # Replays __transaction_state: decided transactions are finished, open ones aborted.
        self.txn_partitions = TxnPartitions(self.log_manager, self.growth, fsync_each_write)
        self.transactions = TransactionCoordinator(TransactionStore(self.log_manager, self.append, fsync_each_write),
                                                   clock, self.txn_partitions, self.producer_ids.allocate,
                                                   self.groups)
        self.share = ShareCoordinator(self.log_manager, clock, dead_letter=self._dead_letter,
                                      is_classic_group=lambda g: (self.groups.describe(g).state.value != "Dead"
                                                                 or self.consumer_groups.has_members(g)),
                                      wake=self.growth.notify,
                                      store=ShareStateStore(self.log_manager, self.append,
                                                            fsync_each_write=fsync_each_write))
        self.fetch_sessions = FetchSessionCache(clock, config.fetch_session_cache_slots,  # KIP-227, in memory
                                                max_size=config.max_partitions, signals=self.growth)

    def _subscribable_topics(self) -> dict[str, int]:
        """Topic -> partition count of the topics consumer groups may subscribe to (not the internal ones)."""
        return {name: len(t.partitions) for name, t in self.log_manager.topics.items() if name not in INTERNAL_TOPICS}

    def _dead_letter(self, group_id: str, topic: str, partition: int, offset: int, count: int, why: str) -> None:
        """Write a record the share group gave up on to the group's dead-letter topic."""
        config = self.share.group(group_id).config
        source = self.log_manager.get_log(topic, partition)
        letter = dead_letters.dead_letter(
            dead_letters.find_record(source, offset) if source is not None else None, group_id=group_id, topic=topic,
            partition=partition, offset=offset, delivery_count=count, message=why,
            copy_record=config.get("errors.deadletterqueue.copy.record.enable") == "true", now_ms=int(time.time() * 1000))
        target = self.topic_for_produce(config.dead_letter_topic)
        if target is None:
            log.warning("share group %r: dead-letter topic %r does not exist; %s-%d@%d is archived without a dead letter",
                        group_id, config.dead_letter_topic, topic, partition, offset)
            return
        result = self.append(target.name, partition % len(target.partitions), encode_batch([letter]))
        if result.error:
            log.warning("share group %r: cannot write dead letter for %s-%d@%d: %s", group_id, topic, partition,
                        offset, result.message or result.error.name)

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
        cluster_id = path.read_text().strip() if path.exists() else ""
        if not cluster_id:  # a new directory, or one whose first start found the disk full
            cluster_id = uuid.uuid4().hex[:22]
            replace_atomically(path, cluster_id)
        return cluster_id

    def topic_for_produce(self, name: str):
        """The topic, auto-created when the broker allows it; None if it does not exist."""
        topic = self.log_manager.topics.get(name)
        if topic is None and self.config.auto_create_topics:
            topic = self.log_manager.create_topic(name, self.config.num_partitions)
            log.info("auto-created topic %s with %d partition(s)", name, self.config.num_partitions)
        return topic

    async def produce(self, topic_name: str, partition: int, records: bytes | None,
                      admit: Callable[[list[BatchHeader]], ErrorCode] | None = None) -> ProduceResult:
        """A client's batches for one partition: never to an internal topic, validated as Kafka's
        log validator does, then appended. Compressed or large batches are validated on the validator
        thread (cramjam decompresses without the GIL), so the event loop keeps serving meanwhile.
        ``admit`` is asked last about every validated batch header, just before the append (the
        transaction may have ended meanwhile)."""
        if is_internal_topic(topic_name):
            return ProduceResult(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 message=f"cannot append to internal topic {topic_name!r}")
        target = self._target(topic_name, partition)
        if isinstance(target, ProduceResult):
            return target
        if _worth_a_thread(records):
            validated = await asyncio.get_running_loop().run_in_executor(self._validator, self._validate, target,
                                                                         records)
            if self.log_manager.topics.get(topic_name) is not target:  # deleted while we validated
                return ProduceResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        else:
            validated = self._validate(target, records)
        return self._append_valid(target, partition, validated, admit, flush_policy=False)

    def must_be_durable(self, plog: Log, acks_all: bool) -> bool:
        """Whether a produce to ``plog`` waits for its fsync (group commit) before it is answered:
        acks=all with ``--flush always``, or the topic's flush.messages / flush.ms due."""
        return (acks_all and self.config.flush == "always") or plog.flush_due()

    def append(self, topic_name: str, partition: int, records: bytes | None, flush_policy: bool = True) -> ProduceResult:
        """Validate and append one partition's batches (on the caller's thread)."""
        target = self._target(topic_name, partition)
        if isinstance(target, ProduceResult):
            return target
        return self._append_valid(target, partition, self._validate(target, records), flush_policy=flush_policy)

    def _target(self, topic_name: str, partition: int) -> Topic | ProduceResult:
        """The topic to append to, or the ProduceResult refusing the append."""
        try:
            topic = self.topic_for_produce(topic_name)
        except tuple(CREATION_ERRORS) as exc:
            return ProduceResult(creation_error(exc), message=str(exc))
        if topic is None or not 0 <= partition < len(topic.partitions):
            return ProduceResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return topic

    def _validate(self, topic: Topic, records: bytes | None) -> Appendable | ProduceResult:
        """The log validator's answer for an append of ``records`` to ``topic``, refusals as ProduceResults."""
        checked = validate(records, topic.config.append_rules(self.config.message_max_bytes), int(time.time() * 1000))
        if isinstance(checked, Refusal):
            return ProduceResult(ErrorCode[checked.error.name], message=checked.message,
                                 record_errors=checked.record_errors)
        return checked

    def _append_valid(self, topic: Topic, partition: int, validated: Appendable | ProduceResult,
                      admit: Callable[[list[BatchHeader]], ErrorCode] | None = None,
                      flush_policy: bool = True) -> ProduceResult:
        """Append batches that passed validation: ``admit``, producer sequence checks, then the log
        (which applies its flush policy itself unless ``flush_policy`` is off: group commit does)."""
        if isinstance(validated, ProduceResult):
            return validated
        buf, batches = validated
        refused = admit([h for _, h in batches]) if admit is not None else ErrorCode.NONE
        if refused:
            return ProduceResult(refused)
        plog = topic.partitions[partition]
        idempotent = [h for _, h in batches if h.producer_id != NO_PRODUCER_ID]
        if idempotent:
            producers = self._partition_producers(topic.name, partition, plog)
            try:
                for header in idempotent:
                    error = producers.check(header)
                    if error:
                        return ProduceResult(error)
            except Duplicate as dup:
                return ProduceResult(ErrorCode.NONE, dup.base_offset)
        now_ms = int(time.time() * 1000)
        try:
            first, last = plog.append(buf, now_ms, flush_policy)
        except OSError as exc:  # the log is left as it was: the producer may retry once there is room
            return ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR, message=f"cannot write to {plog.directory}: {exc}")
        if idempotent:
            offset = first
            for _, header in batches:
                if header.producer_id != NO_PRODUCER_ID:
                    producers.appended(header, offset)
                    if header.is_transactional:
                        self.txn_partitions.appended(topic.name, partition, plog, header, offset)
                offset += header.last_offset_delta + 1
        known = self._producers.get((topic.name, partition))
        if known is not None and known.segment != plog.active_segment.base_offset:
            self._snapshot_producers(known, plog)   # a roll: the state must outlive the segment it came from
        self.growth.notify(topic.name, partition)
        if self.metrics is not None:
            self.metrics.appended(topic.name, last - first + 1, len(buf))
        return ProduceResult(ErrorCode.NONE, first, log_append_time=now_ms if topic.config.log_append_time else -1)

    def producers(self, topic: str, partition: int) -> PartitionProducers | None:
        """The idempotent producers' state of a partition; None if there is no such partition."""
        plog = self.log_manager.get_log(topic, partition)
        return None if plog is None else self._partition_producers(topic, partition, plog)

    def _partition_producers(self, topic: str, partition: int, plog: Log) -> PartitionProducers:
        producers = self._producers.get((topic, partition))
        if producers is None:
            snapshot = PartitionProducers.load(plog.directory)
            if snapshot is not None and snapshot[1] <= plog.log_end_offset:
                producers, offset = snapshot[0], max(snapshot[1], plog.log_start_offset)
            else:  # none, or one the log was truncated below by crash recovery
                producers, offset = PartitionProducers(), plog.active_segment_base_offset
            self._producers[(topic, partition)] = producers
            self._replay_producers(producers, plog, offset)
            producers.segment = plog.active_segment.base_offset
        return producers

    @staticmethod
    def _snapshot_producers(producers: PartitionProducers, plog: Log) -> None:
        try:
            producers.save(plog.directory, plog.log_end_offset)
            producers.segment = plog.active_segment.base_offset
        except OSError as exc:  # the next start replays from the previous snapshot instead
            log.warning("cannot snapshot the producers of %s: %s", plog.directory.name, exc)

    @staticmethod
    def _replay_producers(producers: PartitionProducers, plog: Log, offset: int) -> None:
        """Rebuild sequence state from the batches after ``offset`` (the snapshot's, else the
        active segment's start), so a producer retrying across a broker restart is still recognised."""
        for _, _, header in plog.batches(offset):
            if header.producer_id != NO_PRODUCER_ID and not header.is_control:
                producers.appended(header, header.base_offset)

    def delete_topic(self, name: str) -> None:
        self.log_manager.delete_topic(name)
        self.growth.forget_topic(name)
        self.txn_partitions.forget_topic(name)
        if self.metrics is not None:
            self.metrics.forget_topic(name)
        self.share.forget_topic(name)
        for key in [k for k in self._producers if k[0] == name]:
            del self._producers[key]

    def close(self) -> None:
        self._validator.shutdown()
        self.group_commit.close()
        for (topic, partition), producers in self._producers.items():
            plog = self.log_manager.get_log(topic, partition)
            if plog is not None:
                self._snapshot_producers(producers, plog)
        self.log_manager.close()
        self._lock.close()
