"""Push subscriptions (`headwater push`) against a real broker and a real, unreliable HTTP endpoint."""
from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, TopicPartition

from headwater.push.receiver import WebhookReceiver
from headwater.push.subscription import COMMIT_INTERVAL, DLQ_ATTEMPTS, DLQ_ORIGIN, DLQ_REASON
from headwater.testing import BrokerProcess, wait_until

from tests.support.clients import confluent_consume, confluent_produce, sample_messages

SECRET = b"shared-secret"
PARTITIONS = [0, 1, 2]


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("push") / "data", "--num-partitions", "3") as proc:
        yield proc.bootstrap


def produced(bootstrap, topic, messages) -> dict[tuple[str, int, int], tuple]:
    """Ground truth: (topic, partition, offset) -> (key, value, headers) as the broker acknowledged them."""
    return {(topic, p, o): (k, v, h) for p, o, k, v, h in confluent_produce(bootstrap, topic, messages)}


def push(bootstrap, topic, url, group, *flags) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "headwater", "push", topic, url, "--group", group,
                             "--bootstrap-server", bootstrap, "--from-beginning", "--timeout", "0.5",
                             "--backoff", "0.1", "--max-backoff", "0.2",
                             "-X", "session.timeout.ms=6000", *flags],  # a killed member's partitions move on soon
                            env={**os.environ, "HEADWATER_PUSH_SECRET": SECRET.decode()})


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 143  # SIGTERM: stopped cleanly


def committed(bootstrap, topic, group) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    offsets = consumer.committed([TopicPartition(topic, p) for p in PARTITIONS], timeout=10)
    consumer.close()
    return {tp.partition: tp.offset for tp in offsets if tp.offset >= 0}


def push_until_done(bootstrap, topic, truth, receiver, group, *flags) -> list:
    """Run `headwater push` until every record but the poison ones is acknowledged, every poison one
    dead-lettered and the commits reach the end; the dead letters."""
    poisoned = sum(1 for m in truth.values() if m[1] == b"poison")
    proc = push(bootstrap, topic, receiver.url, group, *flags)
    try:
        wait_until(lambda: len(receiver.acknowledged) == len(truth) - poisoned, timeout=120, what="all acknowledged")
        dead = confluent_consume(bootstrap, f"{topic}.dlq", PARTITIONS, poisoned, timeout=60)
        wait_until(lambda: committed(bootstrap, topic, group) == {
            p: max(o for (_, q, o) in truth if q == p) + 1 for p in PARTITIONS}, what="offsets committed to the end")
    finally:
        stop(proc)
    return dead


def check_dead_letters(dead, truth, attempts: bytes) -> None:
    """Exactly the poison records, each with its origin, the reason and the attempts."""
    poisoned = {where for where, m in truth.items() if m[1] == b"poison"}
    assert sorted(((k, v) for _, _, k, v, _ in dead), key=repr) == sorted((truth[w][:2] for w in poisoned), key=repr)
    for _, _, key, value, headers in dead:
        meta = dict(headers)
        assert meta[DLQ_REASON] == b"HTTP 500" and meta[DLQ_ATTEMPTS] == attempts
        where = (meta[DLQ_ORIGIN[0]].decode(), int(meta[DLQ_ORIGIN[1]]), int(meta[DLQ_ORIGIN[2]]))
        assert where in poisoned and truth[where][:2] == (key, value)


def test_every_record_acknowledged_once_after_dedup_and_poison_dead_lettered(bootstrap):
    topic = "orders"
    poison = {i for i in range(0, 240, 37)}  # these always get a 500
    messages = [(k, b"poison" if i in poison else v, h) for i, (k, v, h) in enumerate(sample_messages(240))]
    truth = produced(bootstrap, topic, messages)
    healthy = {where: m for where, m in truth.items() if m[1] != b"poison"}
    with WebhookReceiver(secret=SECRET, fail_rate=0.3, hang_rate=0.03, seed=1,
                         always_fail=lambda d: d["value"] == "cG9pc29u") as receiver:  # base64 of b"poison"
        dead = push_until_done(bootstrap, topic, truth, receiver, "g-orders", "--max-in-flight", "8",
                               "--max-attempts", "15")
        assert set(receiver.acknowledged_values()) == set(healthy)
        for where, value in receiver.acknowledged_values().items():
            assert value == healthy[where][1]
        assert receiver.answers[500] > 0 and receiver.answers[0] > 0, "the endpoint failed and hung sometimes"
        assert receiver.bad_signatures == 0
        assert 2 <= receiver.max_in_flight <= 8
        for where, (key, value, headers) in truth.items():
            if value == b"poison":
                assert receiver.attempts[where] == 15, "a poison record is tried exactly --max-attempts times"
    check_dead_letters(dead, truth, b"15")


def test_ordering_by_key_delivers_one_at_a_time_per_key_in_offset_order(bootstrap):
    topic = "accounts"
    truth = produced(bootstrap, topic, sample_messages(150, keys=5))
    with WebhookReceiver(secret=SECRET, fail_rate=0.3, seed=2) as receiver:
        proc = push(bootstrap, topic, receiver.url, "g-accounts", "--ordering", "key", "--max-in-flight", "8",
                    "--max-attempts", "15")
        try:
            wait_until(lambda: len(receiver.acknowledged) == len(truth), timeout=120, what="all acknowledged")
        finally:
            stop(proc)
    assert receiver.max_key_in_flight == 1
    assert receiver.max_in_flight >= 2, "different keys still go in parallel"
    by_key = defaultdict(list)
    for delivery in receiver.arrivals:
        by_key[delivery["partition"], delivery["key"]].append(delivery["offset"])
    for offsets in by_key.values():
        assert offsets == sorted(offsets), "a key's records arrive in offset order, retries included"


def expected_envelope(where, key, value, headers) -> dict:
    """Ground truth of an acknowledged body, from what was produced (the timestamp aside)."""
    def b64(data):
        return None if data is None else base64.b64encode(data).decode()
    return {"topic": where[0], "partition": where[1], "offset": where[2], "key": b64(key), "value": b64(value),
            "headers": [{"key": k, "value": b64(v)} for k, v in headers]}


def test_batches_deliver_every_record_as_one_by_one_in_key_order_and_dead_letter_only_poison(bootstrap):
    topic = "batched"
    poison = {17, 18, 95, 202}  # 202 has a null key
    messages = [(k, b"poison" if i in poison else v, h) for i, (k, v, h) in enumerate(sample_messages(300, keys=7))]
    truth = produced(bootstrap, topic, messages)
    healthy = {where: m for where, m in truth.items() if m[1] != b"poison"}
    with WebhookReceiver(secret=SECRET, fail_rate=0.2, seed=4, always_fail=lambda d: d["value"] == "cG9pc29u") \
            as receiver:
        dead = push_until_done(bootstrap, topic, truth, receiver, "g-batched", "--batch-size", "16",
                               "--batch-attempts", "2", "--ordering", "key", "--max-in-flight", "4",
                               "--max-attempts", "8")
    assert receiver.bad_signatures == 0
    for where, delivery in receiver.acknowledged.items():
        assert isinstance(delivery.pop("timestamp"), int) and delivery.pop("attempt") >= 1
        assert delivery == expected_envelope(where, *healthy[where])
    assert max(len(request) for request in receiver.requests) == 16, "records went in batches"
    for request in receiver.requests:
        assert len({d["partition"] for d in request}) == 1, "a batch holds one partition's records"
        assert [d["offset"] for d in request] == sorted(d["offset"] for d in request)
    assert receiver.max_key_in_flight == 1 and receiver.max_in_flight >= 2
    firsts = defaultdict(list)  # (partition, key) -> its lowest offset in each request, in arrival order
    for request in receiver.requests:
        for key in {(d["partition"], d["key"]) for d in request}:
            firsts[key].append(min(d["offset"] for d in request if (d["partition"], d["key"]) == key))
    for offsets in firsts.values():
        assert offsets == sorted(offsets), "a key's later records wait for its earlier ones, retries included"
    for where, m in truth.items():
        if m[1] == b"poison":
            assert receiver.attempts[where] == 2 + 8, "twice in its batch, then alone --max-attempts times"
    check_dead_letters(dead, truth, b"8")


@pytest.mark.parametrize("batching", [[], ["--batch-size", "8"]], ids=["one-by-one", "batches"])
def test_sigkill_loses_nothing_acknowledged_and_skips_nothing_unacknowledged(bootstrap, batching):
    topic = f"payments-{len(batching)}"
    group = f"g-{topic}"
    truth = produced(bootstrap, topic, sample_messages(400))
    stuck = (topic, 0, 10)  # refused until the crash: records after it are acknowledged, it is not
    refusing = [True]
    with WebhookReceiver(secret=SECRET, fail_rate=0.3, seed=3,
                         always_fail=lambda d: refusing[0] and (d["topic"], d["partition"], d["offset"]) == stuck) \
            as receiver:
        proc = push(bootstrap, topic, receiver.url, group, "--max-in-flight", "4", "--max-attempts", "1000", *batching)
        wait_until(lambda: any(p == 0 and o > 20 for _, p, o in receiver.acknowledged), what="acks past the stuck one")
        wait_until(lambda: committed(bootstrap, topic, group).get(0, 0) >= stuck[2], what="commits up to it")
        time.sleep(2 * COMMIT_INTERVAL)  # more commit rounds, in which a wrong commit would pass the stuck record
        proc.kill()
        proc.wait()
        before_crash = set(receiver.acknowledged)
        arrivals_before = len(receiver.arrivals)
        commits = committed(bootstrap, topic, group)
        assert commits.get(0, 0) <= stuck[2], "committed past a record never acknowledged"
        for (_, partition, offset) in truth:
            if offset < commits.get(partition, 0):
                assert (topic, partition, offset) in before_crash, "committed past a record never acknowledged"
        assert len(before_crash) < len(truth), "the crash came before the end"
        acknowledged_ends = {(r[-1]["partition"], r[-1]["offset"] + 1) for r in receiver.requests}
        assert all((p, o) in acknowledged_ends for p, o in commits.items()), "commits fall at the end of a request"

        refusing[0] = False
        proc = push(bootstrap, topic, receiver.url, group, "--max-in-flight", "4", "--max-attempts", "15", *batching)
        try:
            wait_until(lambda: len(receiver.acknowledged) == len(truth), timeout=120, what="all acknowledged")
        finally:
            stop(proc)
    assert set(receiver.acknowledged_values()) == set(truth)
    for where, value in receiver.acknowledged_values().items():
        assert value == truth[where][1]
    resumed_from = {}
    for delivery in receiver.arrivals[arrivals_before:]:
        p = delivery["partition"]
        resumed_from[p] = min(resumed_from.get(p, delivery["offset"]), delivery["offset"])
    assert all(resumed_from[p] == commits.get(p, 0) for p in resumed_from), "the restart resumes at the commits"
