"""The append path, validation to log, for every writer: clients' Produce, the coordinators'
internal topics, dead letters, UDP ingest and the REST API (Kafka's ``ReplicaManager.appendRecords``).

A client's batches are validated as Kafka's log validator does (large ones, and compressed ones
that decompress past 256 KiB, on the validator thread, so the event loop keeps serving meanwhile);
the idempotent producer's sequence is checked; ``log.Log.append`` stamps the offsets;
transactional batches open their transaction in the partition (``txn.partitions``); fetches
waiting on the partition are woken and the broker's counters told. Durability for acks=all is
the group commit's (``fsync_rounds``).
"""
from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from headwater.broker.config import BrokerConfig
from headwater.broker.fsync_rounds import GroupCommit
from headwater.broker.wakeups import GrowthSignals
from headwater.broker.producer_state import Duplicate, PartitionProducers
from headwater.broker.stats import BrokerStats
from headwater.broker.txn.partitions import TxnPartitions
from headwater.log import InvalidTopicError, Log, LogManager, PartitionLimitError, Topic, TopicExistsError
from headwater.protocol.errors import ErrorCode
from headwater.records import BatchHeader
from headwater.records.layout import NO_PRODUCER_ID, is_compressed, is_one_batch
from headwater.records.validator import Refusal, load_compiled_walk, validate, validate_own

logger = logging.getLogger("headwater.broker")

# Uncompressed records at least this large are validated off the event loop too. Measured when
# the records' walk was Python (1.3 us a record: milliseconds of work); compiled, it is about 25 ns
# a 100-byte record with the CRC, yet validating up to 8 MiB on the loop saved no CPU beyond the
# noise (docs/performance.md, ninth session), so the bound stayed.
OFF_LOOP_BYTES = 256 << 10
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def is_internal_topic(name: str) -> bool:
    """Topics the broker writes itself; Kafka refuses clients' produce to them."""
    return name in INTERNAL_TOPICS


def _worth_a_thread(records: bytes | None) -> bool:
    return records is not None and (len(records) >= OFF_LOOP_BYTES or is_compressed(records))


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


# A writer's append (topic, partition, record batches): what the coordinators' stores, dead
# letters and the ingest listeners are given, so they need no more of the broker than this.
Append = Callable[[str, int, bytes], ProduceResult]


@dataclass
class Validated:
    """One partition's batches that passed validation, not yet appended."""
    topic: Topic
    partition: int
    buf: bytearray
    batches: list[tuple[int, BatchHeader]]   # (position in buf, header)
    # the time the append stamps: on the loop also what the validator checked against; off it, read
    # again once validated, so that a partition's LogAppendTimes never go back
    now_ms: int


class Appender:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, txn_partitions: TxnPartitions,
                 wakeups: GrowthSignals, stats: BrokerStats):
        self.config, self.log_manager, self.txn_partitions = config, log_manager, txn_partitions
        self.wakeups, self.stats = wakeups, stats
        self._producers: dict[tuple[str, int], PartitionProducers] = {}
        # One thread, not asyncio's pool: each thread that decompresses keeps a malloc arena of its
        # own sized by the largest batch it opened, so a pool of them multiplies resident memory.
        self._validator = ThreadPoolExecutor(max_workers=1, thread_name_prefix="produce-validator")
        load_compiled_walk()   # now, rather than on the first produce request
        self.fsync_rounds = GroupCommit(Log.flush)  # fsyncs before acks=all answers, off the event loop

    def topic_for_produce(self, name: str):
        """The topic, auto-created when the broker allows it; None if it does not exist."""
        topic = self.log_manager.topics.get(name)
        if topic is None and self.config.auto_create_topics:
            topic = self.log_manager.create_topic(name, self.config.num_partitions)
            logger.info("auto-created topic %s with %d partition(s)", name, self.config.num_partitions)
        return topic

    async def validate(self, topic_name: str, partition: int, records: bytes | None) -> Validated | ProduceResult:
        """A client's batches for one partition: never to an internal topic, validated as Kafka's
        log validator does. Large batches, and compressed ones that decompress past 256 KiB, are
        validated on the validator thread (cramjam decompresses without the GIL), so the event
        loop keeps serving meanwhile (``_validate_on_loop``). The caller appends them with
        ``append_valid``, with no await in between (its checks on the batch headers then see the
        state the append will)."""
        if topic_name in INTERNAL_TOPICS:   # is_internal_topic, without a call for every request
            return ProduceResult(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                 message=f"cannot append to internal topic {topic_name!r}")
        target = self._target(topic_name, partition)
        if isinstance(target, ProduceResult):
            return target
        validated = self._validate_on_loop(target, records)
        if validated is None:
            validated = await asyncio.get_running_loop().run_in_executor(self._validator, self._validate, target,
                                                                         records)
            if self.log_manager.topics.get(topic_name) is not target:  # deleted while we validated
                return ProduceResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if not isinstance(validated, ProduceResult):   # stamped when appended, not when validated, so a
                validated = (*validated[:2], int(time.time() * 1000))   # partition's LogAppendTimes never go back
        return validated if isinstance(validated, ProduceResult) else Validated(target, partition, *validated)

    def _validate_on_loop(self, topic: Topic,
                          records: bytes | None) -> tuple[bytearray, list, int] | ProduceResult | None:
        """``_validate`` on the event loop, or None where it belongs on the validator thread. Small
        uncompressed records are validated here. So is a request's one small compressed batch whose
        records decompress within OFF_LOOP_BYTES, the size uncompressed records are validated here
        up to: the thread's hand-off costs a lone one-record request 50-120 us of broker CPU, the
        decompression a few. One refused within that budget (over it, or invalid) goes to the thread,
        whose answer with Kafka's bound stands."""
        if not _worth_a_thread(records):
            return self._validate(topic, records)
        if len(records) < OFF_LOOP_BYTES and is_one_batch(records):
            validated = self._validate(topic, records, decompression_budget=OFF_LOOP_BYTES)
            if not isinstance(validated, ProduceResult):
                return validated
        return None

    @property
    def fsyncs_each_write(self) -> bool:
        """``--flush always``: the broker's own writes (coordinators' state) are fsynced as they are made."""
        return self.config.flush == "always"

    def must_be_durable(self, plog: Log, acks_all: bool) -> bool:
        """Whether a produce to ``plog`` waits for its fsync (group commit) before it is answered:
        acks=all with ``--flush always``, or the topic's flush.messages / flush.ms due."""
        return (acks_all and self.fsyncs_each_write) or plog.flush_due()

    def append(self, topic_name: str, partition: int, records: bytes | None, flush_policy: bool = True,
               keyless: list[int] | None = None) -> ProduceResult:
        """Validate and append one partition's batches (on the caller's thread). With ``keyless``
        (the indexes of its records without a key), ``records`` is one batch the broker encoded
        itself with ``encode_batch``: only the topic's rules are checked, its records are not walked again."""
        target = self._target(topic_name, partition)
        if isinstance(target, ProduceResult):
            return target
        validated = self._validate(target, records, keyless)
        if isinstance(validated, ProduceResult):
            return validated
        return self.append_valid(Validated(target, partition, *validated), flush_policy=flush_policy)

    def _target(self, topic_name: str, partition: int) -> Topic | ProduceResult:
        """The topic to append to, or the ProduceResult refusing the append."""
        try:
            topic = self.topic_for_produce(topic_name)
        except tuple(CREATION_ERRORS) as exc:
            return ProduceResult(creation_error(exc), message=str(exc))
        if topic is None or not 0 <= partition < len(topic.partitions):
            return ProduceResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return topic

    def _validate(self, topic: Topic, records: bytes | None, keyless: list[int] | None = None,
                  decompression_budget: int | None = None) -> tuple[bytearray, list, int] | ProduceResult:
        """The log validator's answer for an append of ``records`` to ``topic``: the batches as
        (buffer, [(position, header)], the time validated at), or the ProduceResult refusing them.
        ``keyless``: see ``append``; ``decompression_budget``: see ``validate``."""
        rules, now_ms = topic.config.append_rules(self.config.message_max_bytes), int(time.time() * 1000)
        checked = (validate(records, rules, now_ms, decompression_budget) if keyless is None
                   else validate_own(records, keyless, rules, now_ms))
        if isinstance(checked, Refusal):
            return ProduceResult(ErrorCode[checked.error.name], message=checked.message,
                                 record_errors=checked.record_errors)
        return checked.buf, checked.batches, now_ms

    def append_valid(self, valid: Validated, flush_policy: bool = False) -> ProduceResult:
        """Append batches that passed validation: producer sequence checks, then the log (which
        applies its flush policy itself if ``flush_policy`` is on; a client's produce leaves
        that to the group commit)."""
        topic, partition, buf, batches, now_ms = valid.topic, valid.partition, valid.buf, valid.batches, valid.now_ms
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
        self.wakeups.notify(topic.name, partition)
        self.stats.appended(topic.name, last - first + 1, len(buf))
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
            logger.warning("cannot snapshot the producers of %s: %s", plog.directory.name, exc)

    @staticmethod
    def _replay_producers(producers: PartitionProducers, plog: Log, offset: int) -> None:
        """Rebuild sequence state from the batches after ``offset`` (the snapshot's, else the
        active segment's start), so a producer retrying across a broker restart is still recognised."""
        for _, _, header in plog.batches(offset):
            if header.producer_id != NO_PRODUCER_ID and not header.is_control:
                producers.appended(header, header.base_offset)

    def forget_topic(self, name: str) -> None:
        for key in [k for k in self._producers if k[0] == name]:
            del self._producers[key]

    def close(self) -> None:
        """Stop validating and fsyncing, and snapshot every partition's producers (the logs stay open)."""
        self._validator.shutdown()
        self.fsync_rounds.close()
        for (topic, partition), producers in self._producers.items():
            plog = self.log_manager.get_log(topic, partition)
            if plog is not None:
                self._snapshot_producers(producers, plog)
