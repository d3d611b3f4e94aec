from pathlib import Path

import pytest

from headwater.testing import BrokerProcess, KafkaCluster

# Fixtures shared across the folders (pytest scopes a conftest to its directory).
pytest_plugins = [
    "tests.support.postgres",
    "tests.support.appender_fixtures",
    "tests.support.member_fixtures",
    "tests.support.store_fixtures",
    "tests.support.spark_fixtures",
]


@pytest.fixture
def start_broker(tmp_path):
    """Start real Headwater brokers with the given flags; every one is stopped after the test."""
    started = []

    def start(*flags: str) -> BrokerProcess:
        proc = BrokerProcess(tmp_path / f"data{len(started) or ''}", *flags).start()
        started.append(proc)
        return proc
    yield start
    for proc in started:
        if proc.proc.poll() is None:
            proc.stop()


@pytest.fixture
def broker(start_broker):
    """A real Headwater broker on an ephemeral loopback port, with a fresh data directory."""
    return start_broker("--num-partitions", "3")


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory):
    """Apache Kafka, three KRaft nodes (`make jvm`'s jars), started once per test run for tests/system/kafka_cluster/
    and the Spark tests on it; a missing JDK or jar fails, never skips."""
    # A directory that does not exist yet, as a user may name one: the cluster makes it.
    with KafkaCluster(3, tmp_path_factory.mktemp("kafka-cluster") / "data") as cluster:
        yield cluster


# A test's kind (`pytest -m unit` runs the fast ones) is what it starts: read from the names its
# module and the modules of its fixtures import (its folder says what it tests, not how).
SYSTEM = Path(__file__).parent / "system"
SPARK = {"spark", "kafka_connector", "SparkStandaloneCluster"}
SERVERS = {"BrokerProcess", "KafkaCluster", "PostgresServer", "KafkaTools", "MockCluster", "subprocess",
           "confluent_kafka", "kafka", "aiokafka"}


def kind(item: pytest.Item) -> str:
    if item.path.is_relative_to(SYSTEM):
        return "system"
    fixtures = getattr(item, "_fixtureinfo", None)
    funcs = [defs[-1].func for defs in (fixtures.name2fixturedefs.values() if fixtures else ())]  # the overriding def
    names = set(getattr(item, "fixturenames", ())) | set(vars(getattr(item, "module", None) or object))
    for func in funcs:
        if func.__module__.startswith("tests."):
            names |= set(func.__globals__)
    params = getattr(getattr(item, "callspec", None), "params", {}).values()
    return ("spark" if SPARK & names else
            "integration" if SERVERS & names or "postgres" in params else "unit")


@pytest.hookimpl(tryfirst=True)   # before xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs two workers) a module's tests stay on one worker, so
    its module-scoped broker starts once; every test of the one shared Spark session, Spark
    standalone cluster or Kafka cluster goes to the same worker, so the suite starts those JVMs
    once, not once per worker."""
    for item in items:
        shared = {"spark", "spark_cluster", "kafka_cluster"} & set(getattr(item, "fixturenames", ()))
        group = "spark" if shared else item.nodeid.split("::")[0]
        # A module's own xdist_group mark wins: xdist would join two marks into a third group,
        # splitting the module, and its module-scoped servers would start on both workers.
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))
        item.add_marker(kind(item))
