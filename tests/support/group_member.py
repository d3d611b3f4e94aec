"""A consumer group member in its own process, so a test can SIGKILL it.

Processing a message = appending "partition offset value" to --out (flushed at once, so it
survives a SIGKILL); the position is committed after every --commit-every processed messages,
never before processing (at-least-once). SIGTERM closes the consumer cleanly (LeaveGroup).

    python -m tests.support.group_member --client confluent --bootstrap H:P --group G --topic T --out F
"""
from __future__ import annotations

import argparse
import signal
import time

HEARTBEAT_MS = 500


def confluent_member(args, process, stopping):
    from confluent_kafka import Consumer
    config = {"bootstrap.servers": args.bootstrap, "group.id": args.group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000}
    if args.group_protocol == "consumer":  # KIP-848: the broker assigns; timeouts are the group's
        config.update({"group.protocol": "consumer", "group.remote.assignor": args.assignor or "uniform"})
    else:
        config.update({"session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": HEARTBEAT_MS,
                       "partition.assignment.strategy": args.assignor or "range"})
    consumer = Consumer(config)
    consumer.subscribe([args.topic])
    uncommitted = 0
    while not stopping():
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        process(msg.partition(), msg.offset(), msg.value())
        uncommitted += 1
        if uncommitted >= args.commit_every:
            consumer.commit(asynchronous=False)
            uncommitted = 0
    consumer.close()


def kafka_python_member(args, process, stopping):
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    consumer = KafkaConsumer(args.topic, bootstrap_servers=args.bootstrap, group_id=args.group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=HEARTBEAT_MS,
                             metadata_max_age_ms=1000,
                             partition_assignment_strategy=[assignors[args.assignor or "range"]])
    # kafka-python 3.0.12: a leader that joins before it has the topic's metadata rejoins once
    # the metadata arrives, and if a poll times out during that rejoin's SyncGroup it never
    # heartbeats again (its rejoin flag was never set). Knowing the partitions first avoids it.
    consumer.partitions_for_topic(args.topic)
    uncommitted = 0
    while not stopping():
        for records in consumer.poll(timeout_ms=200, max_records=1).values():
            for r in records:
                process(r.partition, r.offset, r.value)
                uncommitted += 1
        if uncommitted >= args.commit_every:
            consumer.commit()
            uncommitted = 0
    consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=("confluent", "kafka-python"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--assignor")
    parser.add_argument("--commit-every", type=int, default=1)
    parser.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic",
                        help="consumer: KIP-848's protocol, the broker's assignor (confluent only)")
    parser.add_argument("--session-timeout-ms", type=int, default=30000,
                        help="6000 (the broker's minimum) where a test waits for an expiry; longer elsewhere, "
                             "so a starved machine does not expire live members")
    parser.add_argument("--delay-ms", type=int, default=0, help="time each message takes to process")
    args = parser.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    out = open(args.out, "a", buffering=1)

    def process(partition, offset, value):
        time.sleep(args.delay_ms / 1000)
        out.write(f"{partition} {offset} {value.decode()}\n")

    member = confluent_member if args.client == "confluent" else kafka_python_member
    member(args, process, lambda: bool(stop))
    out.close()


if __name__ == "__main__":
    main()
