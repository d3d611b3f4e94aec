"""The share-group (KIP-932) message classes: kafka-python 3.0.12 has no schemas for them, so
they are generated here by kafka-python's own machinery from ``protocol/schemas/*.json``."""
from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from headwater.protocol import schemas


class ShareGroupHeartbeatRequest(ApiMessage, load_json=schemas): pass
class ShareGroupHeartbeatResponse(ApiMessage, load_json=schemas): pass
class ShareGroupDescribeRequest(ApiMessage, load_json=schemas): pass
class ShareGroupDescribeResponse(ApiMessage, load_json=schemas): pass
class ShareFetchRequest(ApiMessage, load_json=schemas): pass
class ShareFetchResponse(ApiMessage, load_json=schemas): pass
class ShareAcknowledgeRequest(ApiMessage, load_json=schemas): pass
class ShareAcknowledgeResponse(ApiMessage, load_json=schemas): pass
class DescribeShareGroupOffsetsRequest(ApiMessage, load_json=schemas): pass
class DescribeShareGroupOffsetsResponse(ApiMessage, load_json=schemas): pass
class AlterShareGroupOffsetsRequest(ApiMessage, load_json=schemas): pass
class AlterShareGroupOffsetsResponse(ApiMessage, load_json=schemas): pass
class DeleteShareGroupOffsetsRequest(ApiMessage, load_json=schemas): pass
class DeleteShareGroupOffsetsResponse(ApiMessage, load_json=schemas): pass
