import pytest

from .clock import ManualClock


@pytest.fixture
def clock():
    """A ManualClock for stepping a state machine in-process."""
    clock = ManualClock()
    yield clock
    clock.close()
