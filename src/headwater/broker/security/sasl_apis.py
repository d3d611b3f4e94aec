"""SaslHandshake (17) and SaslAuthenticate (36): the handlers drive the connection's exchange."""
from __future__ import annotations

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from headwater.broker.security import connection
from headwater.protocol.errors import ErrorCode


def _exchange():
    conn = connection.current.get(None)  # None: a handler called in-process, outside any connection
    return conn.sasl if conn is not None else None


async def sasl_handshake(broker, header, request):
    exchange = _exchange()
    if exchange is None:  # a SASL request on a listener without SASL
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    return SaslHandshakeResponse(error_code=exchange.handshake(request.mechanism), mechanisms=list(exchange.enabled))


async def sasl_authenticate(broker, header, request):
    exchange = _exchange()
    if exchange is None:
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                        error_message="this listener does not use SASL", auth_bytes=b"",
                                        session_lifetime_ms=0)
    step = exchange.authenticate(bytes(request.auth_bytes))
    return SaslAuthenticateResponse(error_code=step.error, error_message=step.message, auth_bytes=step.reply,
                                    session_lifetime_ms=0)
