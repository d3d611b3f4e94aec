"""The consumer-group protocol's (KIP-848) message classes: kafka-python 3.0.12 has no schemas for
them, so they are generated here by kafka-python's own machinery from ``protocol/schemas/*.json``."""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from headwater.protocol import schemas


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=schemas): pass
class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=schemas): pass
class ConsumerGroupDescribeRequest(ApiMessage, load_json=schemas): pass
class ConsumerGroupDescribeResponse(ApiMessage, load_json=schemas): pass
