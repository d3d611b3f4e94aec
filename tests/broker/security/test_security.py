"""TLS listeners, mTLS and SASL (PLAIN, SCRAM-SHA-256/512) with real clients: confluent-kafka,
kafka-python and kcat against one broker with a listener of each security protocol."""
from __future__ import annotations

import gc
import json
import logging
import random
import socket
import struct
import subprocess
import sqlite3
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from scramp import ScramClient

from headwater.broker.apis import ADVERTISED
from headwater.cli.main import main
from headwater.fuzzing.corpus import encode_request, valid_requests
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.records import Record, encode_batch
from headwater.testing import BrokerProcess

from tests.support.wire import Wire

PASSWORD = "correct horse battery staple"
USERS = ("alice", "bob", "dave")  # alice is a super user; bob and carol may use every topic and group
CAROL = "User:CN=carol,O=Headwater development"  # the principal of carol's client certificate


def headwater(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater", *args], capture_output=True, text=True, check=True)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """One broker with PLAINTEXT, SSL (mTLS required), SASL_PLAINTEXT and SASL_SSL listeners."""
    base = tmp_path_factory.mktemp("security")
    certs, data = base / "certs", base / "data"
    headwater("certs", "--out", str(certs), "--client", "carol")
    headwater("certs", "--out", str(base / "rogue"), "--client", "mallory")  # a CA the broker does not trust
    for user in USERS:
        headwater("users", "create", "--offline", "--data-dir", str(data), user, "--password", PASSWORD,
                  "--iterations", "4096")
    for principal in ("User:bob", CAROL):
        for resource in ("--topic", "--group"):
            headwater("acls", "add", "--offline", "--data-dir", str(data), "--principal", principal, resource, "*",
                      "--operation", "ALL")
    flags = [a for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL") for a in ("--listener", f"{p}://127.0.0.1:0")]
    proc = BrokerProcess(data, *flags, "--ssl-certfile", str(certs / "broker.pem"),
                         "--ssl-keyfile", str(certs / "broker.key"), "--ssl-cafile", str(certs / "ca.pem"),
                         "--ssl-client-auth", "required", "--num-partitions", "2",
                         "--failed-authentication-delay-ms", "1", "--super-user", "User:alice")  # slowed down, but not this suite
    with proc:
        yield proc, base


def _port(secured, protocol: str) -> int:
    return secured[0].listeners[protocol]


def librdkafka_config(secured, protocol: str, mechanism: str | None = None, user="alice", password=PASSWORD,
                      cert: str | None = None, ca: str = "certs") -> dict:
    _, base = secured
    config = {"bootstrap.servers": f"127.0.0.1:{_port(secured, protocol)}", "security.protocol": protocol}
    if "SSL" in protocol:
        config["ssl.ca.location"] = str(base / ca / "ca.pem")
    if mechanism:
        config.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    if cert:
        config.update({"ssl.certificate.location": str(base / "certs" / f"{cert}.pem"),
                       "ssl.key.location": str(base / "certs" / f"{cert}.key")})
    return config


def _round_trip_confluent(config: dict) -> None:
    """Produce, then consume in a group: what every client of a secured cluster does."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    sent = [f"v{i}".encode() for i in range(20)]
    producer = Producer(config)
    for value in sent:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        while len(got) < len(sent):
            msg = consumer.poll(30)
            assert msg is not None, f"consumed {len(got)} of {len(sent)}"
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        consumer.commit(asynchronous=False)
        committed = consumer.committed(consumer.assignment(), timeout=30)
        assert sum(max(tp.offset, 0) for tp in committed) == len(sent)  # -1001: a partition with nothing
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_confluent_kafka_over_sasl_ssl(secured, mechanism):
    _round_trip_confluent(librdkafka_config(secured, "SASL_SSL", mechanism))


def test_confluent_kafka_over_sasl_plaintext(secured):
    _round_trip_confluent(librdkafka_config(secured, "SASL_PLAINTEXT", "SCRAM-SHA-512", user="bob"))


def test_confluent_kafka_over_mtls(secured):
    _round_trip_confluent(librdkafka_config(secured, "SSL", cert="carol"))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kafka_python_over_sasl_ssl(secured, mechanism):
    _, base = secured
    options = dict(bootstrap_servers=f"127.0.0.1:{_port(secured, 'SASL_SSL')}", security_protocol="SASL_SSL",
                   ssl_cafile=str(base / "certs" / "ca.pem"), sasl_mechanism=mechanism,
                   sasl_plain_username="alice", sasl_plain_password=PASSWORD)
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(**options)
    for i in range(10):
        producer.send(topic, f"m{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, group_id=f"g-{topic}", auto_offset_reset="earliest",
                             consumer_timeout_ms=15000, **options)
    got = []
    for record in consumer:
        got.append(record.value)
        if len(got) == 10:
            break
    consumer.close()
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(10))


def test_kcat_over_sasl_ssl_and_mtls(secured):
    _, base = secured
    sasl = ["-b", f"127.0.0.1:{_port(secured, 'SASL_SSL')}", "-X", "security.protocol=SASL_SSL",
            "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=bob", "-X", f"sasl.password={PASSWORD}",
            "-X", f"ssl.ca.location={base / 'certs' / 'ca.pem'}"]
    mtls = ["-b", f"127.0.0.1:{_port(secured, 'SSL')}", "-X", "security.protocol=SSL",
            "-X", f"ssl.ca.location={base / 'certs' / 'ca.pem'}",
            "-X", f"ssl.certificate.location={base / 'certs' / 'carol.pem'}",
            "-X", f"ssl.key.location={base / 'certs' / 'carol.key'}"]
    for connection in (sasl, mtls):
        topic = f"kc-{uuid.uuid4().hex[:8]}"
        lines = [f"line {i}" for i in range(5)]
        subprocess.run(["kcat", *connection, "-P", "-t", topic], input="\n".join(lines) + "\n", text=True,
                       check=True, timeout=60)
        out = subprocess.run(["kcat", *connection, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                             capture_output=True, text=True, check=True, timeout=60).stdout
        assert sorted(out.splitlines()) == sorted(lines)


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _refused(config: dict) -> str:
    """What a client reports (errors and logs) when it tries to connect; it must never get metadata."""
    errors, collect = [], _Collect()
    logger = logging.getLogger(f"refused-{uuid.uuid4().hex}")
    logger.addHandler(collect)
    admin = AdminClient({**config, "error_cb": errors.append, "logger": logger})
    for _ in range(40):
        admin.poll(0.25)
        if errors:
            break
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=0.5)
    admin.poll(0)
    assert errors, "no connection error reported"
    return "\n".join([*map(str, errors), *collect.lines])


# What librdkafka reports for each refusal: SASL failures with the broker's message; TLS ones only as
# brokers down (the TLS detail goes to its log).
REFUSALS = {
    "wrong password": ("invalid credentials", lambda s: librdkafka_config(s, "SASL_SSL", "SCRAM-SHA-512",
                                                                                  password="wrong")),
    "unknown user": ("invalid credentials", lambda s: librdkafka_config(s, "SASL_SSL", "PLAIN", user="nobody")),
    "wrong mechanism": ("Unsupported SASL mechanism",
                        lambda s: {**librdkafka_config(s, "SASL_PLAINTEXT", "OAUTHBEARER"),
                                   "enable.sasl.oauthbearer.unsecure.jwt": True,
                                   "sasl.oauthbearer.config": "principal=alice"}),
    "plaintext client on TLS": ("", lambda s: {**librdkafka_config(s, "SASL_SSL"),
                                                           "security.protocol": "PLAINTEXT"}),
    "untrusted broker": ("", lambda s: librdkafka_config(s, "SASL_SSL", "PLAIN",
                                                                                    ca="rogue")),
    "no client certificate": ("", lambda s: librdkafka_config(s, "SSL")),
    "untrusted client certificate": ("", lambda s: {**librdkafka_config(s, "SSL"),
                                                       "ssl.certificate.location": str(s[1] / "rogue/mallory.pem"),
                                                       "ssl.key.location": str(s[1] / "rogue/mallory.key")}),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_refused(secured, case):
    expected, config = REFUSALS[case]
    error = _refused(config(secured))
    assert expected.lower() in error.lower(), error
    # The broker keeps serving the clients that do authenticate.
    AdminClient(librdkafka_config(secured, "SASL_SSL", "PLAIN")).list_topics(timeout=30)


def test_wrong_password_is_answered_sasl_authentication_failed_and_closed(secured):
    wire = Wire(f"127.0.0.1:{_port(secured, 'SASL_PLAINTEXT')}")
    assert wire.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    response = wire.request(SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong"), 2)
    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert wire.is_closed()


def test_scram_exchange_over_the_wire_and_mechanism_list(secured):
    wire = Wire(f"127.0.0.1:{_port(secured, 'SASL_PLAINTEXT')}")
    refused = wire.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
    assert refused.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert refused.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert wire.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"), 1).error_code == 0
    client = ScramClient(["SCRAM-SHA-256"], "bob", PASSWORD)
    first = wire.request(SaslAuthenticateRequest(auth_bytes=client.get_client_first().encode()), 1)
    client.set_server_first(first.auth_bytes.decode())
    final = wire.request(SaslAuthenticateRequest(auth_bytes=client.get_client_final().encode()), 1)
    assert final.error_code == 0
    client.set_server_final(final.auth_bytes.decode())  # raises unless the broker proved it knows the key
    assert wire.request(ApiVersionsRequest(), 3).error_code == 0


def test_only_api_versions_and_sasl_before_authentication(secured):
    """Every advertised API but ApiVersions and the SASL exchange closes an unauthenticated
    connection unanswered."""
    port = _port(secured, "SASL_PLAINTEXT")
    allowed = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
    walked = set()
    for seed in valid_requests(ADVERTISED):
        if seed.api.key in allowed:
            continue
        walked.add(seed.api.key)
        wire = Wire(f"127.0.0.1:{port}", timeout=10)
        wire.send_raw(struct.pack(">i", len(seed.frame)) + seed.frame)
        assert wire.is_closed(), f"{seed.name} was answered before authentication"
        wire.close()
    assert walked == set(ADVERTISED) - allowed
    wire = Wire(f"127.0.0.1:{port}")
    assert wire.request(ApiVersionsRequest(), 3).error_code == 0


def test_malformed_sasl_input_fuzzed_broker_keeps_serving(secured):
    port = _port(secured, "SASL_PLAINTEXT")
    rng = random.Random(18)
    scram_first = ScramClient(["SCRAM-SHA-512"], "alice", PASSWORD).get_client_first().encode()
    tokens = [b"", b"\0", b"\0\0\0\0", b"\xff\xfe" * 10, b"n,,n=alice,r=", b"n,,n=,r=x", b"x" * 70000,
              scram_first[:-3], b"p=tls-unique,,n=alice,r=abc", "n,,n=ålice,r=ü".encode()]
    tokens += [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 200))) for _ in range(20)]
    for mechanism in ("PLAIN", "SCRAM-SHA-512"):
        for token in tokens:
            wire = Wire(f"127.0.0.1:{port}", timeout=30)
            assert wire.request(SaslHandshakeRequest(mechanism=mechanism), 1).error_code == 0
            response = wire.request(SaslAuthenticateRequest(auth_bytes=token), 1)
            if response.error_code == 0:  # a valid SCRAM first message: a bad proof must fail
                bad_final = b"c=biws,r=" + response.auth_bytes.split(b",")[0][2:] + b",p=" + b"A" * 88
                response = wire.request(SaslAuthenticateRequest(auth_bytes=bad_final), 1)
            assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, (mechanism, token[:40])
            wire.close()
    # A final message with a nonce that is not the server's.
    wire = Wire(f"127.0.0.1:{port}")
    wire.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)
    wire.request(SaslAuthenticateRequest(auth_bytes=scram_first), 1)
    final = wire.request(SaslAuthenticateRequest(auth_bytes=b"c=biws,r=not-the-nonce,p=" + b"A" * 88), 1)
    assert final.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    # Garbage frames before authentication, then an oversize one.
    for data in (struct.pack(">i", 11) + b"\x00\x11\x00\x01garbage", struct.pack(">i", 600 * 1024) + b"x" * 64):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(data)
            assert sock.recv(1) == b""
    _round_trip_confluent(librdkafka_config(secured, "SASL_PLAINTEXT", "SCRAM-SHA-512"))


# ACLs: dave gets his through the CreateAcls API, from alice (a super user) with confluent-kafka's admin client.

def _acl(resource_type, name, operation, pattern=None, permission=None, principal="User:dave"):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType
    return AclBinding(resource_type, name, pattern or ResourcePatternType.LITERAL, principal, "*",
                      getattr(AclOperation, operation), permission or AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def dave(secured):
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType,
                                       ResourceType)
    admin = AdminClient(librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512"))
    acls = [_acl(ResourceType.TOPIC, "acl-read", "READ"), _acl(ResourceType.GROUP, "acl-group", "READ"),
            _acl(ResourceType.TOPIC, "dave-", "ALL", ResourcePatternType.PREFIXED),
            _acl(ResourceType.TOPIC, "dave-secret", "WRITE", permission=AclPermissionType.DENY)]
    for future in admin.create_acls(acls).values():
        future.result(30)
    described = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:dave",
                                                     None, AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert sorted((a.name, a.operation.name, a.permission_type.name) for a in described) == sorted(
        [("acl-read", "READ", "ALLOW"), ("acl-group", "READ", "ALLOW"), ("dave-", "ALL", "ALLOW"),
         ("dave-secret", "WRITE", "DENY")])
    # alice fills the topics dave is (not) allowed to read
    producer = Producer(librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512"))
    for topic in ("acl-read", "acl-other", "dave-secret"):
        producer.produce(topic, b"from alice")
    assert producer.flush(30) == 0
    return librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512", user="dave")


def _produce_error(config: dict, topic: str):
    results = []
    producer = Producer({**config, "message.timeout.ms": 10000})
    producer.produce(topic, b"by dave", on_delivery=lambda err, msg: results.append(err))
    producer.flush(30)
    return results[0]


def _consume(config: dict, topic: str, group: str):
    """The first message or error a consumer of ``topic`` in ``group`` gets."""
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        for _ in range(30):
            msg = consumer.poll(1)
            if msg is not None:
                return msg
    finally:
        consumer.close()
    raise AssertionError(f"nothing from {topic} in {group}")


def test_read_only_user_cannot_write_it_or_read_another(dave):
    from confluent_kafka import KafkaError
    assert _produce_error(dave, "acl-read").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    msg = _consume(dave, "acl-read", "acl-group")
    assert msg.error() is None and msg.value() == b"from alice"
    denied = _consume(dave, "acl-other", "acl-group")
    assert denied.error() is not None and denied.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_group_without_read_cannot_join(dave):
    from confluent_kafka import KafkaError
    msg = _consume(dave, "acl-read", "not-daves-group")
    assert msg.error() is not None and msg.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_metadata_lists_only_describable_topics(dave, secured):
    daves = set(AdminClient(dave).list_topics(timeout=30).topics)
    everything = set(AdminClient(librdkafka_config(secured, "SASL_SSL", "PLAIN")).list_topics(timeout=30).topics)
    assert {"acl-read", "acl-other", "dave-secret"} <= everything
    assert "acl-read" in daves and "dave-secret" in daves and "acl-other" not in daves
    assert daves == {t for t in everything if t == "acl-read" or t.startswith("dave-")}


def test_prefixed_acl_and_deny_over_allow(dave):
    from confluent_kafka import KafkaError
    assert _produce_error(dave, "dave-notes") is None  # ALL on the prefix dave- (auto-created)
    assert _produce_error(dave, "dave-secret").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # DENY WRITE wins


def test_only_super_users_manage_acls(dave):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import ResourceType
    grant = _acl(ResourceType.TOPIC, "acl-other", "READ")
    admin = AdminClient(dave)
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([grant])[grant].result(30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_read_revoked_mid_fetch_session_stops_the_records(dave, secured):
    """kafka-python fetches within a session (KIP-227), naming no partition once the session is open:
    READ is checked again on what the answer carries, so a revoked grant stops the records at once."""
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, \
        ResourceType
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import TopicAuthorizationFailedError
    topic = f"revoked-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512"))
    for future in admin.create_acls([_acl(ResourceType.TOPIC, topic, "READ")]).values():
        future.result(30)
    producer = Producer(librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512"))
    producer.produce(topic, b"granted", partition=0)
    assert producer.flush(30) == 0
    _, base = secured
    consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{_port(secured, 'SASL_SSL')}", security_protocol="SASL_SSL",
                             ssl_cafile=str(base / "certs" / "ca.pem"), sasl_mechanism="SCRAM-SHA-512",
                             sasl_plain_username="dave", sasl_plain_password=PASSWORD, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    consumer.assign([KafkaTopicPartition(topic, 0)])
    got, denied = [], False
    try:
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got += [m.value for ms in consumer.poll(timeout_ms=500).values() for m in ms]
        assert got == [b"granted"]
        for _ in range(4):   # a few empty incremental fetches: the session is open and quiet
            assert consumer.poll(timeout_ms=200) == {}
        for future in admin.delete_acls([AclBindingFilter(
                ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:dave", None, AclOperation.READ,
                AclPermissionType.ALLOW)]).values():
            future.result(30)
        producer.produce(topic, b"after the grant was revoked", partition=0)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 30
        while not denied and time.monotonic() < deadline:
            try:
                got += [m.value for ms in consumer.poll(timeout_ms=200).values() for m in ms]
            except TopicAuthorizationFailedError:
                denied = True
    finally:
        consumer.close()
    assert got == [b"granted"] and denied


def test_list_and_describe_groups_only_describable(dave, secured):
    _consume(dave, "acl-read", "acl-group")  # dave's group exists
    _consume(librdkafka_config(secured, "SASL_SSL", "PLAIN"), "acl-read", "alices-group")  # and one he may not see
    everyone = AdminClient(librdkafka_config(secured, "SASL_SSL", "PLAIN"))
    all_groups = {g.group_id for g in everyone.list_consumer_groups().result(30).valid}
    admin = AdminClient(dave)
    daves = {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    assert "acl-group" in all_groups and len(all_groups) > 1
    assert daves == {"acl-group"}
    other = sorted(all_groups - daves)[0]
    with pytest.raises(KafkaException):
        admin.describe_consumer_groups([other])[other].result(30)
    assert admin.describe_consumer_groups(["acl-group"])["acl-group"].result(30).group_id == "acl-group"


TOPIC, GROUP, CLUSTER, TXN = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                               ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
HIDDEN, OPEN = "hidden", "open"  # answered without what the principal may not see; answered to everyone
# What a principal without ACLs on the corpus's topic, group and transactional id gets from each API.
# Every API the broker serves must be listed: a new API without an authorization rule fails here.
DENIALS = {
    ApiKey.PRODUCE: TOPIC, ApiKey.FETCH: TOPIC, ApiKey.LIST_OFFSETS: TOPIC, ApiKey.METADATA: TOPIC,
    ApiKey.OFFSET_COMMIT: GROUP, ApiKey.OFFSET_FETCH: GROUP, ApiKey.FIND_COORDINATOR: GROUP,
    ApiKey.JOIN_GROUP: GROUP, ApiKey.HEARTBEAT: GROUP, ApiKey.LEAVE_GROUP: GROUP, ApiKey.SYNC_GROUP: GROUP,
    ApiKey.DESCRIBE_GROUPS: GROUP, ApiKey.LIST_GROUPS: HIDDEN, ApiKey.SASL_HANDSHAKE: OPEN,
    ApiKey.API_VERSIONS: OPEN, ApiKey.CREATE_TOPICS: TOPIC, ApiKey.DELETE_TOPICS: TOPIC,
    ApiKey.DELETE_RECORDS: TOPIC, ApiKey.INIT_PRODUCER_ID: TXN, ApiKey.OFFSET_FOR_LEADER_EPOCH: TOPIC,
    ApiKey.DESCRIBE_ACLS: CLUSTER, ApiKey.CREATE_ACLS: CLUSTER, ApiKey.DELETE_ACLS: CLUSTER,
    ApiKey.DESCRIBE_CONFIGS: TOPIC, ApiKey.ALTER_CONFIGS: TOPIC, ApiKey.DESCRIBE_LOG_DIRS: CLUSTER,
    ApiKey.SASL_AUTHENTICATE: OPEN, ApiKey.DELETE_GROUPS: GROUP, ApiKey.INCREMENTAL_ALTER_CONFIGS: TOPIC,
    ApiKey.ADD_PARTITIONS_TO_TXN: TXN, ApiKey.ADD_OFFSETS_TO_TXN: TXN, ApiKey.END_TXN: TXN, ApiKey.WRITE_TXN_MARKERS: CLUSTER,
    ApiKey.TXN_OFFSET_COMMIT: TXN, ApiKey.DESCRIBE_TRANSACTIONS: TXN, ApiKey.LIST_TRANSACTIONS: HIDDEN,
    ApiKey.CREATE_PARTITIONS: TOPIC, ApiKey.OFFSET_DELETE: GROUP, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: CLUSTER,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: CLUSTER, ApiKey.DESCRIBE_CLUSTER: OPEN, ApiKey.DESCRIBE_PRODUCERS: TOPIC,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: TOPIC, ApiKey.CONSUMER_GROUP_HEARTBEAT: GROUP,
    ApiKey.CONSUMER_GROUP_DESCRIBE: GROUP, ApiKey.SHARE_GROUP_HEARTBEAT: GROUP,
    ApiKey.SHARE_GROUP_DESCRIBE: GROUP, ApiKey.SHARE_FETCH: GROUP, ApiKey.SHARE_ACKNOWLEDGE: GROUP,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: GROUP, ApiKey.ALTER_SHARE_GROUP_OFFSETS: GROUP,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: GROUP,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: CLUSTER, ApiKey.ALTER_CLIENT_QUOTAS: CLUSTER,
}

# Versions before these have no error code to say no with: the answer is empty instead.
ERROR_CODE_SINCE = {ApiKey.DESCRIBE_LOG_DIRS: 3}


def _error_codes(obj) -> set[int]:
    """Every error code anywhere in a decoded response."""
    if isinstance(obj, list):
        return set().union(*map(_error_codes, obj)) if obj else set()
    fields = getattr(obj, "_struct", None)
    if fields is None:
        return set()
    codes = set()
    for name in fields.fields:
        value = getattr(obj, name, None)
        if name.endswith("error_code") and isinstance(value, int):
            codes.add(value)
        elif isinstance(value, list) or hasattr(value, "_struct"):
            codes |= _error_codes(value)
    return codes


def _logged_in(secured, user: str) -> Wire:
    wire = Wire(f"127.0.0.1:{_port(secured, 'SASL_PLAINTEXT')}")
    assert wire.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    token = b"\0" + user.encode() + b"\0" + PASSWORD.encode()
    assert wire.request(SaslAuthenticateRequest(auth_bytes=token), 1).error_code == 0
    return wire


def test_every_api_answers_a_denial_with_kafkas_error_code(dave, secured):
    """dave, authenticated but without ACLs on the corpus's resources, sends every API the broker
    serves, in every version, on one connection: each answers with the authorization error Kafka
    gives for it, and the connection keeps serving."""
    assert set(DENIALS) == set(ADVERTISED), "an API without an expected denial (and authorization rule)"
    wire = _logged_in(secured, "dave")
    for seed in valid_requests(ADVERTISED):
        key = seed.api.key
        expected = HIDDEN if seed.version < ERROR_CODE_SINCE.get(key, 0) else DENIALS[key]
        if key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            continue
        request = seed.decode()
        if key == ApiKey.INIT_PRODUCER_ID:
            request.transactional_id = "fuzz-txn"  # an idempotent producer needs no ACL of its own
        if key == ApiKey.METADATA:
            request.topics[0].name = "fuzz"  # the corpus names it by (the null) id
        if key == ApiKey.DESCRIBE_CLUSTER and seed.version >= 1:
            request.endpoint_type = 1  # brokers (the corpus's 0 is answered UNSUPPORTED_ENDPOINT_TYPE)
        response = wire.request(request, seed.version)
        codes = _error_codes(response) - {0}
        if key in ERROR_CODE_SINCE:
            assert response.results == [], seed.name  # no log dir shown to a principal without the cluster's
        if expected in (OPEN, HIDDEN):
            assert not codes, (seed.name, codes)
        else:
            assert codes == {expected}, (seed.name, codes)
    assert wire.request(ApiVersionsRequest(), 3).error_code == 0


def test_naming_only_denied_topics_shows_no_other_topic(dave, secured):
    """DescribeTopicPartitions naming only a topic dave may not describe answers that denial and
    nothing else: with the denied name taken out the request would mean "every topic"."""
    seed = next(seed for seed in valid_requests(ADVERTISED) if seed.api.key == ApiKey.DESCRIBE_TOPIC_PARTITIONS)
    request = seed.decode()
    request.topics = [type(request.topics[0])(name="acl-other")]
    response = _logged_in(secured, "dave").request(request, seed.version)
    assert [(t.name, t.error_code) for t in response.topics] == [("acl-other", TOPIC)]


def test_share_groups_need_read_on_the_topic(dave, secured):
    """dave may READ the group acl-group but not the topic acl-other: ShareFetch and ShareAcknowledge
    answer its partitions TOPIC_AUTHORIZATION_FAILED, ShareGroupHeartbeat subscribing to it is refused."""
    from kafka.protocol.metadata import MetadataRequest
    alice = _logged_in(secured, "alice")
    topic = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(name="acl-other", topic_id=None)],
                                allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    topic_id = alice.request(topic, 12).topics[0].topic_id
    seeds = {seed.api.key: seed for seed in valid_requests(ADVERTISED)}
    wire = _logged_in(secured, "dave")
    for key in (ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE):
        request = seeds[key].decode()
        request.group_id, request.topics[0].topic_id = "acl-group", topic_id
        response = wire.request(request, seeds[key].version)
        assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in response.responses] == [
            (topic_id, [TOPIC])], key.name
    heartbeat = seeds[ApiKey.SHARE_GROUP_HEARTBEAT].decode()
    heartbeat.group_id, heartbeat.subscribed_topic_names = "acl-group", ["acl-other"]
    assert wire.request(heartbeat, 1).error_code == TOPIC


def test_admin_client_gets_per_resource_denials_and_keeps_serving(dave):
    """confluent-kafka's AdminClient as dave (READ on acl-read and group acl-group, ALL on dave-*):
    each admin call on a resource he may not touch fails with Kafka's error for that resource;
    the same client then does what he may."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                       ResourceType as ConfigType)
    admin = AdminClient(dave)
    own = f"dave-{uuid.uuid4().hex[:8]}"

    def refused(future) -> int:
        with pytest.raises(KafkaException) as error:
            future.result(30)
        return error.value.args[0].code()
    retention = ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
    results = {
        "create": refused(admin.create_topics([NewTopic("acl-elsewhere", 1)])["acl-elsewhere"]),
        "delete": refused(admin.delete_topics(["acl-read"])["acl-read"]),
        "partitions": refused(admin.create_partitions([NewPartitions("acl-read", 4)])["acl-read"]),
        "describe configs": refused(admin.describe_configs([ConfigResource(ConfigType.TOPIC, "acl-other")])[
            ConfigResource(ConfigType.TOPIC, "acl-other")]),
        "alter configs": refused(admin.incremental_alter_configs([ConfigResource(
            ConfigType.TOPIC, "acl-read", incremental_configs=[retention])])[ConfigResource(ConfigType.TOPIC,
                                                                                            "acl-read")]),
        "broker configs": refused(admin.describe_configs([ConfigResource(ConfigType.BROKER, "0")])[
            ConfigResource(ConfigType.BROKER, "0")]),
        "delete records": refused(admin.delete_records([TopicPartition("acl-read", 0, 1)])[
            TopicPartition("acl-read", 0, 1)]),
        "delete group": refused(admin.delete_consumer_groups(["acl-group"])["acl-group"]),
    }
    assert results == {"create": KafkaError.TOPIC_AUTHORIZATION_FAILED, "delete": KafkaError.TOPIC_AUTHORIZATION_FAILED,
                       "partitions": KafkaError.TOPIC_AUTHORIZATION_FAILED,
                       "describe configs": KafkaError.TOPIC_AUTHORIZATION_FAILED,
                       "alter configs": KafkaError.TOPIC_AUTHORIZATION_FAILED,
                       "broker configs": KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                       "delete records": KafkaError.TOPIC_AUTHORIZATION_FAILED,
                       "delete group": KafkaError.GROUP_AUTHORIZATION_FAILED}
    admin.create_topics([NewTopic(own, 1)])[own].result(30)
    configs = admin.describe_configs([ConfigResource(ConfigType.TOPIC, own)])[ConfigResource(ConfigType.TOPIC, own)]
    assert "retention.ms" in configs.result(30)
    admin.delete_topics([own])[own].result(30)


def test_scram_users_through_the_admin_api(secured):
    """confluent-kafka's AdminClient creates a user (it sends only a salted password), who then logs in."""
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)
    admin = AdminClient(librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512"))  # alice, a super user
    upsert = UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 5000), b"erin-pw")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    described = admin.describe_user_scram_credentials(["erin"])["erin"].result(30)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 5000)]
    erin = librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-256", user="erin", password="erin-pw")
    AdminClient(erin).list_topics(timeout=30)  # raises unless erin authenticated
    deletion = UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(30)
    _refused(erin)


def test_transactions_need_write_on_the_transactional_id(secured):
    """alice (a super user) commits a transaction over SASL_SSL; bob, without WRITE on the
    transactional id, is refused TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    from confluent_kafka import KafkaError
    topic = f"t-txn-{uuid.uuid4().hex[:8]}"
    alice = Producer({**librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512"), "transactional.id": "tx-alice"})
    alice.init_transactions(30)
    alice.begin_transaction()
    alice.produce(topic, b"committed")
    alice.commit_transaction(30)
    msg = _consume({**librdkafka_config(secured, "SASL_SSL", "PLAIN"), "isolation.level": "read_committed"},
                   topic, f"g-{topic}")
    assert msg.error() is None and msg.value() == b"committed"
    bob = Producer({**librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512", user="bob"), "transactional.id": "tx-bob"})
    with pytest.raises(KafkaException) as refused:
        bob.init_transactions(30)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


# --- every client-side command takes --command-config ---------------------------------------------

def _command_config(secured, tmp_path, password=PASSWORD) -> str:
    config = librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512", password=password)
    path = tmp_path / "client.properties"
    path.write_text("# a secured broker\n" + "".join(f"{k}={v}\n" for k, v in config.items()
                                                      if k != "bootstrap.servers"))
    return str(path)


def _cli(secured, config: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater", *args, "--bootstrap-server",
                           f"127.0.0.1:{_port(secured, 'SASL_SSL')}", "--command-config", config, "--json"],
                          capture_output=True, text=True, timeout=60)


def test_cli_over_sasl_ssl_with_scram(secured, tmp_path):
    config = librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512")
    topic, group = f"cli-{uuid.uuid4().hex[:8]}", f"cli-group-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1)])[topic].result(10)
    producer = Producer(config)
    for i in range(3):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 1)])
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()
    properties = _command_config(secured, tmp_path)

    listed = _cli(secured, properties, "topics", "list")
    assert listed.returncode == 0, listed.stderr
    assert {"topic": topic, "partitions": 1} in json.loads(listed.stdout)
    described = _cli(secured, properties, "groups", "describe", group)
    assert described.returncode == 0, described.stderr
    offsets = json.loads(described.stdout)["offsets"]
    assert [(o["topic"], o["committed_offset"], o["log_end_offset"], o["lag"]) for o in offsets] == [(topic, 1, 3, 2)]


def test_users_and_acls_over_the_wire(secured, tmp_path):
    """`headwater users` and `headwater acls` ask the running broker (AlterUserScramCredentials,
    CreateAcls, DescribeAcls, DeleteAcls) as Kafka's tools do: a user made so logs in at once."""
    properties = _command_config(secured, tmp_path)  # alice, a super user
    frank = f"frank-{uuid.uuid4().hex[:6]}"
    topic = f"franks-{uuid.uuid4().hex[:6]}"
    created = _cli(secured, properties, "users", "create", frank, "--password", "frank-pw", "--iterations", "4096")
    assert created.returncode == 0, created.stderr
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        AdminClient(librdkafka_config(secured, "SASL_SSL", mechanism, user=frank, password="frank-pw")
                    ).list_topics(timeout=30)  # raises unless frank authenticated
    listed = _cli(secured, properties, "users", "list")
    assert listed.returncode == 0, listed.stderr
    listed = json.loads(listed.stdout)
    assert {"user": frank, "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]} in listed

    grant = _cli(secured, properties, "acls", "add", "--principal", f"User:{frank}", "--operation", "READ",
                 "--operation", "DESCRIBE", "--topic", topic)
    assert grant.returncode == 0, grant.stderr
    mine = json.loads(_cli(secured, properties, "acls", "list", "--principal", f"User:{frank}").stdout)
    assert sorted((a["resource"], a["name"], a["pattern"], a["operation"], a["permission"]) for a in mine) == [
        ("TOPIC", topic, "LITERAL", "DESCRIBE", "ALLOW"), ("TOPIC", topic, "LITERAL", "READ", "ALLOW")]
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType
    from confluent_kafka.admin import ResourceType as WireResource
    everything = AclBindingFilter(WireResource.ANY, None, ResourcePatternType.ANY, f"User:{frank}", None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    admin = AdminClient(librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512"))
    assert len(admin.describe_acls(everything).result(30)) == 2  # the broker holds them, as any admin client sees
    removed = _cli(secured, properties, "acls", "remove", "--principal", f"User:{frank}", "--topic", topic)
    assert removed.returncode == 0, removed.stderr
    assert sorted(a["operation"] for a in json.loads(removed.stdout)) == ["DESCRIBE", "READ"]
    assert admin.describe_acls(everything).result(30) == []

    deleted = _cli(secured, properties, "users", "delete", frank)
    assert deleted.returncode == 0, deleted.stderr
    _refused(librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-512", user=frank, password="frank-pw"))
    unknown = _cli(secured, properties, "users", "delete", frank)
    assert unknown.returncode == 1 and len(unknown.stderr.splitlines()) == 1, unknown.stderr


def test_users_and_acls_offline_need_both_flags(secured, tmp_path):
    for args in (["users", "list", "--data-dir", str(tmp_path)], ["acls", "list", "--offline"]):
        result = subprocess.run([sys.executable, "-m", "headwater", *args], capture_output=True, text=True)
        assert result.returncode == 1 and "--offline and --data-dir go together" in result.stderr


def test_an_offline_edit_of_a_file_that_does_not_parse_is_one_line_and_changes_nothing(tmp_path):
    for file_name, args in (("acls.json", ["acls", "add", "--principal", "User:a", "--topic", "t", "--operation", "READ"]),
                            ("scram-credentials.json", ["users", "create", "a", "--password", "pw"])):
        (tmp_path / file_name).write_text("{not json")
        result = subprocess.run([sys.executable, "-m", "headwater", *args, "--offline", "--data-dir", str(tmp_path)],
                                capture_output=True, text=True)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 1 and len(lines) == 1 and lines[0].startswith("headwater: error: "), result.stderr
        assert file_name in lines[0] and (tmp_path / file_name).read_text() == "{not json"


@pytest.mark.parametrize("command", [("topics", "list"), ("groups", "list"), ("groups", "delete", "g"),
                                     ("acls", "list"), ("users", "list"), ("quotas", "describe"),
                                     ("transactions", "list")], ids=" ".join)
def test_cli_wrong_password_is_one_line(secured, tmp_path, command):
    """The refused login itself, not a wait for the admin call's 30 s timeout or a traceback."""
    refused = _cli(secured, _command_config(secured, tmp_path, password="wrong"), *command)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Authentication failed: invalid credentials" in lines[0], refused.stderr


def test_cli_refused_login_destroys_its_client_before_main_returns(secured, tmp_path, capsys):
    """Left to a collection, the AdminClient outlived `python -m headwater`'s frozen objects into
    the interpreter's finalization and crashed it now and then (tests/cli/test_cli_exit.py)."""
    config = _command_config(secured, tmp_path, password="wrong")
    gc.collect()
    before = {id(o) for o in gc.get_objects() if isinstance(o, AdminClient)}
    gc.disable()  # so that no collection happens to free the client meanwhile
    try:
        assert main(["topics", "list", "--bootstrap-server", f"127.0.0.1:{_port(secured, 'SASL_SSL')}",
                     "--command-config", config]) == 1
        assert [o for o in gc.get_objects() if isinstance(o, AdminClient) and id(o) not in before] == []
    finally:
        gc.enable()
    assert "Authentication failed: invalid credentials" in capsys.readouterr().err


def test_sqlite_connector_ships_changes_over_sasl_ssl(secured, tmp_path):
    db = str(tmp_path / "shop.db")
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO items VALUES (1, 'pen');")
    conn.close()
    prefix = f"shop{uuid.uuid4().hex[:8]}"
    connector = subprocess.Popen([sys.executable, "-m", "headwater", "cdc", "sqlite", "--db", db, "--tables", "items",
                                  "--topic-prefix", prefix, "--positions-topic", f"{prefix}-positions",
                                  "--bootstrap-server", f"127.0.0.1:{_port(secured, 'SASL_SSL')}",
                                  "--command-config", _command_config(secured, tmp_path)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        conn = sqlite3.connect(db)
        conn.execute("INSERT INTO items VALUES (2, 'ink')")
        conn.commit()
        conn.close()
        consumer = Consumer({**librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-256", user="bob"),
                             "group.id": prefix, "auto.offset.reset": "earliest"})
        consumer.subscribe([f"{prefix}.main.items"])
        names, deadline = [], time.monotonic() + 60
        while len(names) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                names.append(json.loads(msg.value())["after"]["name"])
        consumer.close()
    finally:
        connector.terminate()
        connector.wait(30)
    assert sorted(names) == ["ink", "pen"], connector.stderr.read()


def test_share_group_commands_over_sasl_ssl(secured, tmp_path):
    """`groups describe` and `groups list` of a share group: the one-shot client (protocol/request.py)
    logs in with SCRAM over TLS from --command-config; a wrong password and a property it cannot use
    are refused with an error that says so."""
    from headwater.protocol.request import AuthenticationFailed, UnsupportedSecurity, request
    from headwater.protocol.share_messages import ShareGroupHeartbeatRequest
    group = f"share-{uuid.uuid4().hex[:8]}"
    alice = _logged_in(secured, "alice")
    joined = alice.request(ShareGroupHeartbeatRequest(group_id=group, member_id="m1", member_epoch=0, rack_id=None,
                                                      subscribed_topic_names=["acl-read"]), 1)
    assert joined.error_code == 0
    properties = _command_config(secured, tmp_path)
    described = _cli(secured, properties, "groups", "describe", group)
    assert described.returncode == 0, described.stderr
    shown = json.loads(described.stdout)
    assert (shown["type"], [m["member"] for m in shown["members"]]) == ("share", ["m1"])
    listed = _cli(secured, properties, "groups", "list")
    assert listed.returncode == 0, listed.stderr
    assert {"group": group, "state": "stable", "type": "share"} in json.loads(listed.stdout)

    bootstrap = f"127.0.0.1:{_port(secured, 'SASL_SSL')}"
    config = {k: v for k, v in librdkafka_config(secured, "SASL_SSL", "SCRAM-SHA-256").items()
              if k != "bootstrap.servers"}
    assert request(bootstrap, ApiVersionsRequest(), 3, security=config).error_code == 0
    with pytest.raises(AuthenticationFailed, match="Authentication failed"):
        request(bootstrap, ApiVersionsRequest(), 3, security={**config, "sasl.password": "wrong"})
    with pytest.raises(UnsupportedSecurity, match="sasl.jaas.config"):
        request(bootstrap, ApiVersionsRequest(), 3, security={**config, "sasl.jaas.config": "x"})


def test_events_relay_over_sasl_ssl(secured, tmp_path):
    """`headwater events relay --command-config`: the store's events reach the topic over SASL_SSL."""
    from headwater.eventsourcing import NewEvent, open_store
    from headwater.eventsourcing.row_formats import decode_value
    db, topic = str(tmp_path / "events.db"), f"relayed-{uuid.uuid4().hex[:8]}"
    store = open_store(db)
    for i in range(5):
        store.append(f"cart-{i % 2}", [NewEvent("ItemAdded", {"item": i})])
    store.close()
    relay = subprocess.Popen([sys.executable, "-m", "headwater", "events", "relay", "--store", db, "--topic", topic,
                              "--partitions", "1", "--bootstrap-server", f"127.0.0.1:{_port(secured, 'SASL_SSL')}",
                              "--command-config", _command_config(secured, tmp_path)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        consumer = Consumer({**librdkafka_config(secured, "SASL_SSL", "PLAIN", user="bob"),
                             "group.id": topic, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        positions, deadline = [], time.monotonic() + 60
        while len(positions) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                positions.append(decode_value(msg.value())[0])
        consumer.close()
    finally:
        relay.terminate()
        relay.wait(30)
    assert positions == [1, 2, 3, 4, 5], relay.stderr.read()


def test_a_frame_over_512_kib_is_refused_before_sasl_authentication_and_read_after(secured):
    """sasl.server.max.receive.size: the size alone closes the connection before authentication
    (nothing more is sent: the broker allocates nothing for it); once authenticated, the
    connection's frames may be as large as socket.request.max.bytes."""
    Produce = MESSAGE_CLASSES[ApiKey.PRODUCE][0]
    request = Produce(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[Produce.TopicProduceData(
        name="large-after-sasl", partition_data=[Produce.TopicProduceData.PartitionProduceData(
            index=0, records=encode_batch([Record(0, 1_700_000_000_000, None, b"v" * 600_000)]))])])
    frame = encode_request(request, 7, 99)
    early = Wire(f"127.0.0.1:{_port(secured, 'SASL_PLAINTEXT')}")
    early.send_raw(struct.pack(">i", len(frame)))
    assert early.is_closed()
    wire = Wire(f"127.0.0.1:{_port(secured, 'SASL_PLAINTEXT')}")
    assert wire.request(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    assert wire.request(SaslAuthenticateRequest(auth_bytes=b"\0alice\0" + PASSWORD.encode()), 2).error_code == 0
    wire.send_raw(struct.pack(">i", len(frame)) + frame)
    assert struct.unpack_from(">i", wire.recv_frame())[0] == 99   # answered
