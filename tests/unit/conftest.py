import pytest

from .clock import ManualClock


@pytest.fixture
def clock():
    """A ManualClock for stepping a state machine in-process (the broker is given it)."""
    clock = ManualClock()
    yield clock
    clock.close()
