"""The Fetch response encoded straight to bytes is byte for byte the generated encoder's."""
from __future__ import annotations

import pytest

from headwater.protocol.fetch_response import MAX_VERSION, MIN_VERSION, FetchedPartition, FetchedTopic, FetchResponse
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.records import Record, encode_batch

Generated = MESSAGE_CLASSES[ApiKey.FETCH][1]
PartitionData = Generated.FetchableTopicResponse.PartitionData
Aborted = PartitionData.AbortedTransaction
RECORDS = encode_batch([Record(7 + i, 1_700_000_000_000, b"k", b"v%d" % i) for i in range(3)], base_offset=7)

# (partition, error, high watermark, last stable, log start, aborted, replica, records): every shape a fetch answers
PARTITIONS = {
    "quiet, read_uncommitted": (0, 0, 10, 10, 0, None, -1, b""),
    "quiet, read_committed": (1, 0, 10, 8, 2, [], -1, b""),
    "records": (2, 0, 10, 10, 0, None, -1, RECORDS),
    "records and aborted transactions": (3, 0, 99, 50, 0, [(7, 8), (9, 40)], -1, RECORDS),
    "an error without records": (4, 3, -1, -1, -1, None, -1, None),
    "denied (no records)": (2**31 - 1, 29, -1, -1, -1, [], -1, None),
}


def generated(throttle: int, session_id: int, topics: dict[str, list[tuple]]):
    return Generated(throttle_time_ms=throttle, error_code=0, session_id=session_id, responses=[
        Generated.FetchableTopicResponse(topic=name, partitions=[PartitionData(
            partition_index=p[0], error_code=p[1], high_watermark=p[2], last_stable_offset=p[3], log_start_offset=p[4],
            aborted_transactions=None if p[5] is None else [Aborted(producer_id=a, first_offset=b) for a, b in p[5]],
            preferred_read_replica=p[6], records=p[7]) for p in partitions]) for name, partitions in topics.items()])


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_every_partition_shape_encodes_as_the_generated_class_does(version):
    topics = {"orders": list(PARTITIONS.values()), "événements": [PARTITIONS["records"]], "empty": []}
    ours = FetchResponse(120, 0, 77, [FetchedTopic(name, [FetchedPartition(*p) for p in partitions])
                                      for name, partitions in topics.items()])
    assert ours.encode(version) == generated(120, 77, topics).encode(version=version)


@pytest.mark.parametrize("version", [4, 11])
def test_generated_partitions_in_the_response_encode_the_same(version):
    """The authorization rule puts generated PartitionData (with generated aborted entries) in."""
    topics = {"orders": list(PARTITIONS.values())}
    mixed = FetchResponse(0, 0, 0, [FetchedTopic("orders", generated(0, 0, topics).responses[0].partitions)])
    assert mixed.encode(version) == generated(0, 0, topics).encode(version=version)


def test_an_error_response_without_topics():
    assert FetchResponse(0, 70, 0, []).encode(11) == Generated(throttle_time_ms=0, error_code=70, session_id=0,
                                                               responses=[]).encode(version=11)
