"""The consumer protocol's assignment layout (protocol type "consumer"), read only to refuse garbage.

    version i16, [topic string(i16 length), [partition i32] (i32 count)] (i32 count), user_data bytes (nullable)

Versions 1-3 append fields after user_data; trailing bytes are allowed, as Kafka's own
reader allows them. An empty assignment means "nothing assigned".
"""
from __future__ import annotations

import struct


class MalformedAssignment(ValueError):
    pass


def partitions(data: bytes) -> dict[str, list[int]]:
    """Topic -> partitions of one member's assignment; MalformedAssignment if it does not parse."""
    if not data:
        return {}
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        if version < 0:
            raise MalformedAssignment(f"negative assignment version {version}")
        pos = 2
        (topics,), pos = struct.unpack_from(">i", data, pos), pos + 4
        if not 0 <= topics <= len(data):
            raise MalformedAssignment(f"topic count {topics} in an assignment of {len(data)} bytes")
        out = {}
        for _ in range(topics):
            (size,), pos = struct.unpack_from(">h", data, pos), pos + 2
            if size < 0 or pos + size > len(data):
                raise MalformedAssignment("topic name runs past the end of the assignment")
            topic, pos = data[pos:pos + size].decode(), pos + size
            (count,), pos = struct.unpack_from(">i", data, pos), pos + 4
            if not 0 <= count <= (len(data) - pos) // 4:
                raise MalformedAssignment(f"partition count {count} runs past the end of the assignment")
            out[topic] = list(struct.unpack_from(f">{count}i", data, pos))
            pos += 4 * count
        (user_data,), pos = struct.unpack_from(">i", data, pos), pos + 4
        if user_data > len(data) - pos:
            raise MalformedAssignment("user data runs past the end of the assignment")
        return out
    except (struct.error, UnicodeDecodeError) as exc:
        raise MalformedAssignment(f"truncated or garbled assignment: {exc}") from None
