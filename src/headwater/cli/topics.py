"""`headwater topics create|list|describe|alter|delete`: topics and their configs.

Built on confluent-kafka's AdminClient, so the same commands work against a Kafka cluster.
Partition sizes come from DescribeLogDirs, which only kafka-python's admin client sends.
"""
from __future__ import annotations

import logging
import socket
import time

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewPartitions, NewTopic, OffsetSpec)

from headwater.cli.common import (CommandError, add_client_args, admin_result, client_config, confirm, emit,
                                  emit_document, kafka_python_config, name_value, positive_int)

TIMEOUT = 15  # seconds for any one admin call: a missing broker is reported, not waited for
METADATA_STEP = 0.5  # seconds: the first call is asked in steps, so a refused login or a closed port ends it early


def add_parser(subparsers) -> None:
    topics = subparsers.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = topics.add_subparsers(dest="topics_action", required=True)

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=positive_int, default=1, help="number of partitions (default 1)")
    create.add_argument("--config", type=name_value, action="append", default=[], metavar="NAME=VALUE",
                        help="topic config, e.g. cleanup.policy=compact (repeatable)")
    create.set_defaults(func=create_topic)

    listing = actions.add_parser("list", help="list topics")
    listing.set_defaults(func=list_topics)

    describe = actions.add_parser("describe", help="a topic's configs, partitions, offsets and sizes")
    describe.add_argument("topic")
    describe.add_argument("--all-configs", action="store_true", help="show defaults too, not only overrides")
    describe.set_defaults(func=describe_topic)

    alter = actions.add_parser("alter", help="add partitions, set or remove topic configs")
    alter.add_argument("topic")
    alter.add_argument("--partitions", type=positive_int, metavar="N",
                       help="grow the topic to N partitions (keys may then map to other partitions)")
    alter.add_argument("--config", type=name_value, action="append", default=[], metavar="NAME=VALUE",
                       help="set a config (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="NAME",
                       help="remove an override: back to the default (repeatable)")
    alter.set_defaults(func=alter_topic)

    delete = actions.add_parser("delete", help="delete topics and all their records")
    delete.add_argument("topics", nargs="+", metavar="topic")
    delete.set_defaults(func=delete_topics)

    for parser in (create, listing, describe, alter, delete):
        add_client_args(parser)


# kafka-python logs connection failures; the command reports them itself, in one line.
logging.getLogger("kafka").addHandler(logging.NullHandler())


def _admin(args) -> AdminClient:
    return AdminClient(client_config(args, **{"socket.timeout.ms": TIMEOUT * 1000}))


def _result(admin, future, what: str):
    return admin_result(admin, future, TIMEOUT, what)


def _metadata(args, admin):
    """Metadata of every topic (asking for one by name could auto-create it)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            return admin.list_topics(timeout=METADATA_STEP)
        except KafkaException as exc:
            admin.poll(0)  # serves the error callback, which raises for a refused login
            if time.monotonic() >= deadline or _nobody_listens(args.bootstrap_server):
                raise CommandError(f"cannot reach a broker at {args.bootstrap_server}: {exc.args[0].str()}") from None


def _nobody_listens(bootstrap: str) -> bool:
    """Every bootstrap address refuses TCP connections: waiting longer would not help."""
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=METADATA_STEP).close()
            return False
        except ConnectionRefusedError:
            continue
        except (OSError, ValueError):
            return False
    return True


def create_topic(args) -> int:
    admin = _admin(args)
    topic = NewTopic(args.topic, args.partitions, replication_factor=-1, config=dict(args.config))
    _result(admin, admin.create_topics([topic], request_timeout=TIMEOUT)[args.topic],
            f"cannot create topic {args.topic!r}")
    confirm(args, f"created topic {args.topic} with {args.partitions} partition(s)",
            [{"topic": args.topic, "partitions": args.partitions}])
    return 0


def list_topics(args) -> int:
    metadata = _metadata(args, _admin(args))
    rows = [{"topic": name, "partitions": len(t.partitions)} for name, t in sorted(metadata.topics.items())]
    emit(args, rows, title="topics")
    return 0


def _configs(admin, topic: str) -> dict:
    resource = ConfigResource("topic", topic)
    return _result(admin, admin.describe_configs([resource], request_timeout=TIMEOUT)[resource],
                   f"cannot describe topic {topic!r}")


def _offsets(admin, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """partition -> (log start offset, log end offset)."""
    found = {}
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
        futures = admin.list_offsets({TopicPartition(topic, p): spec for p in partitions}, request_timeout=TIMEOUT)
        for tp, future in futures.items():
            offset = _result(admin, future, f"cannot list offsets of {topic!r}").offset
            found.setdefault(tp.partition, []).append(offset)
    return {p: tuple(v) for p, v in found.items()}


def partition_sizes(bootstrap: str, topic: str, partitions: list[int], **security) -> dict[int, int]:
    """partition -> bytes on disk, from DescribeLogDirs (kafka-python's admin client asks every broker)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError as KPKafkaError

    admin = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, **security, request_timeout_ms=TIMEOUT * 1000)
        answers = admin.describe_log_dirs({topic: partitions})
    except KPKafkaError as exc:
        raise CommandError(f"cannot read partition sizes from {bootstrap}: {exc}") from None
    finally:
        if admin is not None:
            admin.close()
    sizes: dict[int, int] = {}
    for answer in answers:
        for log_dir in answer["log_dirs"]:
            for t in log_dir["topics"]:
                for p in t["partitions"]:
                    if t["name"] == topic:  # on a cluster every replica answers: one replica's size
                        sizes[p["partition_index"]] = max(sizes.get(p["partition_index"], 0), p["partition_size"])
    return sizes


def describe_topic(args) -> int:
    admin = _admin(args)
    metadata = _metadata(args, admin).topics.get(args.topic)
    if metadata is None:
        raise CommandError(f"unknown topic {args.topic!r}")
    configs = _configs(admin, args.topic)
    partitions = sorted(metadata.partitions)
    offsets = _offsets(admin, args.topic, partitions)
    sizes = partition_sizes(args.bootstrap_server, args.topic, partitions, **kafka_python_config(args))
    config_rows = [{"config": name, "value": entry.value,
                    "source": "topic" if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value else "default"}
                   for name, entry in sorted(configs.items())
                   if args.all_configs or entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value]
    partition_rows = [{"partition": p, "log_start_offset": offsets[p][0], "log_end_offset": offsets[p][1],
                       "records": offsets[p][1] - offsets[p][0], "bytes": sizes.get(p)} for p in partitions]
    emit_document(args, {"topic": args.topic, "configs": config_rows, "partitions": partition_rows},
                  [(f"{args.topic}: {'configs' if args.all_configs else 'config overrides'}",
                    config_rows or [{"config": "(none: every config has its default)"}]),
                   (f"{args.topic}: partitions", partition_rows)])
    return 0


def alter_topic(args) -> int:
    if not args.config and not args.delete_config and args.partitions is None:
        raise CommandError("nothing to alter: give --partitions N, --config NAME=VALUE or --delete-config NAME")
    admin = _admin(args)
    changed, messages = [], []
    if args.partitions is not None:
        _result(admin, admin.create_partitions([NewPartitions(args.topic, args.partitions)],
                                        request_timeout=TIMEOUT)[args.topic],
                f"cannot grow topic {args.topic!r} to {args.partitions} partitions")
        changed.append({"topic": args.topic, "partitions": args.partitions})
        messages.append(f"topic {args.topic} now has {args.partitions} partition(s)")
    if args.config or args.delete_config:
        entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in args.config]
        entries += [ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE)
                    for name in args.delete_config]
        resource = ConfigResource("topic", args.topic, incremental_configs=entries)
        _result(admin, admin.incremental_alter_configs([resource], request_timeout=TIMEOUT)[resource],
                f"cannot alter topic {args.topic!r}")
        changed += [{"topic": args.topic, "config": e.name, "value": e.value} for e in entries]
        messages.append(f"altered topic {args.topic}")
    confirm(args, "\n".join(messages), changed)
    return 0


def delete_topics(args) -> int:
    admin = _admin(args)
    futures = admin.delete_topics(args.topics, request_timeout=TIMEOUT)
    for name in args.topics:
        _result(admin, futures[name], f"cannot delete topic {name!r}")
    confirm(args, "\n".join(f"deleted topic {name}" for name in args.topics),
            [{"topic": name, "deleted": True} for name in args.topics])
    return 0
