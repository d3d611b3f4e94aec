"""The transaction APIs: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, and the admin APIs ListTransactions,
DescribeTransactions and WriteTxnMarkers. Listed in ``broker/apis``; the state machine is ``coordinator.py``.
"""
from __future__ import annotations

from collections import defaultdict

from headwater.broker.groups.group import CommittedOffset
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.records import BatchHeader
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import (CLUSTER_DENIED, TOPIC_DENIED, TRANSACTIONAL_ID_DENIED, committed,
                                                     empty_response, partition_answers, per_resource,
                                                     transactional_group, visible)

from .transaction import Transaction, TxnState

InitProducerIdResponse = MESSAGE_CLASSES[ApiKey.INIT_PRODUCER_ID][1]
AddPartitionsToTxnResponse = MESSAGE_CLASSES[ApiKey.ADD_PARTITIONS_TO_TXN][1]
AddOffsetsToTxnResponse = MESSAGE_CLASSES[ApiKey.ADD_OFFSETS_TO_TXN][1]
EndTxnResponse = MESSAGE_CLASSES[ApiKey.END_TXN][1]
TxnOffsetCommitResponse = MESSAGE_CLASSES[ApiKey.TXN_OFFSET_COMMIT][1]
ListTransactionsResponse = MESSAGE_CLASSES[ApiKey.LIST_TRANSACTIONS][1]
DescribeTransactionsResponse = MESSAGE_CLASSES[ApiKey.DESCRIBE_TRANSACTIONS][1]
WriteTxnMarkersResponse = MESSAGE_CLASSES[ApiKey.WRITE_TXN_MARKERS][1]


def _fenced(error: ErrorCode, version: int, first_version_with_fenced: int) -> ErrorCode:
    """PRODUCER_FENCED is newer than some clients (KIP-588): older versions hear INVALID_PRODUCER_EPOCH."""
    if error == ErrorCode.PRODUCER_FENCED and version < first_version_with_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


async def init_transactional_producer(broker, header, request):
    recover = header.api_version >= 3
    error, producer_id, epoch = broker.transactions.init_producer_id(
        request.transactional_id, request.transaction_timeout_ms,
        request.producer_id if recover else -1, request.producer_epoch if recover else -1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=_fenced(error, header.api_version, 4),
                                  producer_id=producer_id, producer_epoch=epoch)


async def add_partitions_to_txn(broker, header, request):
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = {tp for tp in wanted if broker.log_manager.get_log(*tp) is None}
    if unknown:  # as Kafka: nothing is added, the known partitions were not attempted
        errors = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                  for tp in wanted}
    else:
        error = broker.transactions.add_partitions(request.v3_and_below_transactional_id,
                                                   request.v3_and_below_producer_id,
                                                   request.v3_and_below_producer_epoch, wanted)
        errors = dict.fromkeys(wanted, _fenced(error, header.api_version, 2))
    TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    PartitionResult = TopicResult.AddPartitionsToTxnPartitionResult
    return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=[
        TopicResult(name=topic, results_by_partition=[PartitionResult(partition_index=p, partition_error_code=e)
                                                      for p, e in partitions])
        for topic, partitions in _by_topic(errors).items()])


def _by_topic(errors: dict[tuple[str, int], ErrorCode]) -> dict[str, list[tuple[int, ErrorCode]]]:
    by_topic = defaultdict(list)
    for (topic, partition), error in errors.items():
        by_topic[topic].append((partition, error))
    return by_topic


async def add_offsets_to_txn(broker, header, request):
    error = broker.transactions.add_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                            request.group_id)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=_fenced(error, header.api_version, 2))


async def txn_offset_commit(broker, header, request):
    wanted = {(t.name, p.partition_index): CommittedOffset(p.committed_offset, p.committed_leader_epoch,
                                                           p.committed_metadata)
              for t in request.topics for p in t.partitions}
    errors = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for tp in wanted if broker.log_manager.get_log(*tp) is None}
    offsets = {tp: c for tp, c in wanted.items() if tp not in errors}
    if offsets:
        member = ((request.generation_id, request.member_id, request.group_instance_id) if header.api_version >= 3
                  else (-1, "", None))
        error = broker.transactions.txn_offset_commit(request.transactional_id, request.producer_id,
                                                      request.producer_epoch, request.group_id, *member, offsets)
        errors.update(dict.fromkeys(offsets, _fenced(error, header.api_version, 3)))
    TopicResult = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    PartitionResult = TopicResult.TxnOffsetCommitResponsePartition
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        TopicResult(name=topic, partitions=[PartitionResult(partition_index=p, error_code=e) for p, e in partitions])
        for topic, partitions in _by_topic(errors).items()])


async def end_txn(broker, header, request):
    error = broker.transactions.end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                        request.committed)
    return EndTxnResponse(throttle_time_ms=0, error_code=_fenced(error, header.api_version, 2))


def produce_error(broker, transactional_id: str | None, topic: str, partition: int,
                  batches: list[tuple[int, BatchHeader]]) -> ErrorCode:
    """The transactional checks of a Produce, on every batch it carries for the partition (as
    validated: position, header):
    transactional batches only from a producer with a transactional id, whose epoch is current
    and whose transaction holds the partition."""
    if transactional_id is None:   # a loop, not any() over a generator: most requests carry one batch
        for _, batch in batches:
            if batch.is_transactional:
                return ErrorCode.INVALID_REQUEST
        return ErrorCode.NONE
    if not all(b.is_transactional for _, b in batches):
        return ErrorCode.INVALID_REQUEST
    for producer_id, epoch in dict.fromkeys((b.producer_id, b.producer_epoch) for _, b in batches):
        error = broker.transactions.verify_produce(transactional_id, producer_id, epoch, (topic, partition))
        if error:
            return error
    return ErrorCode.NONE


# --- administration ---------------------------------------------------------------------

async def list_transactions(broker, header, request):
    states = set(request.state_filters)
    known = {s.value for s in TxnState}
    producers = set(request.producer_id_filters)
    min_age = request.duration_filter if header.api_version >= 1 else -1
    now = broker.transactions.clock.now_ms()
    Listed = ListTransactionsResponse.TransactionState
    listed = [Listed(transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state.value)
              for t in broker.transactions.transactions()
              if (not states or t.state.value in states) and (not producers or t.producer_id in producers)
              and (min_age < 0 or (t.start_ms >= 0 and now - t.start_ms >= min_age))]
    return ListTransactionsResponse(throttle_time_ms=0, error_code=0, unknown_state_filters=sorted(states - known),
                                    transaction_states=listed)


def _described(txn_id: str, txn: Transaction | None):
    Described = DescribeTransactionsResponse.TransactionState
    if txn is None:
        return Described(error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id=txn_id,
                         transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                         producer_id=-1, producer_epoch=-1, topics=[])
    by_topic = defaultdict(list)
    for topic, partition in sorted(txn.partitions):
        by_topic[topic].append(partition)
    return Described(error_code=0, transactional_id=txn_id, transaction_state=txn.state.value,
                     transaction_timeout_ms=txn.timeout_ms, transaction_start_time_ms=txn.start_ms,
                     producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
                     topics=[Described.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()])


async def describe_transactions(broker, header, request):
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=[
        _described(txn_id, broker.transactions.get(txn_id)) for txn_id in request.transactional_ids])


async def write_txn_markers(broker, header, request):
    """Markers written on an operator's word (``kafka-transactions abort``, for a transaction
    hanging in a partition that its coordinator no longer knows), by the coordinator's own writer:
    the last stable offset moves and an abort goes into the aborted index just the same. As
    Kafka, a marker older than the producer's epoch in the partition is refused."""
    Marker = WriteTxnMarkersResponse.WritableTxnMarkerResult
    Topic = Marker.WritableTxnMarkerTopicResult
    Partition = Topic.WritableTxnMarkerPartitionResult
    return WriteTxnMarkersResponse(markers=[
        Marker(producer_id=m.producer_id, topics=[
            Topic(name=t.name, partitions=[
                Partition(partition_index=p, error_code=_write_marker(broker, t.name, p, m.producer_id,
                                                                      m.producer_epoch, m.transaction_result))
                for p in t.partition_indexes])
            for t in m.topics])
        for m in request.markers])


def _write_marker(broker, topic: str, partition: int, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
    producers = broker.appender.producers(topic, partition)
    if producers is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if any(pid == producer_id and known > epoch for pid, known, _ in producers.active()):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if not broker.txn_partitions.write_marker(topic, partition, producer_id, epoch, commit):
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


async def add_partitions_to_txn_rule(access, header, request, handle):
    """WRITE on the transactional id and on each topic; as Kafka, a denied topic fails the whole request
    (the others answered OPERATION_NOT_ATTEMPTED), so a transaction never holds half its partitions."""
    topics = request.v3_and_below_topics
    if not access.transactional_id(Op.WRITE, request.v3_and_below_transactional_id):
        codes = {t.name: TRANSACTIONAL_ID_DENIED for t in topics}
    else:
        codes = {t.name: TOPIC_DENIED for t in topics if not access.topic(Op.WRITE, t.name)}
        if not codes:
            return await handle(request)
    response = empty_response(header)
    Topic = type(response).AddPartitionsToTxnTopicResult
    response.results_by_topic_v3_and_below = [
        Topic(name=t.name, results_by_partition=partition_answers(
            Topic.AddPartitionsToTxnPartitionResult, "partition_index", t.partitions,
            partition_error_code=codes.get(t.name, ErrorCode.OPERATION_NOT_ATTEMPTED))) for t in topics]
    return response


async def write_txn_markers_rule(access, header, request, handle):
    """CLUSTER_ACTION on the cluster (an operator's super user, as Kafka), else every partition says so."""
    if access.cluster(Op.CLUSTER_ACTION):
        return await handle(request)
    response = empty_response(header)
    Marker = type(response).WritableTxnMarkerResult
    Topic = Marker.WritableTxnMarkerTopicResult
    response.markers = [Marker(producer_id=m.producer_id, topics=[Topic(name=t.name, partitions=partition_answers(
        Topic.WritableTxnMarkerPartitionResult, "partition_index", t.partition_indexes, error_code=CLUSTER_DENIED))
        for t in m.topics]) for m in request.markers]
    return response


txn_offset_commit_rule = committed(TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic,
                                   TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition,
                                   transactional_group)
describe_transactions_rule = per_resource(
    "transactional_ids", lambda a, t: None if a.transactional_id(Op.DESCRIBE, t) else TRANSACTIONAL_ID_DENIED,
    "transaction_states", lambda t, code: DescribeTransactionsResponse.TransactionState(
        error_code=code, transactional_id=t, transaction_state="", topics=[]))
list_transactions_rule = visible("transaction_states", lambda a, t: a.transactional_id(Op.DESCRIBE, t.transactional_id))
