"""One local SparkSession for the whole Spark suite (starting one costs ~10 s)."""

import os

import pytest

import headwater.spark
from headwater.testing import SparkStandaloneCluster, spark_kafka_jars


@pytest.fixture(scope="session")
def kafka_connector() -> list[str]:
    """Spark's own Kafka connector (`make jvm`) on the session's spark.jars; in CI a missing
    jar fails the run, by hand the tests that need it skip."""
    try:
        return spark_kafka_jars()
    except FileNotFoundError as missing:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(str(missing))


@pytest.fixture(scope="session")
def spark():
    # A session's jars are fixed when it starts: the connector is on it from the first test.
    try:
        conf = {"spark.jars": ",".join(spark_kafka_jars())}
    except FileNotFoundError:
        conf = {}   # kafka_connector() says so to the tests that need it
    session = headwater.spark.session(app_name="headwater-tests", conf=conf)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone cluster (a master and two workers), started once for the tests that run
    pipelines on one: against Headwater (tests/spark/test_cluster.py) and against Apache Kafka
    (tests/pipelines/test_kafka_cluster.py); both on the one worker of the shared session."""
    cluster = SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
    except Exception:
        print(cluster.log_tail())
        raise
    yield cluster
    cluster.stop()
