"""Authorized operations (KIP-430): what a client may do with a topic, a group, the cluster.

Headwater has no authorizer, so, as a Kafka broker without one, it grants every operation
its resource type supports. The codec writes the set of AclOperation codes as Kafka's bit
field (bit ``1 << code``), and None as Kafka's "not asked" value (INT32_MIN).
"""
from __future__ import annotations

from enum import IntEnum


class AclOperation(IntEnum):
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


Op = AclOperation
TOPIC_OPERATIONS = (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
                    Op.ALTER_CONFIGS)
GROUP_OPERATIONS = (Op.READ, Op.DESCRIBE, Op.DELETE)
CLUSTER_OPERATIONS = (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                      Op.ALTER, Op.DESCRIBE)


def authorized_operations(asked: bool, operations: tuple[AclOperation, ...]) -> set[int] | None:
    """``operations``, all granted; None (not asked) unless ``asked``."""
    return {int(op) for op in operations} if asked else None


def bit_field(operations: tuple[AclOperation, ...]) -> int:
    """``operations`` as Kafka's bit field, for the messages whose codec takes the int."""
    return sum(1 << op for op in operations)
