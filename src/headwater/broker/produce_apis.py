"""Produce, InitProducerId, DescribeProducers: appending to partition logs, idempotently
when asked, and the idempotent producers each partition has seen."""
from __future__ import annotations

import logging

from headwater.broker.appender import ProduceResult
from headwater.broker.txn.transaction_apis import init_transactional_producer, produce_error
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.protocol.produce_response import ProducedPartition, ProducedTopic, ProduceResponse
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import (NOT_AUTHORIZED, TOPIC_DENIED, TRANSACTIONAL_ID_DENIED,
                                                     empty_response, partition_answers, partition_results, take_denied,
                                                     topic_check)

log = logging.getLogger("headwater.broker")

InitProducerIdResponse = MESSAGE_CLASSES[ApiKey.INIT_PRODUCER_ID][1]
DescribeProducersResponse = MESSAGE_CLASSES[ApiKey.DESCRIBE_PRODUCERS][1]
NO_TRANSACTION = -1  # current_txn_start_offset of a producer outside any transaction
ACKS_ALL = -1


async def produce(broker, header, request):
    refuse = None
    if request.acks not in (0, 1, ACKS_ALL):
        refuse = ProduceResult(ErrorCode.INVALID_REQUIRED_ACKS)
    get_log = broker.log_manager.get_log
    answers = []   # per topic: its name and [(partition index, result, its log)]
    for topic in request.topic_data:
        results = []
        for part in topic.partition_data:
            result = refuse or await _append(broker, request.transactional_id, topic.name, part.index, part.records)
            if result.error and refuse is None:
                log.warning("produce to %s-%d refused: %s %s", topic.name, part.index, result.error.name,
                            result.message or "")
            results.append((part.index, result, get_log(topic.name, part.index)))
        answers.append((topic.name, results))
    acks_all = request.acks == ACKS_ALL
    durable = [plog for _, results in answers for _, result, plog in results
               if result.error == ErrorCode.NONE and broker.appender.must_be_durable(plog, acks_all)]
    failed = await broker.appender.fsync_rounds.durable(durable) if durable else {}
    if request.acks == 0:
        return None
    return ProduceResponse([ProducedTopic(name, [_answer(index, result, plog, failed) for index, result, plog in results])
                            for name, results in answers])


def _answer(index: int, result: ProduceResult, plog, failed: dict) -> ProducedPartition:
    """One partition's answer; appended but not durable (its fsync failed), the producer is told so
    (and retries: an idempotent producer's retry is recognised as the batch already appended, and
    flushed again)."""
    log_start = plog.log_start_offset if plog is not None else -1
    if result.error == ErrorCode.NONE and plog in failed:
        message = f"cannot fsync {plog.directory}: {failed[plog]}"
        log.warning("produce to %s: %s", plog.directory.name, message)
        return ProducedPartition(index, ErrorCode.KAFKA_STORAGE_ERROR, -1, result.log_append_time, log_start, [],
                                 message)
    return ProducedPartition(index, result.error, result.base_offset, result.log_append_time, log_start,
                             result.record_errors, result.message)


async def _append(broker, transactional_id: str | None, topic: str, partition: int,
                  records: bytes | None) -> ProduceResult:
    """One partition's batches: validated, then checked against the producer's transaction on the
    validated headers right before the append, with no await in between (the transaction may
    have ended while a large batch was validated on the validator thread)."""
    valid = await broker.appender.validate(topic, partition, records)
    if isinstance(valid, ProduceResult):
        return valid
    refused = produce_error(broker, transactional_id, topic, partition, valid.batches)
    return ProduceResult(refused) if refused else broker.appender.append_valid(valid)


async def init_producer_id(broker, header, request):
    if request.transactional_id is not None:
        return await init_transactional_producer(broker, header, request)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=broker.producer_ids.allocate(),
                                  producer_epoch=0)


def _txn_start(broker, topic: str, partition: int, producer_id: int) -> int:
    """Where the producer's open transaction begins in the partition: what kafka-transactions
    describe-producers shows and find-hanging looks for."""
    start = broker.txn_partitions.open_since(topic, partition, producer_id)
    return NO_TRANSACTION if start is None else start


async def describe_producers(broker, header, request):
    TopicResult = DescribeProducersResponse.TopicResponse
    PartitionResult = TopicResult.PartitionResponse
    State = PartitionResult.ProducerState
    topics = []
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            producers = broker.appender.producers(topic.name, index)
            if producers is None:
                partitions.append(PartitionResult(partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                  error_message=None, active_producers=[]))
                continue
            active = [State(producer_id=pid, producer_epoch=epoch, last_sequence=last.last_sequence,
                            last_timestamp=last.max_timestamp, coordinator_epoch=-1,
                            current_txn_start_offset=_txn_start(broker, topic.name, index, pid))
                      for pid, epoch, last in producers.active()]
            partitions.append(PartitionResult(partition_index=index, error_code=0, error_message=None,
                                              active_producers=active))
        topics.append(TopicResult(name=topic.name, partitions=partitions))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


async def produce_rule(access, header, request, handle):
    """WRITE on each topic, and on the transactional id if there is one (else every topic is refused)."""
    transaction_denied = request.transactional_id is not None and not access.transactional_id(
        Op.WRITE, request.transactional_id)
    denied = take_denied(request, "topic_data", lambda t: not transaction_denied and access.topic(Op.WRITE, t.name))
    response = await handle(request) if request.topic_data or not denied else None
    if response is None and not denied or request.acks == 0:
        return response
    Topic = ProduceResponse.TopicProduceResponse
    answered = response.responses if response is not None else []
    return ProduceResponse(throttle_time_ms=0, responses=answered + [
        Topic(name=t.name, partition_responses=partition_answers(Topic.PartitionProduceResponse, "index",
                                                                 (p.index for p in t.partition_data),
                                                                 error_code=TOPIC_DENIED)) for t in denied])


async def init_producer_id_rule(access, header, request, handle):
    # Kafka 3.x: an idempotent producer needs no cluster permission (WRITE on each topic is checked per produce).
    if request.transactional_id is None or access.transactional_id(Op.WRITE, request.transactional_id):
        return await handle(request)
    return empty_response(header, error_code=TRANSACTIONAL_ID_DENIED, producer_id=-1, producer_epoch=-1)


describe_producers_rule = partition_results(
    topic_check(Op.READ), DescribeProducersResponse.TopicResponse, DescribeProducersResponse.TopicResponse.PartitionResponse,
    indexes_of=lambda t: t.partition_indexes, error_message=NOT_AUTHORIZED, active_producers=[])
