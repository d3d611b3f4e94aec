"""The source's partition reader outside Spark, against real brokers: it reads through a
broker restart without losing or repeating a record, fails clearly when no broker answers
or the login is refused, and refuses security options it cannot honour."""

import subprocess
import sys

import pytest
from confluent_kafka import Producer

from headwater.protocol.request import AuthenticationFailed
from headwater.spark.fetcher import FetchError
from headwater.spark.options import OptionError, reader_options
from headwater.spark.partition_reader import OffsetRange, read_range
from headwater.testing import produce_all

ROWS = 30_000


def fill(bootstrap: str) -> list[bytes]:
    values = [b"%06d" % i * 10 for i in range(ROWS)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    produce_all(producer, "ledger", values)
    assert producer.flush(60) == 0
    return values


def test_a_broker_restart_mid_range_loses_and_repeats_nothing(start_broker):
    broker = start_broker("--num-partitions", "1")
    values = fill(broker.bootstrap)
    reader = read_range({"bootstrap.servers": broker.bootstrap}, OffsetRange("ledger", 0, 0, ROWS), False, True)
    batches = [next(reader)]
    assert 0 < batches[0].num_rows < ROWS  # the rest is read after the restart
    broker.stop()  # the reader's connection, and the fetch it sent ahead, go with it
    broker.start()
    batches.extend(reader)
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(ROWS))
    assert [v for b in batches for v in b.column("value").to_pylist()] == values


def test_no_broker_answering_is_a_clear_error_within_the_socket_timeout(start_broker):
    broker = start_broker("--num-partitions", "1")
    fill(broker.bootstrap)
    broker.stop()
    client = {"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": "1500"}
    with pytest.raises(FetchError, match=r"ledger-0 at offset 0: no answer from its leader within "
                                         r"socket.timeout.ms \(1.5 s\); last: .*Connection refused"):
        list(read_range(client, OffsetRange("ledger", 0, 0, ROWS), False, True))


def test_a_refused_login_and_unsupported_security_options(start_broker, tmp_path):
    subprocess.run([sys.executable, "-m", "headwater", "users", "create", "--offline", "--data-dir",
                    str(tmp_path / "data"), "alice", "--password", "right", "--iterations", "4096"],
                   check=True, capture_output=True)
    broker = start_broker("--listener", "SASL_PLAINTEXT://127.0.0.1:0", "--super-user", "User:alice")
    client = {"bootstrap.servers": f"127.0.0.1:{broker.listeners['SASL_PLAINTEXT']}",
              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
              "sasl.password": "wrong"}
    with pytest.raises(AuthenticationFailed):
        list(read_range(client, OffsetRange("ledger", 0, 0, 10), False, True))

    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": "ledger",
               "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "GSSAPI"}
    with pytest.raises(OptionError, match="cannot honour .*sasl.mechanism=GSSAPI"):
        reader_options(options, streaming=False)
    with pytest.raises(OptionError, match="cannot honour .*ssl.keystore.location"):
        reader_options({**options, "kafka.sasl.mechanism": "PLAIN", "kafka.ssl.keystore.location": "k.p12"},
                       streaming=False)
