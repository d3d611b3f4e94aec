import pytest

from headwater.testing import BrokerProcess, KafkaCluster

from .postgres import pg_db, postgres  # noqa: F401  (fixtures for tests/cdc and tests/spark)


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
    """Apache Kafka, three KRaft nodes (`make jvm`'s jars), started once per test run for tests/cluster/
    and the Spark tests on it; a missing JDK or jar fails, never skips."""
    with KafkaCluster(3, tmp_path_factory.mktemp("kafka-cluster")) as cluster:
        yield cluster


@pytest.hookimpl(tryfirst=True)   # before xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs two workers) a module's tests stay on one worker, so
    its module-scoped broker starts once; every test of the one shared Spark session or the one
    Kafka cluster goes to the same worker, so the suite starts those JVMs once, not once per worker."""
    for item in items:
        shared = {"spark", "kafka_cluster"} & set(getattr(item, "fixturenames", ()))
        group = "spark" if shared else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
