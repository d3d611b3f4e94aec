"""Idempotent produce: retries of appended batches are answered with their original offsets."""
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest

from headwater import records
from headwater.testing import BrokerProcess

from tests.support.clients import confluent_consume, confluent_produce, kafka_python_consume, kafka_python_produce
from tests.support.proxy import ResponseLosingProxy
from tests.support.wire import Wire

OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH = 45, 47


def produce(wire, batch):
    P = ProduceRequest[8]
    request = P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name="idem", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    return wire.request(request, 8).responses[0].partition_responses[0]


def idempotent_batch(pid, epoch, sequence, n=3):
    recs = [records.Record(i, 1_700_000_000_000 + i, b"k", b"v%d-%d" % (sequence, i)) for i in range(n)]
    return records.encode_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=sequence)


def test_sequence_rules_on_the_wire(broker):
    wire = Wire(broker.bootstrap)
    init = wire.request(InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60000), 1)
    assert init.error_code == 0
    other = wire.request(InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60000), 1)
    assert other.producer_id != init.producer_id
    pid = init.producer_id
    first = produce(wire, idempotent_batch(pid, 0, 0))
    second = produce(wire, idempotent_batch(pid, 0, 3))
    assert (first.error_code, first.base_offset, second.base_offset) == (0, 0, 3)
    # a retry of either batch gets its original offset back and appends nothing
    assert produce(wire, idempotent_batch(pid, 0, 0)).base_offset == 0
    assert produce(wire, idempotent_batch(pid, 0, 3)).base_offset == 3
    # a gap in the sequence is refused
    assert produce(wire, idempotent_batch(pid, 0, 9)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    # a bumped epoch restarts at 0; the old epoch is fenced
    assert produce(wire, idempotent_batch(pid, 1, 0)).base_offset == 6
    assert produce(wire, idempotent_batch(pid, 0, 6)).error_code == INVALID_PRODUCER_EPOCH
    consumed = kafka_python_consume(broker.bootstrap, "idem", [0], 9)
    assert [o for _, o, *_ in consumed] == list(range(9))


def test_retry_after_broker_restart_is_still_recognised(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        wire = Wire(broker.bootstrap)
        pid = wire.request(InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60000), 1).producer_id
        assert produce(wire, idempotent_batch(pid, 0, 0)).base_offset == 0
        broker.kill()
        broker.restart()
        wire = Wire(broker.bootstrap)
        assert produce(wire, idempotent_batch(pid, 0, 0)).base_offset == 0  # duplicate, from the log
        assert produce(wire, idempotent_batch(pid, 0, 3)).base_offset == 3
        fresh = wire.request(InitProducerIdRequest[1](transactional_id=None, transaction_timeout_ms=60000), 1)
        assert fresh.producer_id > pid  # ids are never handed out twice


def _through_losing_proxy(tmp_path, produce_with, consume_with):
    proxy = ResponseLosingProxy()
    with BrokerProcess(tmp_path / "data", "--advertised-listener", f"127.0.0.1:{proxy.port}") as broker:
        proxy.start(broker.port)
        messages = [(b"key-%d" % (i % 3), b"value-%d" % i, []) for i in range(500)]
        delivered = produce_with(f"127.0.0.1:{proxy.port}", messages)
        assert proxy.lost == 1, "the proxy did not lose a produce response"
        consumed = consume_with(broker.bootstrap, len(messages))
    proxy.close()
    values = [v for *_, v, _ in consumed]
    assert len(values) == len(set(values)) == len(messages), "duplicates or losses after the retry"
    assert sorted(consumed) == sorted(delivered)


def test_confluent_retry_yields_no_duplicates(tmp_path):
    _through_losing_proxy(
        tmp_path,
        lambda bootstrap, msgs: confluent_produce(bootstrap, "retried", msgs, **{"enable.idempotence": True,
                                                                                 "linger.ms": 20}),
        lambda bootstrap, n: confluent_consume(bootstrap, "retried", [0], n))


def test_kafka_python_retry_yields_no_duplicates(tmp_path):
    _through_losing_proxy(
        tmp_path,
        lambda bootstrap, msgs: kafka_python_produce(bootstrap, "retried", msgs, enable_idempotence=True),
        lambda bootstrap, n: kafka_python_consume(bootstrap, "retried", [0], n))
