"""/metrics after a known workload, parsed with prometheus_client's own parser, equals the
ground truth computed here; bad console requests get clear pages with the right status, and
the broker keeps serving Kafka clients."""
import html
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from headwater.testing import BrokerProcess, wait_until

from tests.support import share_workload, txn_workload
from tests.support.groups import holding_every_partition

TOPIC, GROUP = "metered", "meter-readers"
PER_PARTITION = {0: 7, 1: 12, 2: 5}       # records produced to each partition
COMMITTED = {0: 7, 1: 4}                  # the group's committed offsets; partition 2 never committed


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("metrics") / "data", "--http-listener", "127.0.0.1:0",
                       "--retention-check-interval-ms", "200", "--cleaner-interval-ms", "200") as proc:
        yield proc


def get(broker, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(broker.console_url + path.lstrip("/"), timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(broker) -> dict[tuple[str, tuple], float]:
    status, text = get(broker, "/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def workload(broker):
    """Known records, a group's known commits, and one consumer that reads everything once."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 3)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for partition, count in PER_PARTITION.items():
        for i in range(count):
            producer.produce(TOPIC, value=f"{partition}-{i}".encode(), partition=partition)
            producer.flush()  # one batch per record: a count per batch would differ from a count per record
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()], asynchronous=False)
    committer.close()
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reads-all-once",
                       "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    reader.assign([TopicPartition(TOPIC, p, 0) for p in PER_PARTITION])
    read = 0
    while read < sum(PER_PARTITION.values()):
        msg = reader.poll(1)
        if msg is not None and not msg.error():
            read += 1
    reader.close()
    return scrape(broker)


def test_kafka_exporter_gauges_equal_the_workload(workload):
    m = workload
    assert m[("kafka_brokers", ())] == 1
    assert m[("kafka_topic_partitions", (("topic", TOPIC),))] == 3
    for partition, count in PER_PARTITION.items():
        labels = (("partition", str(partition)), ("topic", TOPIC))
        assert m[("kafka_topic_partition_current_offset", labels)] == count
        assert m[("kafka_topic_partition_oldest_offset", labels)] == 0
    for partition, offset in COMMITTED.items():
        labels = (("consumergroup", GROUP), ("partition", str(partition)), ("topic", TOPIC))
        assert m[("kafka_consumergroup_current_offset", labels)] == offset
        assert m[("kafka_consumergroup_lag", labels)] == PER_PARTITION[partition] - offset
    # partition 2, never committed, is unread from its log start: its records count in the lag and the total
    never = (("consumergroup", GROUP), ("partition", "2"), ("topic", TOPIC))
    assert m[("kafka_consumergroup_lag", never)] == PER_PARTITION[2]
    assert ("kafka_consumergroup_current_offset", never) not in m
    lag_sum = sum(count - COMMITTED.get(p, 0) for p, count in PER_PARTITION.items())
    assert m[("kafka_consumergroup_lag_sum", (("consumergroup", GROUP), ("topic", TOPIC)))] == lag_sum
    assert m[("kafka_consumergroup_members", (("consumergroup", GROUP),))] == 0


def test_broker_counters_equal_the_workload(workload, broker):
    m = workload
    topic = (("topic", TOPIC),)
    assert m[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == sum(PER_PARTITION.values())
    on_disk = sum(f.stat().st_size for p in PER_PARTITION for f in (broker.data_dir / f"{TOPIC}-{p}").glob("*.log"))
    for p in PER_PARTITION:
        size = sum(f.stat().st_size for f in (broker.data_dir / f"{TOPIC}-{p}").glob("*.log"))
        assert m[("kafka_log_log_size", (("partition", str(p)), ("topic", TOPIC)))] == size
    # Every byte appended is in the log, and the reader fetched each batch once.
    assert m[("kafka_server_brokertopicmetrics_bytesin_total", topic)] == on_disk
    assert m[("kafka_server_brokertopicmetrics_bytesout_total", topic)] == on_disk
    produce = (("request", "Produce"),)
    assert m[("kafka_network_requestmetrics_request_seconds_count", produce)] == sum(PER_PARTITION.values())
    assert m[("kafka_network_requestmetrics_request_seconds_bucket", (("le", "+Inf"),) + produce)] == \
        sum(PER_PARTITION.values())
    assert m[("kafka_network_requestmetrics_request_seconds_count", (("request", "OffsetCommit"),))] == 1
    assert m[("kafka_server_socketservermetrics_connection_count", ())] >= 0


def produce_one_by_one(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
        producer.flush()


def read_all(bootstrap: str, topic: str) -> int:
    """Records a consumer reads from the log start of partition 0 to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "count", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    count = 0
    while True:
        msg = consumer.poll(10)
        assert msg is not None, "no end of partition"
        if msg.error():
            break  # end of partition
        count += 1
    consumer.close()
    return count


def test_cleaner_and_retention_counters_equal_their_work(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    small_segments = {"segment.bytes": "1024", "min.compaction.lag.ms": "0", "min.cleanable.dirty.ratio": "0.01"}
    futures = admin.create_topics([NewTopic("compacted", 1, config={**small_segments, "cleanup.policy": "compact"}),
                                   NewTopic("expiring", 1, config={**small_segments, "retention.bytes": "0"})])
    for future in futures.values():
        future.result(30)
    updates = [(f"k{i % 5}".encode(), f"v{i}".encode() * 10) for i in range(60)]
    produce_one_by_one(broker.bootstrap, "compacted", updates)
    produce_one_by_one(broker.bootstrap, "expiring", updates)

    def settled():
        """Metrics once the cleaner and retention have nothing left to do: two scrapes alike."""
        before = scrape(broker)
        time.sleep(1)
        after = scrape(broker)
        return after if before == after and after[("kafka_log_logcleaner_logs_cleaned_total", ())] > 0 and \
            after[("kafka_log_retention_segments_deleted_total", ())] > 0 else None
    m = wait_until(settled, what="cleaner and retention passes")
    assert m[("kafka_log_logcleaner_records_removed_total", ())] == len(updates) - read_all(broker.bootstrap,
                                                                                            "compacted")
    expiring = (("partition", "0"), ("topic", "expiring"))
    remaining = len(list((broker.data_dir / "expiring-0").glob("*.log")))
    assert remaining == 1   # retention.bytes=0 leaves the active segment only
    assert m[("kafka_topic_partition_oldest_offset", expiring)] == len(updates) - read_all(broker.bootstrap,
                                                                                            "expiring")
    assert m[("kafka_log_retention_segments_deleted_total", ())] > 0
    assert m[("kafka_log_logcleaner_bytes_read_total", ())] > m[("kafka_log_logcleaner_bytes_written_total", ())]


BAD_REQUESTS = [
    ("/topics/no-such-topic", 404, "topic 'no-such-topic' does not exist"),
    ("/groups/no-such-group", 404, "consumer group 'no-such-group' does not exist"),
    ("/share-groups/no-such-group", 404, "share group 'no-such-group' does not exist"),
    (f"/topics/{TOPIC}?mode=offset&offset=99&partition=0", 416, "offset 99 is outside partition 0"),
    (f"/topics/{TOPIC}?mode=offset&offset=ten", 400, "offset must be a whole number, got 'ten'"),
    (f"/topics/{TOPIC}?mode=offset&offset=-1", 400, "offset must be at least 0"),
    (f"/topics/{TOPIC}?mode=time&time=yesterday", 400, "is not an ISO 8601 date-time"),
    (f"/topics/{TOPIC}?mode=sideways", 400, "unknown browse mode"),
    (f"/topics/{TOPIC}?partition=9", 404, "has no partition 9"),
    (f"/topics/{TOPIC}?limit=0", 400, "limit must be at least 1"),
    ("/no/such/page", 404, "Not Found"),
]


@pytest.mark.parametrize("path, status, message", BAD_REQUESTS)
def test_bad_requests_get_a_clear_page_and_status(workload, broker, path, status, message):
    got_status, page = get(broker, path)
    assert got_status == status
    assert message in html.unescape(page)
    assert "Traceback" not in page


def test_writes_are_refused_on_a_read_only_console(workload, broker):
    request = urllib.request.Request(broker.console_url + f"groups/{GROUP}/reset", method="POST",
                                     data=f"topic={TOPIC}&to=earliest&confirm=yes".encode())
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403
    assert "--console-allow-writes" in refused.value.read().decode()
    assert scrape(broker)[("kafka_consumergroup_current_offset", (("consumergroup", GROUP), ("partition", "1"),
                                                                  ("topic", TOPIC)))] == COMMITTED[1]


def test_kafka_clients_are_served_after_the_bad_requests(workload, broker):
    for path, _, _ in BAD_REQUESTS:
        get(broker, path)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("after-bad-pages", value=b"still here", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "after", "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("after-bad-pages", 0, 0)])
    msg = None
    for _ in range(30):
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            break
    consumer.close()
    assert msg.value() == b"still here"


def test_no_listener_unless_asked(tmp_path):
    with BrokerProcess(tmp_path / "data") as plain:
        assert plain.console_url is None


def share_metrics(broker, partition: int) -> dict[str, float]:
    """The share group's per-partition gauges and counters of one scrape, by metric name."""
    labels = (("partition", str(partition)), ("sharegroup", share_workload.GROUP), ("topic", share_workload.TOPIC))
    return {name: value for (name, got), value in scrape(broker).items()
            if name.startswith("kafka_sharegroup_") and got == labels}


def test_share_group_metrics_equal_the_workload(broker):
    member = share_workload.run(broker.bootstrap)
    try:
        m = scrape(broker)
        assert m[("kafka_sharegroup_members", (("sharegroup", share_workload.GROUP),))] == 1
        assert m[("kafka_server_group_coordinator_metrics_share_group_count", (("state", "Stable"),))] == 1
        for partition, count in share_workload.PER_PARTITION.items():
            dead = share_workload.rejected(partition)
            assert share_metrics(broker, partition) == {
                "kafka_sharegroup_start_offset": count, "kafka_sharegroup_lag": 0,
                "kafka_sharegroup_records_in_flight": 0, "kafka_sharegroup_records_available": 0,
                "kafka_sharegroup_records_archived_total": dead, "kafka_sharegroup_records_dead_lettered_total": dead}
        assert m[("kafka_sharegroup_lag_sum", (("sharegroup", share_workload.GROUP),
                                               ("topic", share_workload.TOPIC)))] == 0
    finally:
        member.close()
    wait_until(lambda: scrape(broker)[("kafka_sharegroup_members", (("sharegroup", share_workload.GROUP),))] == 0,
               what="the member to leave")
    assert scrape(broker)[("kafka_server_group_coordinator_metrics_share_group_count", (("state", "Empty"),))] == 1
    # Three new records on partition 1: available; a member holding some: in flight, then released on leaving.
    more = 3
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(more):
        producer.produce(share_workload.TOPIC, value=b"0", partition=1)
    producer.flush(30)
    end = share_workload.PER_PARTITION[1] + more
    waiting = share_metrics(broker, 1)
    assert (waiting["kafka_sharegroup_lag"], waiting["kafka_sharegroup_records_available"],
            waiting["kafka_sharegroup_records_in_flight"]) == (more, more, 0)
    holder = share_workload.share_consumer(broker.bootstrap)
    try:
        held = wait_until(lambda: [m for m in holder.poll(0.3) if not m.error()], what="records acquired")
        holding = share_metrics(broker, 1)
        assert holding["kafka_sharegroup_records_in_flight"] >= len(held)
        assert holding["kafka_sharegroup_records_in_flight"] + holding["kafka_sharegroup_records_available"] == more
        assert holding["kafka_sharegroup_start_offset"] == end - more
    finally:
        holder.close()
    released = wait_until(lambda: (got := share_metrics(broker, 1))["kafka_sharegroup_records_in_flight"] == 0 and got,
                          what="the held records released")
    assert (released["kafka_sharegroup_records_available"], released["kafka_sharegroup_lag"]) == (more, more)
    assert released["kafka_sharegroup_records_archived_total"] == share_workload.rejected(1)
    # A partition added since the group last fetched: its records wait too (share.auto.offset.reset=earliest).
    grown, added = len(share_workload.PER_PARTITION), 4
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(share_workload.TOPIC, grown + 1)])[share_workload.TOPIC].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})  # one that knows the new partition
    for _ in range(added):
        producer.produce(share_workload.TOPIC, value=b"0", partition=grown)
    producer.flush(30)
    assert share_metrics(broker, grown)["kafka_sharegroup_lag"] == added
    assert scrape(broker)[("kafka_sharegroup_lag_sum", (("sharegroup", share_workload.GROUP),
                                                        ("topic", share_workload.TOPIC)))] == more + added


def test_transaction_metrics_equal_the_workload(broker):
    work = txn_workload.run(broker.bootstrap)
    p0, p1 = ((("partition", str(p)), ("topic", txn_workload.TOPIC)) for p in (0, 1))
    try:
        m = scrape(broker)
        assert (m[("kafka_transactions_open", ())], m[("kafka_transactions_committed_total", ())],
                m[("kafka_transactions_aborted_total", ())]) == (1, 2, 1)
        assert {labels[0][1]: v for (name, labels), v in m.items() if name == "kafka_transactional_ids" and v} == \
            {"Empty": 1, "CompleteAbort": 1, "Ongoing": 1}    # the fenced id re-initialised, the aborted, the open
        assert m[("kafka_topic_partition_last_stable_offset", p0)] == work.last_stable < work.log_end
        assert m[("kafka_topic_partition_last_stable_offset", p1)] == m[("kafka_topic_partition_current_offset", p1)]
    finally:
        work.open_producer.abort_transaction(30)
    m = scrape(broker)
    assert (m[("kafka_transactions_open", ())], m[("kafka_transactions_aborted_total", ())]) == (0, 2)
    assert m[("kafka_topic_partition_last_stable_offset", p0)] == m[("kafka_topic_partition_current_offset", p0)] \
        == work.log_end + 1   # the abort marker


def test_a_kip848_group_has_the_same_gauges(workload, broker):
    """A consumer group on KIP-848's protocol (group.protocol=consumer), with a member holding every
    partition and a commit of partition 0 only: its gauges are the classic group's, its lag counts
    the partitions it never committed."""
    group = "meter-readers-848"
    member = holding_every_partition(broker.bootstrap, group, TOPIC, len(PER_PARTITION),
                                     **{"group.protocol": "consumer"})
    try:
        member.commit(offsets=[TopicPartition(TOPIC, 0, 3)], asynchronous=False)
        marks = {p: member.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10) for p in PER_PARTITION}
        m = scrape(broker)
        assert m[("kafka_consumergroup_members", (("consumergroup", group),))] == 1
        lags = {p: m[("kafka_consumergroup_lag", (("consumergroup", group), ("partition", str(p)), ("topic", TOPIC)))]
                for p in PER_PARTITION}
        assert lags == {p: high - (3 if p == 0 else low) for p, (low, high) in marks.items()}
        assert m[("kafka_consumergroup_lag_sum", (("consumergroup", group), ("topic", TOPIC)))] == sum(lags.values())
        offsets = {labels: value for (name, labels), value in m.items()
                   if name == "kafka_consumergroup_current_offset" and ("consumergroup", group) in labels}
        assert offsets == {(("consumergroup", group), ("partition", "0"), ("topic", TOPIC)): 3}
    finally:
        member.close()
