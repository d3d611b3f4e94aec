"""What an API handler is: the contract between the server and the handlers (the ``*_apis`` modules).

A handler is ``async (broker, header, request) -> response | None``: it gets the broker's
state, the request header and the decoded request body, and returns the response body
(None: no response is sent, as for a produce with acks=0). The server frames and writes it.
"""
from __future__ import annotations

from collections.abc import Awaitable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from headwater.broker.security.authorization import Rule
from headwater.protocol.messages import Api, ApiKey, RequestHeader, api

if TYPE_CHECKING:
    from headwater.broker.broker import Broker


class Handler(Protocol):
    def __call__(self, broker: Broker, header: RequestHeader, request: Any) -> Awaitable[Any | None]: ...


@dataclass(frozen=True)
class Endpoint:
    """One API the broker serves: its versions and message classes, its handler, and the
    authorization rule every request passes before the handler sees it."""
    api: Api
    handle: Handler
    authorize: Rule


def endpoint(key: ApiKey, min_version: int, max_version: int, handle: Handler, authorize: Rule) -> Endpoint:
    return Endpoint(api(key, min_version, max_version), handle, authorize)


# The client address of the connection whose request is being handled (each connection is a task).
client_host: ContextVar[str] = ContextVar("client_host", default="")
