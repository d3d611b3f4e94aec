"""The ShareFetch response encoded straight to bytes is byte for byte the generated encoder's."""
from __future__ import annotations

import uuid

import pytest

from headwater.protocol.share_fetch_response import ShareFetchedTopic, SharePartitionData, ShareFetchResponse
from headwater.protocol.share_messages import ShareFetchResponse as Generated
from headwater.records import Record, encode_batch

Topic = Generated.ShareFetchableTopicResponse
PartitionData = Topic.PartitionData
Node = Generated.NodeEndpoint
RECORDS = encode_batch([Record(7 + i, 1_700_000_000_000, b"k", b"v%d" % i) for i in range(3)], base_offset=7)
BIG = encode_batch([Record(i, 1_700_000_000_000, None, b"x" * 200) for i in range(400)])  # a length of 3 varint bytes

# (partition, error, message, ack error, ack message, leader, epoch, records, acquired): every shape a ShareFetch answers
PARTITIONS = {
    "records, one run": (0, 0, None, 0, None, 1, 0, RECORDS, [(7, 9, 1)]),
    "records, runs with their delivery counts": (1, 0, None, 0, None, 1, 0, RECORDS, [(7, 7, 3), (9, 9, 1)]),
    "acknowledged only": (2, 0, None, 0, None, 1, 0, b"", []),
    "an acknowledgement refused": (3, 0, None, 28, "records 5..9 are not held by member m", 1, 0, b"", []),
    "unknown topic id": (4, 100, None, 0, None, 1, 0, b"", []),
    "denied": (2**31 - 1, 29, "Not authorized.", 0, None, -1, -1, None, []),
    "many runs, big records, non-ASCII": (5, 0, "é", 0, "ß" * 200, 7, 3, BIG,
                                          [(i * 2, i * 2, i % 5 + 1) for i in range(200)]),
}
TOPIC_IDS = [uuid.UUID(int=1 << 100), uuid.UUID("3f1e2d4c-0000-4000-8000-00000000abcd"), uuid.UUID(int=0)]


def generated(throttle: int, error: int, message: str | None, topics: dict[uuid.UUID, list[tuple]], nodes=()):
    return Generated(throttle_time_ms=throttle, error_code=error, error_message=message,
                     acquisition_lock_timeout_ms=30_000, node_endpoints=[
                         Node(node_id=n, host=h, port=p, rack=r) for n, h, p, r in nodes],
                     responses=[Topic(topic_id=topic_id, partitions=[PartitionData(
                         partition_index=p[0], error_code=p[1], error_message=p[2], acknowledge_error_code=p[3],
                         acknowledge_error_message=p[4],
                         current_leader=PartitionData.LeaderIdAndEpoch(leader_id=p[5], leader_epoch=p[6]),
                         records=p[7], acquired_records=[PartitionData.AcquiredRecords(
                             first_offset=a, last_offset=b, delivery_count=c) for a, b, c in p[8]])
                         for p in partitions]) for topic_id, partitions in topics.items()])


def ours(throttle: int, error: int, message: str | None, topics: dict[uuid.UUID, list[tuple]], nodes=()):
    return ShareFetchResponse(throttle, error, message, 30_000,
                              [ShareFetchedTopic(topic_id, [SharePartitionData(*p) for p in partitions])
                               for topic_id, partitions in topics.items()],
                              [Node(node_id=n, host=h, port=p, rack=r) for n, h, p, r in nodes])


def test_every_partition_shape_encodes_as_the_generated_class_does():
    topics = {TOPIC_IDS[0]: list(PARTITIONS.values()), TOPIC_IDS[1]: [PARTITIONS["records, one run"]],
              TOPIC_IDS[2]: []}
    assert ours(120, 0, None, topics).encode(1) == generated(120, 0, None, topics).encode(version=1)


def test_generated_partitions_in_the_response_encode_the_same():
    """The authorization rule appends generated topics (of generated PartitionData) to ours."""
    topics = {TOPIC_IDS[0]: list(PARTITIONS.values())}
    mixed = ours(0, 0, None, {TOPIC_IDS[1]: [PARTITIONS["records, one run"]]})
    mixed.responses.append(generated(0, 0, None, topics).responses[0])
    both = {TOPIC_IDS[1]: [PARTITIONS["records, one run"]], **topics}
    assert mixed.encode(1) == generated(0, 0, None, both).encode(version=1)


@pytest.mark.parametrize("error, message, nodes", [(0, None, [(1, "localhost", 9092, None)]),
                                                    (72, "no share session", []),
                                                    (0, None, [(1, "h" * 300, 1, "rack-é"), (2, "", 0, None)])])
def test_errors_and_node_endpoints_encode_as_the_generated_class_does(error, message, nodes):
    assert ours(5, error, message, {}, nodes).encode(1) == generated(5, error, message, {}, nodes).encode(version=1)


def test_a_body_encoded_early_is_encoded_afresh_once_a_field_is_set():
    """The handler encodes while the fsync runs; quotas and the authorization rule set fields after."""
    one = {TOPIC_IDS[0]: [PARTITIONS["records, one run"]]}
    both = {**one, TOPIC_IDS[1]: [PARTITIONS["denied"]]}
    response = ours(0, 0, None, one)
    assert response.encode(1) == generated(0, 0, None, one).encode(version=1)
    response.throttle_time_ms = 250
    assert response.encode(1) == generated(250, 0, None, one).encode(version=1)
    response.responses = response.responses + ours(0, 0, None, {TOPIC_IDS[1]: [PARTITIONS["denied"]]}).responses
    assert response.encode(1) == generated(250, 0, None, both).encode(version=1)


def test_only_version_1_is_encoded():
    with pytest.raises(ValueError):
        ours(0, 0, None, {}).encode(0)
