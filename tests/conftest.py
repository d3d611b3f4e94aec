import pytest

from headwater.testing import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    """A real Headwater broker on an ephemeral loopback port, with a fresh data directory."""
    proc = BrokerProcess(tmp_path / "data", "--num-partitions", "3").start()
    yield proc
    if proc.proc.poll() is None:
        proc.stop()
