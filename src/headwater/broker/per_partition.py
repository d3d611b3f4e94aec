"""The response shape most partition APIs share: results per requested topic, then per partition."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headwater.broker.broker import Broker
    from headwater.log import Log


def answer_partitions(broker: Broker, request_topics, topic_result: type,
                      answer: Callable[[Log | None, str, Any], Any], *, topic_field: str = "name",
                      partition_field: str = "partition_index") -> list:
    """One ``topic_result`` per requested topic, one ``answer(log or None, topic name, requested
    partition)`` per partition. Field names differ between APIs."""
    results = []
    for topic in request_topics:
        name = getattr(topic, topic_field)
        partitions = [answer(broker.log_manager.get_log(name, getattr(part, partition_field)), name, part)
                      for part in topic.partitions]
        results.append(topic_result(**{topic_field: name, "partitions": partitions}))
    return results
