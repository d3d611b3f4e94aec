"""Acknowledgement per batch against a real broker: the connector's producer reports failed
deliveries only, so a batch counts as acknowledged when the producer's queue is empty and
no failure was reported; a producer that reports every delivery is counted the same."""
import signal

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.cdc.envelope import ChangeEvent
from headwater.cdc.shipper import DeliveryFailed, Shipper, new_producer, producer_config
from headwater.testing import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("shipper") / "data", "--num-partitions", "3").start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("changes", 3), NewTopic("tiny", 1, config={"max.message.bytes": "200"})],
                                      operation_timeout=30).values():
        future.result()
    yield broker
    broker.stop()


def events(count, topic="changes", size=10):
    return [ChangeEvent(topic, b'{"id":%d}' % i, b"v" * size) for i in range(count)]


def test_batches_are_acknowledged_in_order_once_the_queue_is_empty(broker):
    shipper = Shipper(new_producer(broker.bootstrap))
    first, second = shipper.tracker.open(), shipper.tracker.open()
    broker.proc.send_signal(signal.SIGSTOP)  # nothing can be acknowledged meanwhile
    try:
        shipper.send_all(events(500), first)
        shipper.send_all(events(300), second)
        shipper.tracker.close(second, 200)
        assert shipper.poll(0) is None and shipper.delivered == 0  # in flight: not acknowledged
    finally:
        broker.proc.send_signal(signal.SIGCONT)
    assert shipper.flush(30) is None  # the second is acknowledged, but the first has no position yet
    shipper.tracker.close(first, 100)
    assert shipper.poll(0) == 200 and shipper.delivered == 800 and shipper.tracker.idle()


def test_a_refused_event_stops_the_position_before_its_batch(broker):
    shipper = Shipper(new_producer(broker.bootstrap))
    fine, refused = shipper.tracker.open(), shipper.tracker.open()
    shipper.send_all(events(50), fine)
    shipper.tracker.close(fine, 100)
    assert shipper.flush(30) == 100
    shipper.send_all(events(1, "tiny", size=1000), refused)  # over the topic's max.message.bytes
    shipper.tracker.close(refused, 200)
    with pytest.raises(DeliveryFailed, match="MSG_SIZE_TOO_LARGE"):
        shipper.flush(30)
    assert shipper.tracker.durable == 100 and shipper.delivered == 50


def test_a_producer_reporting_every_delivery_counts_each_event_once(broker):
    config = {k: v for k, v in producer_config(broker.bootstrap).items() if k != "delivery.report.only.error"}
    shipper = Shipper(Producer(config))
    batch = shipper.tracker.open()
    shipper.send_all(events(400), batch)
    shipper.tracker.close(batch, 100)
    stored = []
    shipper.produce("changes", b"position", b"100", lambda: stored.append(True))
    assert shipper.flush(30) == 100 and shipper.delivered == 400 and stored == [True]
