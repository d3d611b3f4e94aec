"""The SASL exchange as a state machine, step by step in-process: PLAIN, SCRAM-SHA-256/512
against scramp's client (an independent implementation of RFC 5802), and every way to fail."""
from __future__ import annotations

import pytest
from scramp import ScramClient, ScramException

from headwater.broker.security.connection import FailedLogins
from headwater.broker.security.credentials import CredentialStore, make_credential
from headwater.broker.security.sasl import SaslExchange, State
from headwater.protocol.errors import ErrorCode

PASSWORD = "pa,ss=word ü"


@pytest.fixture
def store(tmp_path):
    store = CredentialStore(tmp_path)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        store.set("ann,e=1", mechanism, make_credential(mechanism, PASSWORD, 4096))
    return store


def test_credentials_file_holds_no_password(store):
    text = store.path.read_text()
    assert PASSWORD not in text and "pa,ss" not in text
    assert store.users() == {"ann,e=1": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
    assert store.delete("ann,e=1") and store.users() == {} and not store.delete("ann,e=1")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_step_by_step(store, mechanism):
    exchange = SaslExchange(store)
    assert exchange.state is State.HANDSHAKE and exchange.principal is None
    assert exchange.handshake(mechanism) == ErrorCode.NONE
    assert exchange.state is State.AUTHENTICATING
    client = ScramClient([mechanism], "ann,e=1", PASSWORD)
    first = exchange.authenticate(client.get_client_first().encode())
    assert first.error == ErrorCode.NONE and exchange.state is State.AUTHENTICATING
    client.set_server_first(first.reply.decode())
    final = exchange.authenticate(client.get_client_final().encode())
    assert final.error == ErrorCode.NONE
    client.set_server_final(final.reply.decode())  # the client checks the server's signature
    assert exchange.state is State.AUTHENTICATED and exchange.principal == "User:ann,e=1"
    assert exchange.handshake(mechanism) == ErrorCode.ILLEGAL_SASL_STATE
    assert exchange.authenticate(b"again").error == ErrorCode.ILLEGAL_SASL_STATE


@pytest.mark.parametrize("password, user", [("wrong", "ann,e=1"), (PASSWORD, "nobody")])
def test_scram_wrong_password_or_unknown_user_fails_for_good(store, password, user):
    exchange = SaslExchange(store)
    exchange.handshake("SCRAM-SHA-512")
    client = ScramClient(["SCRAM-SHA-512"], user, password)
    first = exchange.authenticate(client.get_client_first().encode())
    if first.error == ErrorCode.NONE:
        client.set_server_first(first.reply.decode())
        first = exchange.authenticate(client.get_client_final().encode())
    assert first.error == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert exchange.state is State.FAILED and exchange.principal is None and exchange.failure
    assert exchange.authenticate(b"n,,n=ann=2Ce=3D1,r=x").error == ErrorCode.ILLEGAL_SASL_STATE


def test_scram_server_signature_is_checked_by_the_client(store):
    """A server without the right ServerKey cannot fake the final message."""
    exchange = SaslExchange(store)
    exchange.handshake("SCRAM-SHA-256")
    client = ScramClient(["SCRAM-SHA-256"], "ann,e=1", PASSWORD)
    client.set_server_first(exchange.authenticate(client.get_client_first().encode()).reply.decode())
    exchange.authenticate(client.get_client_final().encode())
    with pytest.raises(ScramException):
        client.set_server_final("v=" + "A" * 44)


@pytest.mark.parametrize("token, ok", [
    (b"\0ann,e=1\0" + PASSWORD.encode(), True),
    (b"ann,e=1\0ann,e=1\0" + PASSWORD.encode(), True),
    (b"\0ann,e=1\0wrong", False),
    (b"\0nobody\0" + PASSWORD.encode(), False),
    (b"someone\0ann,e=1\0" + PASSWORD.encode(), False),  # acting as another user
    (b"\0ann,e=1", False),
    (b"\xff\0\xfe\0\xfd", False),
])
def test_plain(store, token, ok):
    exchange = SaslExchange(store)
    assert exchange.handshake("PLAIN") == ErrorCode.NONE
    step = exchange.authenticate(token)
    assert (step.error == ErrorCode.NONE) is ok
    assert exchange.state is (State.AUTHENTICATED if ok else State.FAILED)


def test_handshake_refuses_unknown_and_disabled_mechanisms(store):
    assert SaslExchange(store).handshake("GSSAPI") == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert SaslExchange(store, ("SCRAM-SHA-512",)).handshake("PLAIN") == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert SaslExchange(store).authenticate(b"x").error == ErrorCode.ILLEGAL_SASL_STATE


def test_oversize_token_fails(store):
    exchange = SaslExchange(store)
    exchange.handshake("SCRAM-SHA-256")
    assert exchange.authenticate(b"n,,n=a,r=" + b"x" * 70_000).error == ErrorCode.SASL_AUTHENTICATION_FAILED


def test_failed_logins_slow_a_host_down_until_it_succeeds():
    logins = FailedLogins(0.1)
    delays = [logins.failed("10.0.0.1") for _ in range(9)]
    assert delays == sorted(delays) and delays[0] == 0.1 and delays[-1] == pytest.approx(5.0)
    assert logins.failed("10.0.0.2") == 0.1  # per host
    logins.succeeded("10.0.0.1")
    assert logins.failed("10.0.0.1") == 0.1
