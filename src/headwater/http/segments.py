"""Names as URL path segments: a consumer or share group id may hold any character, `/`
included. A link quotes every reserved character (`/` too, which Jinja's `urlencode`
keeps). The server decodes a request's path before routing, which would turn `%2F` back into
a separator, so `KeepEncodedSeparators` routes on the path with `%2F` (and `%25`, so that a
literal "%2F" in a name stays itself) still encoded, and the `segment` route convertor
decodes them in the one segment it matches.
"""
from __future__ import annotations

import re
from urllib.parse import quote, unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.types import ASGIApp, Receive, Scope, Send

_KEPT = re.compile(r"(%2[fF]|%25)")  # the escapes left encoded for routing


def segment(name: str) -> str:
    """`name` as one path segment: every reserved character quoted."""
    return quote(name, safe="")


def routing_path(raw_path: bytes) -> str:
    """The raw path decoded, except `%2F` and `%25`."""
    pieces = _KEPT.split(raw_path.decode("ascii"))
    return "".join(piece.upper() if i % 2 else unquote(piece) for i, piece in enumerate(pieces))


class SegmentConvertor(Convertor[str]):
    """`{name:segment}`: one segment, decoded; `url_for` quotes it back."""
    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return segment(value)


register_url_convertor("segment", SegmentConvertor())


class KeepEncodedSeparators:
    """ASGI middleware: route on `routing_path`, so `%2F` inside a name does not split it."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw and raw.isascii():
            scope = {**scope, "path": routing_path(raw.split(b"?", 1)[0])}  # some servers keep the query in it
        await self.app(scope, receive, send)
