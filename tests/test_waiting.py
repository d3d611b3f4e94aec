"""headwater.waiting in-process: the wait for a broker (one line per distinct reason, stops
when asked) and the filter that passes each distinct librdkafka line once."""
import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from headwater.waiting import DistinctOnce, Stopped, wait_for_broker


def test_each_reason_is_told_once_and_the_recovery_once():
    reasons = ["Local: Broker transport failure", "Local: Broker transport failure", "Local: Timed out"]
    told = []

    def attempt():
        if reasons:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, reasons.pop(0)))
        return "metadata"

    assert wait_for_broker(attempt, "127.0.0.1:1", on_wait=told.append) == "metadata"
    assert told == ["waiting for the broker at 127.0.0.1:1: Local: Broker transport failure (retrying; Ctrl-C stops)",
                    "waiting for the broker at 127.0.0.1:1: Local: Timed out (retrying; Ctrl-C stops)",
                    "the broker at 127.0.0.1:1 answers"]


def test_a_stop_request_ends_the_wait_and_other_errors_pass_through():
    attempts = []

    def down():
        attempts.append(1)
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    with pytest.raises(Stopped):
        wait_for_broker(down, "127.0.0.1:1", should_stop=lambda: len(attempts) == 2)
    assert len(attempts) == 2

    def refused():
        raise PermissionError("not a broker problem")

    with pytest.raises(PermissionError):
        wait_for_broker(refused, "127.0.0.1:1")


def _record(facility: str, instance: str, text: str) -> logging.LogRecord:
    # the shape confluent-kafka logs in: ("%s [%s] %s", facility, client instance, text)
    return logging.LogRecord("headwater.kafka", logging.ERROR, __file__, 0, "%s [%s] %s", (facility, instance, text), None)


def test_distinct_once_ignores_counts_durations_and_instances_not_addresses():
    once = DistinctOnce()
    lines = [_record("FAIL", f"rdkafka#consumer-{n}", f"[thrd:127.0.0.1:1/bootstrap]: Connect to ipv4#127.0.0.1:1 failed: Connection refused "
                                                      f"(after {n}ms in state CONNECT)") for n in range(50)]
    lines.append(_record("FAIL", "rdkafka#consumer-1", "Connect to ipv4#127.0.0.2:1 failed: Connection refused "
                                                       "(after 0ms in state CONNECT)"))  # another broker
    lines.append(_record("ERROR", "rdkafka#consumer-1", "1/1 brokers are down"))
    lines.append(_record("ERROR", "rdkafka#consumer-1", "1/1 brokers are down"))
    passed = [r.getMessage() for r in lines if once.filter(r)]
    assert passed == ["FAIL: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)",
                      "FAIL: Connect to ipv4#127.0.0.2:1 failed: Connection refused (after 0ms in state CONNECT)",
                      "ERROR: 1/1 brokers are down"]
    once.forget()
    assert once.filter(_record("ERROR", "rdkafka#consumer-2", "1/1 brokers are down"))
