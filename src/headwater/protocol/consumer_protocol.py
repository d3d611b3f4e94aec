"""The consumer protocol's subscription (the member metadata of ``protocol_type`` "consumer"
groups), which the coordinator otherwise keeps opaque: OffsetDelete must know which topics a
live group subscribes to."""
from __future__ import annotations

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

CONSUMER_PROTOCOL_TYPE = "consumer"


def subscribed_topics(metadata: bytes) -> set[str]:
    """The topics a consumer's subscription names; none if it does not parse."""
    try:
        return set(ConsumerProtocolSubscription.decode(metadata).topics)
    except Exception:  # noqa: BLE001 (a client's bytes: any parse failure means "no topics known")
        return set()
