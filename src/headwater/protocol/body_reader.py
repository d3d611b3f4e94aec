"""A cursor over a request body for the decoders written by hand (``fetch_request``,
``produce_request``): each field taken only if the body holds it, nulls refused where Kafka's
schema allows none. Every failure is a ``ValueError``, as the generated decoder's errors are."""
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
            raise ValueError(f"the body ends at byte {len(self.buf)}, a field runs to {end}")
        chunk, self.pos = self.buf[self.pos:end], end
        return chunk

    def unpack(self, fields: struct.Struct) -> tuple:
        return fields.unpack(self.take(fields.size))

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
