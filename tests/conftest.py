import pytest

from headwater.testing import BrokerProcess

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


@pytest.hookimpl(tryfirst=True)   # before xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs two workers) a module's tests stay on one worker, so
    its module-scoped broker starts once; every test of the one shared Spark session goes to the
    same worker, so the suite starts one JVM for them, not one per worker."""
    for item in items:
        group = "spark" if "spark" in getattr(item, "fixturenames", ()) else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
