"""The table of API handlers: each API family's module registers its handlers here.

A handler is ``async def handle(broker, header, request) -> response | None`` (None: no
response is sent, as for a produce with acks=0).
"""
from __future__ import annotations

from contextvars import ContextVar

from headwater.protocol.messages import Api, ApiKey, api

HANDLERS: dict[int, tuple[Api, object]] = {}

# The client address of the connection whose request is being handled (each connection is a task).
client_host: ContextVar[str] = ContextVar("client_host", default="")


def handles(key: ApiKey, min_version: int, max_version: int):
    def register(func):
        HANDLERS[key] = (api(key, min_version, max_version), func)
        return func
    return register


def supported_apis() -> dict[int, Api]:
    return {key: spec for key, (spec, _) in HANDLERS.items()}


def answer_partitions(broker, request_topics, topic_result, answer, *, topic_field: str = "name",
                      partition_field: str = "partition_index") -> list:
    """The common response shape: one result per requested topic, one ``answer(log or None,
    topic name, requested partition)`` per partition. Field names differ between APIs."""
    results = []
    for topic in request_topics:
        name = getattr(topic, topic_field)
        partitions = [answer(broker.logs.get_log(name, getattr(part, partition_field)), name, part)
                      for part in topic.partitions]
        results.append(topic_result(**{topic_field: name, "partitions": partitions}))
    return results
