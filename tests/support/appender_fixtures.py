import pytest

from tests.support.clock import ManualClock
from tests.support.parts import close_appender, open_appender


@pytest.fixture
def clock():
    """A ManualClock for stepping a state machine in-process."""
    clock = ManualClock()
    yield clock
    clock.close()


@pytest.fixture
def appender(tmp_path):
    """The append path over logs in ``tmp_path / "data"`` (see parts.py)."""
    appender = open_appender(tmp_path / "data")
    yield appender
    close_appender(appender)
