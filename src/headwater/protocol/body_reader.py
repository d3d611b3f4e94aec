"""A cursor over a request body for the decoders written by hand (``fetch_request``,
``produce_request``, ``share_requests``): each field taken only if the body holds it, nulls
refused where Kafka's schema allows none; the flexible versions' compact forms and tagged
fields too. Every failure is a ``ValueError``, as the generated decoder's errors are."""
from __future__ import annotations

import struct

_INT16, _INT32 = struct.Struct(">h"), struct.Struct(">i")


class BodyReader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf) -> None:
        self.buf, self.pos = memoryview(buf), 0

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if end > len(self.buf):
            raise self._past_end(end)
        chunk, self.pos = self.buf[self.pos:end], end
        return chunk

    def unpack(self, fields: struct.Struct) -> tuple:
        # unpacked in place, not from a slice taken first: a call and a view fewer per field
        pos, end = self.pos, self.pos + fields.size
        if end > len(self.buf):
            raise self._past_end(end)
        self.pos = end
        return fields.unpack_from(self.buf, pos)

    def _past_end(self, end: int) -> ValueError:
        return ValueError(f"the body ends at byte {len(self.buf)}, a field runs to {end}")

    def count(self, what: str) -> int:
        (n,) = self.unpack(_INT32)
        if n < 0:
            raise ValueError(f"{what} is null, and the schema does not allow null there")
        return n

    def string(self, what: str) -> str:
        text = self.nullable_string()
        if text is None:
            raise ValueError(f"{what} is null, and the schema does not allow null there")
        return text

    def nullable_string(self) -> str | None:
        (n,) = self.unpack(_INT16)
        return None if n < 0 else str(self.take(n), "utf-8")

    # The flexible versions' forms: lengths and counts as unsigned varints, one more than the
    # value (0 is null), and each struct ending in its tagged fields.

    def uvarint(self) -> int:
        value = 0
        for shift in range(0, 35, 7):
            (byte,) = self.take(1)
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise ValueError("a varint runs past 5 bytes")

    def compact_count(self, what: str) -> int:
        n = self.uvarint()
        if not n:
            raise ValueError(f"{what} is null, and the schema does not allow null there")
        return n - 1

    def compact_nullable_string(self) -> str | None:
        n = self.uvarint()
        return None if not n else str(self.take(n - 1), "utf-8")

    def skip_tagged_fields(self) -> None:
        """Tags this broker does not read (the schemas it serves define none)."""
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())
