"""`headwater events relay` and `headwater cdc` with --schema-registry, end to end through the CLI,
against a secured broker whose HTTP listener (and so its schema registry) asks for a login: the
relay logs in as its --command-config's SASL user, the connector as its URL's user; an
independent AvroDeserializer reads what they wrote."""
import os
import signal
import subprocess
import sys

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from headwater.demo.shopping_cart import Shop
from headwater.eventsourcing import open_store
from headwater.eventsourcing.row_formats import FIELDS
from headwater.testing import BrokerProcess, wait_until

from tests.support.cdc_sources import drained, make_db, query
from tests.support.events_topic import read_topic

PASSWORD = "correct-horse-battery-staple"
SECURITY = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
            "sasl.password": PASSWORD}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    data = tmp_path_factory.mktemp("registry-flag") / "data"
    subprocess.run([sys.executable, "-m", "headwater", "users", "create", "--offline", "--data-dir", str(data),
                    "alice", "--password", PASSWORD, "--iterations", "4096"], check=True, capture_output=True)
    with BrokerProcess(data, "--listener", "SASL_PLAINTEXT://127.0.0.1:0", "--http-listener", "127.0.0.1:0",
                       "--super-user", "User:alice") as proc:
        yield proc


@pytest.fixture(scope="module")
def command_config(secured, tmp_path_factory):
    path = tmp_path_factory.mktemp("registry-flag-config") / "client.properties"
    path.write_text("".join(f"{name}={value}\n" for name, value in SECURITY.items()))
    return str(path)


def headwater(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "headwater", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, output
    return output


def decode(broker, topic):
    """The topic's values, in each partition's order, as an AvroDeserializer logged in as alice reads them."""
    registry = SchemaRegistryClient({"url": broker.console_url, "basic.auth.user.info": f"alice:{PASSWORD}"})
    deserialize, context = AvroDeserializer(registry), SerializationContext(topic, MessageField.VALUE)
    return [deserialize(value, context) for _, _, value in read_topic(broker.bootstrap, topic, SECURITY)]


def test_relay_writes_avro_to_a_registry_behind_the_login(secured, command_config, tmp_path):
    store = open_store(str(tmp_path / "events.db"))
    Shop(store, seed=3).day(carts=4, actions=30)
    stored = {row[0]: dict(zip(FIELDS, row)) for row in store.read_all_rows(0, 10 ** 6)}
    relay = headwater("events", "relay", "--store", str(tmp_path / "events.db"), "--topic", "carts",
                      "--bootstrap-server", secured.bootstrap, "--command-config", command_config,
                      "--schema-registry", secured.console_url)
    try:
        wait_until(lambda: relay.poll() is not None or len(read_topic(secured.bootstrap, "carts", SECURITY))
                   == len(stored), 120, 0.3, "the relay to publish every event")
    finally:
        output = stop(relay)
    records = decode(secured, "carts")
    assert sorted(records, key=lambda r: r["position"]) == [stored[p] for p in sorted(stored)], output
    store.close()


def test_cdc_writes_avro_to_a_registry_behind_the_login(secured, command_config, tmp_path):
    path = str(tmp_path / "shop.db")
    make_db(path, "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO items VALUES (1, 'pen')")
    login = secured.console_url.replace("http://", f"http://alice:{PASSWORD}@")
    cdc = headwater("cdc", "sqlite", "--db", path, "--tables", "items", "--bootstrap-server", secured.bootstrap,
                    "--command-config", command_config, "--schema-registry", login)
    try:
        wait_until(lambda: cdc.poll() is not None or len(read_topic(secured.bootstrap, "shop.main.items", SECURITY))
                   == 1, 120, 0.3, "the snapshot")
        query(path, "INSERT INTO items VALUES (2, 'ink')")
        wait_until(lambda: cdc.poll() is not None or drained(path), 120, 0.3, "the insert")
    finally:
        output = stop(cdc)
    values = decode(secured, "shop.main.items")
    assert sorted((v["op"], v["after"]["id"], v["after"]["name"]) for v in values) == [
        ("c", 2, "ink"), ("r", 1, "pen")], output


@pytest.mark.parametrize("registry", ["wrong password", "nothing listening"])
def test_a_registry_that_does_not_answer_is_one_line(secured, command_config, tmp_path, registry):
    """A wrong login or URL stops the command at its start with one line, before it ships anything."""
    path = str(tmp_path / "shop.db")
    make_db(path, "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO items VALUES (1, 'pen')")
    url = (secured.console_url.replace("http://", "http://alice:wrong@") if registry == "wrong password"
           else "http://127.0.0.1:1")
    done = subprocess.run([sys.executable, "-m", "headwater", "cdc", "sqlite", "--db", path, "--tables", "items",
                           "--bootstrap-server", secured.bootstrap, "--command-config", command_config,
                           "--schema-registry", url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("headwater: error: the schema registry at ") and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
