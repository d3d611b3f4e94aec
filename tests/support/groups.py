"""Helpers for the consumer group tests: member processes and the group's view through AdminClient."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]


class MemberProcess:
    """tests/support/group_member.py as a child process; its processed records are in a file."""

    running: list["MemberProcess"] = []  # reaped after every test (tests/support/member_fixtures.py)

    def __init__(self, bootstrap, group, topic, client, out: Path, **options):
        self.out = out
        cmd = [sys.executable, "-m", "tests.support.group_member", "--client", client, "--bootstrap", bootstrap,
               "--group", group, "--topic", topic, "--out", str(out)]
        for name, value in options.items():
            cmd += [f"--{name.replace('_', '-')}", str(value)]
        out.touch()
        self.log = out.with_suffix(".log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        MemberProcess.running.append(self)

    @classmethod
    def reap(cls) -> None:
        """Kill members a failed test left behind: an orphaned client spins reconnecting to a dead broker."""
        while cls.running:
            member = cls.running.pop()
            if member.proc.poll() is None:
                member.kill()

    def records(self) -> list[tuple[int, int, str]]:
        lines = self.out.read_text().splitlines()
        return [(int(p), int(o), v) for p, o, v in (line.split(" ", 2) for line in lines)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        assert self.proc.wait(30) == 0, self.log.read_text()[-3000:]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def admin(bootstrap) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap, name, partitions) -> None:
    client = admin(bootstrap)  # kept alive until the future is done
    client.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def describe(bootstrap, group):
    client = admin(bootstrap)
    return client.describe_consumer_groups([group])[group].result(30)


def wait_stable(broker, group, members: int, partitions: int, timeout=60):
    """Wait until `members` members hold disjoint assignments covering `partitions` partitions;
    returns {member id: set of partitions}."""
    bootstrap = broker.bootstrap
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        desc = describe(bootstrap, group)
        owned = {m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in desc.members}
        total = [p for ps in owned.values() for p in ps]
        if (desc.state.name == "STABLE" and len(owned) == members and len(total) == partitions
                and len(set(total)) == partitions):
            return owned
        time.sleep(0.2)
    raise AssertionError(f"group {group} not stable with {members} members: {desc}\n"
                         f"{broker.log_file.read_text()[-5000:]}")


def committed(bootstrap, group, topic, partitions) -> dict[int, int]:
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in partitions])]
    client = admin(bootstrap)
    result = client.list_consumer_group_offsets(request)[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def wait_for(predicate, timeout=60, message="condition"):
    return wait_until(predicate, timeout, 0.1, message)


def holding_every_partition(bootstrap, group, topic, partitions, timeout=60, **config) -> Consumer:
    """A confluent-kafka member of `group` subscribed to `topic`, returned once it was assigned all
    `partitions` of it (give {"group.protocol": "consumer"} for KIP-848's protocol); close it after."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **config})
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout
    while len(consumer.assignment()) < partitions:
        assert time.monotonic() < deadline, f"no assignment of {topic}'s {partitions} partitions in {group}"
        msg = consumer.poll(0.2)
        assert msg is None or not msg.error(), msg.error()
    return consumer
