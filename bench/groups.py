"""Consumer group speed: how long a rebalance takes when a member joins or leaves a group of 8,
and the consume rate of a 4-member group over 8 partitions next to a single consumer.

    .venv/bin/python bench/groups.py [--records 200000] [--repeats 3] [--smoke]

A rebalance is timed from the join (subscribe) or leave (close) to the moment every member
has its new assignment; it should be bounded by the clients' heartbeat interval (how soon
the others hear "rebalance in progress"), not by the broker, so it is run at two intervals.
Consumers are confluent-kafka (librdkafka); group members of the throughput run are separate
processes. One Headwater broker on loopback; no Kafka peer is available on this machine.
"""
import argparse
import itertools
import multiprocessing as mp
import statistics
import threading
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.testing import bench_arguments, bench_workdir, produce_all, start_broker, wait_until

SESSION_MS = 6000


class Member(threading.Thread):
    """A group member polling in a thread, remembering when it last received an assignment."""

    def __init__(self, bootstrap, group, topic, heartbeat_ms):
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": SESSION_MS,
                                  "heartbeat.interval.ms": heartbeat_ms, "enable.auto.commit": False})
        self.topic, self.assigned_at, self.partitions = topic, 0.0, []
        self.stopping = threading.Event()

    def on_assign(self, consumer, partitions):
        self.partitions = [p.partition for p in partitions]
        self.assigned_at = time.monotonic()

    def run(self):
        self.consumer.subscribe([self.topic], on_assign=self.on_assign)
        while not self.stopping.is_set():
            self.consumer.poll(0.05)
        self.consumer.close()  # LeaveGroup

    def leave(self):
        self.stopping.set()
        self.join()


def create_topic(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the topic exists
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def settled(members, since, partitions):
    """Every member was (re)assigned after `since` and together they hold every partition once."""
    held = [p for m in members for p in m.partitions]
    return all(m.assigned_at > since for m in members) and sorted(held) == list(range(partitions))


def rebalance_times(bootstrap, heartbeat_ms, repeats):
    """(join seconds, leave seconds) of a group growing from 7 to 8 members and shrinking back, median."""
    topic, partitions = f"rebalance-{heartbeat_ms}", 16
    create_topic(bootstrap, topic, partitions)
    group = f"bench-{heartbeat_ms}"
    members = [Member(bootstrap, group, topic, heartbeat_ms) for _ in range(7)]
    for m in members:
        m.start()
    wait_until(lambda: settled(members, 0, partitions), 120, 0.005)
    joins, leaves = [], []
    for _ in range(repeats):
        time.sleep(1)
        t0 = time.monotonic()
        newcomer = Member(bootstrap, group, topic, heartbeat_ms)
        newcomer.start()
        members.append(newcomer)
        wait_until(lambda: settled(members, t0, partitions), 120, 0.005)
        joins.append(time.monotonic() - t0)
        time.sleep(1)
        t0 = time.monotonic()
        members.pop().leave()
        wait_until(lambda: settled(members, t0, partitions), 120, 0.005)
        leaves.append(time.monotonic() - t0)
    for m in members:
        m.leave()
    return statistics.median(joins), statistics.median(leaves)


def consume_member(bootstrap, group, topic, total, target, times):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
                         "fetch.max.bytes": 8 << 20})
    consumer.subscribe([topic])
    while total.value < target:
        batch = consumer.consume(10_000, 0.2)
        got = sum(1 for m in batch if not m.error())
        if got:
            now = time.time()
            with total.get_lock():
                if total.value == 0:
                    times[0] = now
                total.value += got
                times[1] = now
    consumer.close()


def consume_rate(bootstrap, topic, members, records):
    """Records/s for a group of `members` processes reading `records` records: first record to last."""
    ctx = mp.get_context("spawn")
    total, times = ctx.Value("q", 0), ctx.Array("d", 2)
    group = f"rate-{members}"
    procs = [ctx.Process(target=consume_member, args=(bootstrap, group, topic, total, records, times))
             for _ in range(members)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    return total.value / (times[1] - times[0])


def produce(bootstrap, topic, records):
    create_topic(bootstrap, topic, 8)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "compression.type": "none"})
    produce_all(producer, topic, itertools.repeat(b"x" * 100, records), keys=(str(i).encode() for i in range(records)))
    assert producer.flush(120) == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="records of 100 bytes for the consume run")
    parser.add_argument("--repeats", type=int, default=3, help="joins and leaves per heartbeat interval")
    args = bench_arguments(parser, {"records": 20_000, "repeats": 1})
    tmp = bench_workdir("headwater-bench-")
    broker = start_broker(tmp / "data", "--flush", "never")
    try:
        rows = []
        for heartbeat_ms in (500, 3000):
            join_s, leave_s = rebalance_times(broker.bootstrap, heartbeat_ms, args.repeats)
            rows.append((f"rebalance, member joins a group of 7 (heartbeat {heartbeat_ms} ms)", f"{join_s:.2f} s"))
            rows.append((f"rebalance, member leaves a group of 8 (heartbeat {heartbeat_ms} ms)", f"{leave_s:.2f} s"))
        produce(broker.bootstrap, "rate", args.records)
        for members in (1, 4):
            rate = consume_rate(broker.bootstrap, "rate", members, args.records)
            rows.append((f"consume, {members} member(s) over 8 partitions, 100-byte records", f"{rate:,.0f} records/s"))
    finally:
        broker.stop()
    width = max(len(name) for name, _ in rows)
    print(f"{'Headwater consumer groups':<{width}}  figure")
    for name, figure in rows:
        print(f"{name:<{width}}  {figure}")


if __name__ == "__main__":
    main()
