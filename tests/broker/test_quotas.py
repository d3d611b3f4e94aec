"""Client quotas in-process, on a clock moved by hand."""
import asyncio
from types import SimpleNamespace

import pytest

from headwater.broker.quota_apis import alter_client_quotas
from headwater.broker.quotas import ClientQuotas, QuotaError
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.protocol.quota_names import CLIENT_ID, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE

AlterClientQuotasRequest = MESSAGE_CLASSES[ApiKey.ALTER_CLIENT_QUOTAS][0]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_debt_beyond_a_second_of_burst_is_throttled_at_the_quota_rate():
    clock = Clock()
    quotas = ClientQuotas(now=clock)
    quotas.alter("heavy", {PRODUCER_BYTE_RATE: 1000})
    assert quotas.charge("heavy", PRODUCER_BYTE_RATE, 1000) == 0  # the second of burst
    assert quotas.charge("heavy", PRODUCER_BYTE_RATE, 500) == 0.5
    clock.now = 0.5  # the debt is paid
    assert quotas.charge("heavy", PRODUCER_BYTE_RATE, 250) == 0.25
    assert quotas.charge("other", PRODUCER_BYTE_RATE, 10**9) == 0  # no quota, no throttle


def test_the_default_applies_to_client_ids_without_their_own_and_quotas_persist(tmp_path):
    quotas = ClientQuotas(tmp_path / "q.json", now=Clock())
    quotas.alter(None, {CONSUMER_BYTE_RATE: 100})
    quotas.alter("vip", {CONSUMER_BYTE_RATE: 10_000})
    quotas.alter("vip", {REQUEST_PERCENTAGE: 50})
    reloaded = ClientQuotas(tmp_path / "q.json")
    assert reloaded.quota("anyone", CONSUMER_BYTE_RATE) == 100
    assert reloaded.quota("vip", CONSUMER_BYTE_RATE) == 10_000
    reloaded.alter("vip", {CONSUMER_BYTE_RATE: None})
    assert ClientQuotas(tmp_path / "q.json").quota("vip", CONSUMER_BYTE_RATE) == 100


def test_which_request_charges_which_quota():
    quotas = ClientQuotas(now=Clock())
    for key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE):
        quotas.alter("c", {key: 100})
    quotas.alter("c", {REQUEST_PERCENTAGE: 10})  # 0.1 s of broker time per second
    assert quotas.throttle("c", ApiKey.PRODUCE, 300, 10, 0.0) == 2.0     # 200 bytes over, at 100/s
    assert quotas.throttle("c", ApiKey.FETCH, 10, 150, 5.0) == 0.5       # a fetch's long poll is not charged
    assert quotas.throttle("c", ApiKey.METADATA, 10, 10**6, 0.3) == pytest.approx(2.0)  # 0.2 s over, at 0.1 s/s


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf")])
def test_a_quota_must_be_a_positive_number(value):
    quotas = ClientQuotas()
    with pytest.raises(QuotaError, match="must be a positive number"):
        quotas.alter("heavy", {PRODUCER_BYTE_RATE: value})  # NaN would never throttle
    assert quotas.configs == {}


def test_alter_client_quotas_checks_every_op_first_and_validate_only_changes_nothing():
    broker = SimpleNamespace(quotas=ClientQuotas())
    Entry = AlterClientQuotasRequest.EntryData

    def alter(validate_only: bool, *ops: tuple[str, float]) -> int:
        request = AlterClientQuotasRequest(validate_only=validate_only, entries=[Entry(
            entity=[Entry.EntityData(entity_type=CLIENT_ID, entity_name="c")],
            ops=[Entry.OpData(key=k, value=v, remove=False) for k, v in ops])])
        return asyncio.run(alter_client_quotas(broker, None, request)).entries[0].error_code

    assert alter(True, (PRODUCER_BYTE_RATE, float("nan"))) == ErrorCode.INVALID_REQUEST
    assert alter(True, (PRODUCER_BYTE_RATE, 1000)) == ErrorCode.NONE
    assert alter(False, (PRODUCER_BYTE_RATE, 1000), (CONSUMER_BYTE_RATE, -5)) == ErrorCode.INVALID_REQUEST
    assert broker.quotas.configs == {}  # neither the validate-only op nor the good half of a refused entry
    assert alter(False, (PRODUCER_BYTE_RATE, 1000)) == ErrorCode.NONE
    assert broker.quotas.configs == {"c": {PRODUCER_BYTE_RATE: 1000}}
