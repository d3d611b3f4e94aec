"""`headwater groups ...` as a user runs it (a subprocess), against a broker with known records."""
import json
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, Producer, TopicPartition

from tests.support.groups import holding_every_partition

BASE_TS = 1_700_000_000_000  # record i of partition p has timestamp BASE_TS + i * 1000
PER_PARTITION = 20


def groups_cli(broker, *args, check=True):
    result = subprocess.run([sys.executable, "-m", "headwater", "groups", *args, "--bootstrap-server",
                             broker.bootstrap], capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def groups_json(broker, *args):
    return json.loads(groups_cli(broker, *args, "--json").stdout)


def consumer(broker, group="replay"):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "heartbeat.interval.ms": 500})
    c.subscribe(["clicks"])
    return c


def consume(c, count, timeout=60):
    """(partition, offset) of `count` records, then a short extra poll that must find nothing more."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            got.append((msg.partition(), msg.offset()))
    extra = c.poll(1.0)
    assert extra is None or extra.error(), f"unexpected record {extra.partition()}-{extra.offset()}"
    return sorted(got)


def joined(c, timeout=60):
    """Poll until the group has given this consumer its partitions."""
    deadline = time.monotonic() + timeout
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    assert c.assignment()
    return c


def replay(broker, targets: dict[int, int]):
    """What a group member reads after a reset: from each partition's new offset to its end."""
    c = consumer(broker)
    got = consume(c, sum(PER_PARTITION - o for o in targets.values()))
    c.close()
    return got


def expected(targets: dict[int, int]):
    return sorted((p, o) for p, start in targets.items() for o in range(start, PER_PARTITION))


@pytest.fixture
def clicks(broker):
    """Topic clicks: 3 partitions x 20 records with known timestamps, fully consumed and committed by group replay."""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(3):
        for i in range(PER_PARTITION):
            producer.produce("clicks", value=b"%d-%d" % (p, i), partition=p, timestamp=BASE_TS + i * 1000)
    assert producer.flush(30) == 0
    c = consumer(broker)
    assert consume(c, 3 * PER_PARTITION) == expected({0: 0, 1: 0, 2: 0})
    c.commit(asynchronous=False)
    c.close()
    return broker


def test_list_and_describe_show_members_offsets_lag_and_age(clicks):
    broker = clicks
    assert {"group": "replay", "type": "classic", "state": "empty"} in groups_json(broker, "list")
    live = joined(consumer(broker, "replay"))
    described = groups_json(broker, "describe", "replay")
    (member,) = described["members"]
    assert described["state"] == "stable" and described["protocol"] == "range"
    assert member["partitions"] == ["clicks-0", "clicks-1", "clicks-2"] and member["host"].endswith("127.0.0.1")
    assert [(o["partition"], o["committed_offset"], o["log_end_offset"], o["lag"]) for o in described["offsets"]] == \
        [(p, PER_PARTITION, PER_PARTITION, 0) for p in range(3)]
    live.close()
    groups_cli(broker, "reset-offsets", "replay", "--topic", "clicks", "--to-offset", "15", "--execute")
    described = groups_json(broker, "describe", "replay")
    assert described["members"] == [] and [o["lag"] for o in described["offsets"]] == [5, 5, 5]
    now_s = time.time()
    for o in described["offsets"]:  # the oldest unconsumed record is number 15: BASE_TS + 15 s
        assert abs(o["oldest_unconsumed_age_s"] - (now_s - BASE_TS / 1000 - 15)) < 60
    table = groups_cli(broker, "describe", "replay").stdout
    assert "clicks" in table and "lag" in table and "committed" in table


def test_reset_offsets_each_mode_then_replay(clicks):
    broker = clicks

    def reset(*mode):
        rows = groups_json(broker, "reset-offsets", "replay", "--topic", "clicks", *mode, "--execute")
        return {r["partition"]: r["new_offset"] for r in rows}

    assert reset("--to-earliest") == {0: 0, 1: 0, 2: 0}
    assert replay(broker, {0: 0, 1: 0, 2: 0}) == expected({0: 0, 1: 0, 2: 0})
    assert reset("--to-offset", "12") == {0: 12, 1: 12, 2: 12}
    assert replay(broker, {0: 12, 1: 12, 2: 12}) == expected({0: 12, 1: 12, 2: 12})
    assert reset("--shift-by", "-4") == {0: 8, 1: 8, 2: 8}
    assert reset("--shift-by", "100") == {0: 20, 1: 20, 2: 20}  # clamped to the log end
    assert reset("--to-offset", "-7") == {0: 0, 1: 0, 2: 0}    # clamped to the log start
    moment = datetime.fromtimestamp((BASE_TS + 6500) / 1000, timezone.utc).isoformat()
    assert reset("--to-datetime", moment) == {0: 7, 1: 7, 2: 7}  # first record at or after 6.5 s
    assert replay(broker, {0: 7, 1: 7, 2: 7}) == expected({0: 7, 1: 7, 2: 7})
    dry = groups_json(broker, "reset-offsets", "replay", "--topic", "clicks", "--to-latest", "--dry-run")
    assert {r["new_offset"] for r in dry} == {20}
    assert reset("--shift-by", "0") == {0: 7, 1: 7, 2: 7}  # the dry run committed nothing
    assert reset("--to-latest") == {0: 20, 1: 20, 2: 20}
    assert replay(broker, {0: 20, 1: 20, 2: 20}) == []


def test_refusals_are_one_line_errors(clicks):
    broker = clicks
    live = joined(consumer(broker, "replay"))
    for args in (["reset-offsets", "replay", "--topic", "clicks", "--to-earliest", "--execute"], ["delete", "replay"]):
        result = groups_cli(broker, *args, check=False)
        assert result.returncode == 1 and "active member" in result.stderr and "Traceback" not in result.stderr
    live.close()
    before = groups_json(broker, "describe", "replay")["offsets"]
    assert [o["committed_offset"] for o in before] == [PER_PARTITION] * 3  # the refused reset changed nothing
    for args, message in ((["describe", "nope"], "does not exist"), (["delete", "nope"], "does not exist"),
                          (["reset-offsets", "replay", "--topic", "nope", "--to-earliest"], "topic 'nope' does not exist")):
        result = groups_cli(broker, *args, check=False)
        assert result.returncode == 1 and message in result.stderr and len(result.stderr.splitlines()) == 1
    result = groups_cli(broker, "reset-offsets", "replay", "--topic", "clicks", "--to-datetime", "soon", check=False)
    assert result.returncode == 2 and "not an ISO 8601 date-time" in result.stderr
    groups_cli(broker, "delete", "replay")
    assert "replay" not in {g["group"] for g in groups_json(broker, "list")}


def committed_offsets(broker, group: str, topic: str = "clicks", partitions: int = 3) -> dict[int, int]:
    """The group's committed offsets as confluent-kafka reads them (OffsetFetch; it joins no group)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                                timeout=30)}
    finally:
        c.close()


def test_reset_offsets_is_a_preview_unless_execute(clicks):
    broker = clicks
    before = committed_offsets(broker, "replay")
    assert before == {p: PER_PARTITION for p in range(3)}
    preview = groups_cli(broker, "reset-offsets", "replay", "--topic", "clicks", "--to-earliest")
    assert "nothing committed; add --execute" in preview.stderr
    assert [line.split("\t") for line in preview.stdout.splitlines()] == [
        ["topic", "partition", "committed_offset", "new_offset"], *[["clicks", str(p), "20", "0"] for p in range(3)]]
    assert committed_offsets(broker, "replay") == before
    groups_cli(broker, "reset-offsets", "replay", "--topic", "clicks", "--to-earliest", "--execute")
    assert committed_offsets(broker, "replay") == {p: 0 for p in range(3)}


def test_reset_offsets_refuses_a_group_that_does_not_exist(clicks):
    broker = clicks
    typo = groups_cli(broker, "reset-offsets", "replya", "--topic", "clicks", "--to-earliest", "--execute", check=False)
    assert typo.returncode == 1 and len(typo.stderr.splitlines()) == 1
    assert "consumer group 'replya' does not exist" in typo.stderr and "--allow-new-group" in typo.stderr
    assert committed_offsets(broker, "replya") == {p: OFFSET_INVALID for p in range(3)}
    assert "replya" not in {g["group"] for g in groups_json(broker, "list")}
    groups_cli(broker, "reset-offsets", "fresh", "--topic", "clicks", "--to-offset", "5", "--execute",
               "--allow-new-group")
    assert committed_offsets(broker, "fresh") == {p: 5 for p in range(3)}


def test_lag_counts_partitions_never_committed(broker):
    """A group that committed some partitions of a topic lags by every record of the others."""
    produced = {0: 30, 1: 17, 2: 0, 3: 25}
    committed = {0: 10, 1: 17}
    admin_topic = "orders-" + "x" * 40
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    subprocess.run([sys.executable, "-m", "headwater", "topics", "create", admin_topic, "--partitions", "4",
                    "--bootstrap-server", broker.bootstrap], check=True, capture_output=True, timeout=60)
    for partition, count in produced.items():
        for i in range(count):
            producer.produce(admin_topic, value=b"%d" % i, partition=partition)
    assert producer.flush(30) == 0
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "billing", "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(admin_topic, p, o) for p, o in committed.items()], asynchronous=False)
    committer.close()
    described = groups_json(broker, "describe", "billing")
    truth = {p: count - committed.get(p, 0) for p, count in produced.items()}
    assert {o["partition"]: o["lag"] for o in described["offsets"]} == truth
    assert described["lag"] == sum(truth.values()) == 45
    assert [o["committed_offset"] for o in described["offsets"]] == [10, 17, None, None]
    # the table, piped, has every partition on a line of its own, the long topic name whole
    table = groups_cli(broker, "describe", "billing").stdout
    rows = [line.split("\t") for line in table.splitlines() if line.startswith(admin_topic + "\t")]
    assert [(int(r[1]), int(r[5])) for r in rows] == sorted(truth.items())


def test_a_kip848_group_is_listed_and_described_with_its_assignment_and_lag(clicks):
    """A consumer group on KIP-848's protocol: type consumer (the classic one's is classic), its member
    with the partitions it owns and those the broker's assignor targets, lag counting the partitions
    it never committed."""
    broker = clicks
    member = holding_every_partition(broker.bootstrap, "replay-848", "clicks", 3, **{"group.protocol": "consumer"})
    try:
        member.commit(offsets=[TopicPartition("clicks", 0, 5)], asynchronous=False)
        listed = groups_json(broker, "list")
        assert {"group": "replay-848", "type": "consumer", "state": "stable"} in listed
        assert {"group": "replay", "type": "classic", "state": "empty"} in listed
        described = groups_json(broker, "describe", "replay-848")
        every = ["clicks-0", "clicks-1", "clicks-2"]
        assert (described["type"], described["state"], described["protocol"]) == ("consumer", "stable", "uniform")
        assert [(m["member"], m["partitions"], m["target_partitions"]) for m in described["members"]] == [
            (member.memberid(), every, every)]
        assert [(o["partition"], o["committed_offset"], o["lag"]) for o in described["offsets"]] == [
            (0, 5, PER_PARTITION - 5), (1, None, PER_PARTITION), (2, None, PER_PARTITION)]
        assert described["lag"] == 3 * PER_PARTITION - 5
    finally:
        member.close()
