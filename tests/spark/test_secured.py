"""The `headwater` source and sink over SASL_SSL: the `kafka.security.protocol`, `kafka.sasl.*` and
`kafka.ssl.ca.location` options reach librdkafka, as the Kafka connector passes them through."""
import subprocess
import sys

import pytest

from headwater.testing import BrokerProcess

PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker with only a SASL_SSL listener; alice is its super user. Yields the Spark options."""
    base = tmp_path_factory.mktemp("spark-secured")
    for args in (["certs", "--out", str(base / "certs")],
                 ["users", "create", "--offline", "--data-dir", str(base / "data"), "alice", "--password", PASSWORD,
                  "--iterations", "4096"]):
        subprocess.run([sys.executable, "-m", "headwater", *args], check=True, capture_output=True)
    with BrokerProcess(base / "data", "--listener", "SASL_SSL://127.0.0.1:0", "--super-user", "User:alice",
                       "--ssl-certfile", str(base / "certs" / "broker.pem"),
                       "--ssl-keyfile", str(base / "certs" / "broker.key")) as proc:
        yield {"kafka.bootstrap.servers": proc.bootstrap, "kafka.security.protocol": "SASL_SSL",
               "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.username": "alice",
               "kafka.sasl.password": PASSWORD, "kafka.ssl.ca.location": str(base / "certs" / "ca.pem")}


def test_sink_and_source_over_sasl_ssl(spark, secured):
    rows = [("k%d" % i, "v%d" % i) for i in range(10)]
    spark.createDataFrame(rows, "key string, value string").write.format("headwater") \
        .options(**secured).option("topic", "secured").mode("append").save()
    back = spark.read.format("headwater").options(**secured).option("subscribe", "secured").load().collect()
    assert sorted((bytes(r.key).decode(), bytes(r.value).decode()) for r in back) == sorted(rows)
