"""Restarts and crashes: nothing acknowledged is lost, a torn tail is cut off."""
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.testing import BrokerProcess

from tests.support.clients import confluent_consume, confluent_produce, log_end_offsets, sample_messages


def test_restart_keeps_everything(broker):
    delivered = confluent_produce(broker.bootstrap, "events", sample_messages(3000), **{"compression.type": "zstd"})
    assert broker.stop() == 0
    broker.restart()
    consumed = confluent_consume(broker.bootstrap, "events", range(3), len(delivered))
    assert sorted(consumed) == sorted(delivered)
    # appends continue after the old end
    more = confluent_produce(broker.bootstrap, "events", [(b"k", b"after restart", [])])
    last_before = max(o for p, o, *_ in delivered if p == more[0][0])
    assert more[0][1] == last_before + 1


def _produce_until_killed(bootstrap, topic, acked, stop, name="p", idempotent=False):
    # message.timeout.ms is what the flush after a kill waits out (the records in flight to the
    # dead broker), once per kill: short, as the records acknowledged before the kill are what counts
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 2000, "enable.idempotence": idempotent,
                         **({} if idempotent else {"retries": 0})})
    i = 0
    def report(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
    while not stop.is_set():
        producer.produce(topic, key=str(i % 7).encode(), value=f"{name}-payment-{i}".encode(), on_delivery=report)
        producer.poll(0)
        i += 1
        if i % 200 == 0:
            time.sleep(0.002)
    producer.flush(10)


def test_sigkill_during_acks_all_produce_loses_nothing_acknowledged(tmp_path):
    """Several producers at once (idempotent and not), so the group commit answers many requests per
    fsync: every record a delivery report acknowledged is in the log after each SIGKILL."""
    with BrokerProcess(tmp_path / "data", "--num-partitions", "2", "--flush", "always") as proc:
        all_acked = []
        for _ in range(4):
            acked, stop = [], threading.Event()
            threads = [threading.Thread(target=_produce_until_killed,
                                        args=(proc.bootstrap, "payments", acked, stop, f"p{n}", n % 2 == 0))
                       for n in range(4)]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 30
            while len(acked) < 3000 and time.monotonic() < deadline:
                time.sleep(0.05)
            proc.kill()  # mid-produce: requests are in flight
            stop.set()
            for thread in threads:
                thread.join()
            assert acked, "nothing was acknowledged before the kill"
            all_acked += acked
            proc.restart()
        # Records written just before a kill but never acknowledged are in the log too: read it all.
        everything = log_end_offsets(proc.bootstrap, "payments", range(2))
        assert everything >= len(all_acked)
        consumed = confluent_consume(proc.bootstrap, "payments", range(2), everything)
        present = {(p, o): v for p, o, _, v, _ in consumed}
        missing = [(p, o, v) for p, o, v in all_acked if present.get((p, o)) != v]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:3]}"


def test_acknowledged_records_past_an_old_checkpoint_survive_a_sigkill(tmp_path):
    """The recovery-point file is written every log.flush.offset.checkpoint.interval.ms (60 s
    here), not at each fsync: acks=all records past it are in the log after a SIGKILL, once each,
    as recovery validates them again."""
    with BrokerProcess(tmp_path / "data", "--flush", "always") as proc:
        before = confluent_produce(proc.bootstrap, "ledger", sample_messages(1500), acks="all")
        assert proc.stop() == 0
        proc.restart()   # the clean shutdown wrote the checkpoint: 1500
        after = confluent_produce(proc.bootstrap, "ledger", sample_messages(1500), acks="all")
        assert int((proc.data_dir / "ledger-0" / "recovery-point").read_text()) == len(before)
        proc.kill()
        proc.restart()
        assert log_end_offsets(proc.bootstrap, "ledger", [0]) == len(before) + len(after)
        consumed = confluent_consume(proc.bootstrap, "ledger", [0], len(before) + len(after))
        assert consumed == before + after


def test_torn_tail_is_truncated_on_recovery(tmp_path):
    with BrokerProcess(tmp_path / "data") as proc:
        delivered = confluent_produce(proc.bootstrap, "torn", sample_messages(500))
        proc.kill()
        segment = sorted(Path(tmp_path / "data" / "torn-0").glob("*.log"))[-1]
        intact = segment.read_bytes()
        with open(segment, "ab") as f:  # half a batch, as a crash mid-write leaves it
            f.write(intact[:40])
        proc.restart()
        consumed = confluent_consume(proc.bootstrap, "torn", [0], len(delivered))
        assert sorted(consumed) == sorted(delivered)
        assert segment.stat().st_size == len(intact)
        more = confluent_produce(proc.bootstrap, "torn", [(b"k", b"next", [])])
        assert more[0][1] == len(delivered)


def test_corrupted_last_batch_is_dropped_on_recovery(tmp_path):
    with BrokerProcess(tmp_path / "data") as proc:
        first = confluent_produce(proc.bootstrap, "flipped", [(b"a", b"first batch", [])])
        second = confluent_produce(proc.bootstrap, "flipped", [(b"b", b"second batch", [])])
        proc.kill()
        segment = sorted(Path(tmp_path / "data" / "flipped-0").glob("*.log"))[-1]
        data = bytearray(segment.read_bytes())
        data[-3] ^= 0xFF  # flip a byte inside the last batch: its CRC no longer matches
        segment.write_bytes(data)
        proc.restart()
        consumed = confluent_consume(proc.bootstrap, "flipped", [0], 1, timeout=5)
        assert consumed == first
        assert second[0][1] == 1


def test_flush_messages_one_answers_even_acks_1_after_its_fsync(start_broker):
    """A topic's flush.messages=1 goes through the group commit too: an acks=1 produce is answered
    after the fsync, which moves the partition's recovery point (its file written after each fsync
    with a checkpoint interval of 0)."""
    broker = start_broker("--log-flush-offset-checkpoint-interval-ms", "0")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("audit", 1, 1, config={"flush.messages": "1"})])["audit"].result(30)
    for i in range(3):
        [(_, offset, *_)] = confluent_produce(broker.bootstrap, "audit", [(None, b"entry %d" % i, [])], acks=1)
        assert int((broker.data_dir / "audit-0" / "recovery-point").read_text()) == offset + 1
