import pytest

from tests.support.groups import MemberProcess


@pytest.fixture(autouse=True)
def reap_member_processes():
    yield
    MemberProcess.reap()
