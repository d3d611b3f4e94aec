"""Resource limits: a data directory that fills up, few file descriptors, huge topic creations.

The broker answers each with a Kafka error code, keeps serving, and loses nothing it
acknowledged. The full disk is a real tmpfs filled by a file (tests/support/small_disk.py); the
descriptor limit is the broker process's own RLIMIT_NOFILE.
"""
import subprocess
import sys

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka.protocol.metadata import MetadataRequest

from headwater.testing import BrokerProcess

from tests.support.small_disk import fill_up, small_disk
from tests.support.clients import confluent_consume, confluent_produce
from tests.broker.test_bad_input import batch, produce
from tests.support.wire import Wire

KAFKA_STORAGE_ERROR, POLICY_VIOLATION = 56, 44


def _idempotent_producer(bootstrap: str, acked: list, errors: list) -> tuple[Producer, callable]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 120_000, "retry.backoff.max.ms": 500})

    def send(values: list[bytes]) -> None:
        def report(err, msg):
            if err is None:
                acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                errors.append(err)
        for value in values:
            producer.produce("orders", value=value, partition=int(value.split(b"-")[1]) % 2, on_delivery=report)
            producer.poll(0)
    return producer, send


def _assert_log_is(bootstrap: str, acked: list) -> None:
    """Each partition holds exactly the acknowledged records, in offset order from 0, none twice."""
    total = len(acked)
    consumed = confluent_consume(bootstrap, "orders", [0, 1], total, timeout=60)
    assert len(consumed) == total
    for partition in (0, 1):
        got = [(o, v) for p, o, _, v, _ in consumed if p == partition]
        expected = sorted((o, v) for p, o, v in acked if p == partition)
        assert got == expected
        assert [o for o, _ in got] == list(range(len(got)))
    assert len({v for *_, v in acked}) == total


def test_full_disk_answers_storage_error_then_production_resumes_and_survives_a_kill(tmp_path):
    with small_disk(tmp_path / "disk", "8m") as disk:
        proc = BrokerProcess(disk / "data", "--num-partitions", "2", log_file=tmp_path / "broker.log").start()
        try:
            acked, errors = [], []
            producer, send = _idempotent_producer(proc.bootstrap, acked, errors)
            send([b"order-%d-" % i + b"x" * 1000 for i in range(2000)])
            assert producer.flush(60) == 0 and not errors and len(acked) == 2000
            filler = fill_up(disk)

            # A producer that does not retry sees the broker's answer: an error code, not a dropped connection.
            probe_errors = []
            probe = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all", "retries": 0,
                              "enable.idempotence": False})
            probe.produce("orders", value=b"p" * 20_000, partition=0, on_delivery=lambda err, msg: probe_errors.append(err))
            assert probe.flush(30) == 0
            assert [e.code() for e in probe_errors] == [KafkaError.KAFKA_STORAGE_ERROR]

            # The idempotent producer keeps trying while the disk is full; freeing space lets it through.
            send([b"order-%d-" % i + b"y" * 1000 for i in range(2000, 2600)])
            producer.poll(3)
            filler.unlink()
            assert producer.flush(120) == 0 and not errors
            assert len(acked) == 2600
            _assert_log_is(proc.bootstrap, acked)

            proc.kill()
            proc.restart()
            _assert_log_is(proc.bootstrap, acked)
            in_partition_1 = sum(1 for p, _, _ in acked if p == 1)
            producer, send = _idempotent_producer(proc.bootstrap, acked, errors)
            send([b"order-2601-after-the-kill"])
            assert producer.flush(60) == 0 and not errors
            assert acked[-1][:2] == (1, in_partition_1)
        finally:
            if proc.proc.poll() is None:
                proc.stop()


def test_a_first_start_on_a_full_disk_is_a_one_line_error_and_the_next_start_gets_a_cluster_id(tmp_path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        filler = fill_up(disk)
        failed = subprocess.run([sys.executable, "-m", "headwater", "broker", "--data-dir", str(disk / "data"),
                                 "--port", "0"], capture_output=True, text=True, timeout=60)
        assert failed.returncode != 0
        assert failed.stderr.strip().splitlines() == [failed.stderr.strip()]
        assert "No space left on device" in failed.stderr and "Traceback" not in failed.stderr
        filler.unlink()
        proc = BrokerProcess(disk / "data", log_file=tmp_path / "broker.log").start()
        try:
            cluster_id = KafkaAdminClient(bootstrap_servers=proc.bootstrap).describe_cluster()["cluster_id"]
            assert cluster_id and cluster_id == (disk / "data" / "cluster-id").read_text()
        finally:
            proc.stop()


def _metadata_auto_create(wire: Wire, names: list[str]) -> list[int]:
    M = MetadataRequest[8]
    request = M(topics=[M.MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    return [t.error_code for t in wire.request(request, 8).topics]


def test_few_descriptors_huge_create_topics_and_auto_creation_leave_the_broker_serving(tmp_path):
    proc = BrokerProcess(tmp_path / "data", "--max-partitions", "1600", "--max-partitions-per-request", "1200",
                         open_files=128).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        huge = admin.create_topics([NewTopic("huge", 100_000, 1)])["huge"].exception(60)
        assert huge is not None and huge.args[0].code() == POLICY_VIOLATION
        split = admin.create_topics([NewTopic("half-a", 700, 1), NewTopic("half-b", 700, 1)])
        assert all(f.exception(60).args[0].code() == POLICY_VIOLATION for f in split.values())
        # Far more partitions than the broker has descriptors.
        admin.create_topics([NewTopic("wide", 1000, 1)])["wide"].result(120)

        wire = Wire(proc.bootstrap, timeout=120)
        codes = _metadata_auto_create(wire, [f"auto-{i}" for i in range(800)])
        created = codes.count(0)
        assert created > 500 and codes == [0] * created + [POLICY_VIOLATION] * (800 - created)
        everything = wire.request(MetadataRequest[8](topics=None, allow_auto_topic_creation=False,
                                                     include_cluster_authorized_operations=False,
                                                     include_topic_authorized_operations=False), 8)
        assert sum(len(t.partitions) for t in everything.topics) == 1600  # --max-partitions, reached
        assert produce(wire, "auto-past-the-limit", 0, batch()).error_code == POLICY_VIOLATION
        refused = admin.create_topics([NewTopic("one-more", 1, 1)])["one-more"].exception(60)
        assert refused.args[0].code() == POLICY_VIOLATION

        # Still serving: new connections, a round trip through many partitions (descriptors recycled), a new topic.
        messages = [(f"k{i}".encode(), f"v{i}".encode(), []) for i in range(3000)]
        delivered = confluent_produce(proc.bootstrap, "wide", messages)
        assert len({p for p, *_ in delivered}) > 500
        consumed = confluent_consume(proc.bootstrap, "wide", range(1000), len(delivered), timeout=120)
        assert sorted(consumed) == sorted(delivered)
        admin.delete_topics(["auto-0"])["auto-0"].result(60)
        admin.create_topics([NewTopic("fresh", 1, 1)])["fresh"].result(60)
        assert confluent_produce(proc.bootstrap, "fresh", [(b"k", b"v", [])])[0][:2] == (0, 0)
        assert proc.stop() == 0
        assert "Traceback" not in proc.log_file.read_text()
    finally:
        if proc.proc.poll() is None:
            proc.stop()
